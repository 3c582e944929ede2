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

from attnmt.api import Translation, load
from attnmt.core.checkpoint import read_trainer_state
from attnmt.core.config import Config, config_from_dict, config_to_yaml
from attnmt.data.corpus import read_tsv
from attnmt.training import train
from attnmt.translation import dates

SHADES = " ░▒▓█"


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
        "model": {"embedding_size": 64, "encoder_hidden": 64, "decoder_hidden": 128,
                  "attention_size": 64, "dropout": 0.1, "attention": attention},
        "training": {"max_steps": steps, "validate_every": max(steps // 2, 1), "learning_rate": 0.003,
                     "log_every": 25, "early_stopping_patience": None},
        "decoding": {"beam": 5, "batch_size": 100},
    }


def _label(piece: str) -> str:
    return "␣" if piece in ("▁", " ") else ("$" if piece == "</s>" else piece.replace("▁", "")[:1] or "?")


def attention_as_text(translation: Translation, header: str | None = None) -> str:
    """The attention matrix drawn with shade characters: one row per output token, one column per
    source token (``header`` labels the columns; default: the source tokens' first characters)."""
    if translation.attention is None:
        return "(no attention: this model reads one fixed context vector)"
    columns = list(header) if header is not None else [_label(p) for p in translation.source_tokens]
    return shades([_label(p) for p in translation.tokens], columns, translation.attention)


def shades(rows: list[str], columns: list[str], matrix) -> str:
    """A matrix of weights in [0, 1] drawn with shade characters, one cell per (row, column), under
    the column labels (written downwards when longer than one character)."""
    width = max(5, *(len(r) for r in rows))
    header = [" " * (width + 1) + "".join(c[k] if k < len(c) else " " for c in columns)
              for k in range(max(len(c) for c in columns))]
    lines = header + [f"{label:>{width}} " + "".join(shade(w) for w in weights) for label, weights in zip(rows, matrix)]
    return "\n".join(lines)


def shade(weight: float) -> str:
    return SHADES[min(int(weight * len(SHADES)), len(SHADES) - 1)]


def train_once(folder: Path, raw_config: dict, what: str, log: Callable[[str], None], progress: bool) -> Config:
    """The quick start's model trained to the config's steps: from the start, or on from the
    checkpoint of a run that stopped short of them (Ctrl-C saves one), with the config written to
    FOLDER/config.yaml. A model trained that far already is used as it is, config.yaml untouched."""
    config = config_from_dict(raw_config, Path("."))
    last = config.experiment_dir / "last.safetensors"
    trained = read_trainer_state(last) if last.exists() else None
    steps = config.training.max_steps
    if trained is not None and (trained["step"] >= steps or trained.get("stopped_early")):
        log(f"{config.experiment_dir} is already trained ({trained['step']} steps); delete {folder} to train again")
        return config
    (folder / "config.yaml").write_text(config_to_yaml(config), encoding="utf-8")
    if trained is None:
        log(f"training {what}")
    else:
        log(f"resuming the quick start stopped at step {trained['step']} of {steps}: {what}")
    train(config, resume=trained is not None, log=log, progress=progress)
    return config


def run_quickstart(folder: Path, steps: int = 500, attention: str = "bahdanau",
                   log: Callable[[str], None] = print, progress: bool = True) -> dict:
    folder = Path(folder)
    data = dates.write_corpus(folder / "data", n_train=20000, n_dev=300, n_test=300)
    config = train_once(folder, quickstart_config(folder.resolve(), steps, attention),
                        f"a {attention} attention model on {data['train']} ({steps} steps)", log, progress)

    model = load(config.experiment_dir)
    test = read_tsv(data["test"])
    outputs = model.translate(test.sources, beam=1)
    accuracy = float(np.mean([o.text == ref for o, ref in zip(outputs, test.targets)]))
    log(f"exact match on {len(test.sources)} test dates (greedy): {accuracy:.1%}")

    examples = model.translate(dates.EXAMPLES, beam=5)
    for t in examples:
        print(f"\n{t.source}  ->  {t.text}   (score {t.score:.3f})")
        print(attention_as_text(t))
    out = folder / "attention.json"
    out.write_text(json.dumps([{"source": t.source, "translation": t.text, "source_tokens": t.source_tokens,
                                "tokens": t.tokens, "attention": None if t.attention is None
                                else np.round(t.attention, 4).tolist()} for t in examples],
                              ensure_ascii=False, indent=1), encoding="utf-8")
    log(f"\nattention matrices saved to {out}; model in {config.experiment_dir}")
    log(f"try: attnmt translate {config.experiment_dir} --beam 5 <<< '3 août 1995'")
    return {"accuracy": accuracy, "examples": examples}
