"""Quick start: dates in many languages and formats -> ISO dates, learned by a small
character-level attention model in about a minute, with its attention printed.

Everything comes from the package (the data generator in ``attnmt.translation.dates``), so it
runs on a fresh machine without downloads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import numpy as np

from attnmt.data.corpus import read_tsv
from attnmt.seq2seq.inference import Translator
from attnmt.training.quickstart import train_once
from attnmt.translation import dates
from attnmt.viz.text import attention_as_text


def quickstart_config(folder: Path, steps: int, attention: str) -> dict:
    return {
        "experiment_dir": str(folder / "model"),
        "data": {
            "train": {"tsv": str(folder / "data" / "train.tsv")},
            "dev": {"tsv": str(folder / "data" / "dev.tsv")},
            "subwords": {"type": "char", "vocab_size": 200, "joint": False},
            "batch_size": 64,
            "max_length": 60,
        },
        "model": {
            "embedding_size": 64,
            "encoder_hidden": 64,
            "decoder_hidden": 128,
            "attention_size": 64,
            "dropout": 0.1,
            "attention": attention,
        },
        "training": {
            "max_steps": steps,
            "validate_every": max(steps // 2, 1),
            "learning_rate": 0.003,
            "log_every": 25,
            "early_stopping_patience": None,
        },
        "decoding": {"beam": 5, "batch_size": 100},
    }


def run_quickstart(
    folder: Path,
    steps: int = 500,
    attention: str = "bahdanau",
    log: Callable[[str], None] = print,
    progress: bool = True,
) -> dict:
    folder = Path(folder)
    data = dates.write_corpus(folder / "data", n_train=20000, n_dev=300, n_test=300)
    config = train_once(
        folder,
        quickstart_config(folder.resolve(), steps, attention),
        f"a {attention} attention model on {data['train']} ({steps} steps)",
        log,
        progress,
    )

    model = Translator(config.experiment_dir)
    test = read_tsv(data["test"])
    outputs = model.translate(test.sources, beam=1)
    accuracy = float(np.mean([o.text == ref for o, ref in zip(outputs, test.targets)]))
    log(f"exact match on {len(test.sources)} test dates (greedy): {accuracy:.1%}")

    examples = model.translate(dates.EXAMPLES, beam=5)
    for t in examples:
        print(f"\n{t.source}  ->  {t.text}   (score {t.score:.3f})")
        print(attention_as_text(t))
    out = folder / "attention.json"
    out.write_text(
        json.dumps(
            [
                {
                    "source": t.source,
                    "translation": t.text,
                    "source_tokens": t.source_tokens,
                    "tokens": t.tokens,
                    "attention": None if t.attention is None else np.round(t.attention, 4).tolist(),
                }
                for t in examples
            ],
            ensure_ascii=False,
            indent=1,
        ),
        encoding="utf-8",
    )
    log(f"\nattention matrices saved to {out}; model in {config.experiment_dir}")
    log(f"try: attnmt translate {config.experiment_dir} --beam 5 <<< '3 août 1995'")
    return {"accuracy": accuracy, "examples": examples}
