"""`attnmt quickstart --speech`: a spoken corpus synthesized with espeak-ng, a small listen-attend-
spell model with location-aware attention trained on it in a few minutes, its CER and WER on
held-out speech (half of it unseen voices and speeds), and one alignment drawn in the terminal.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import numpy as np

from attnmt.speech import corpora as speech
from attnmt.speech.audio import read_speech_tsv
from attnmt.speech.error_rates import format_speech_report, speech_test_set_reports
from attnmt.speech.recognizer import Recognizer
from attnmt.training.quickstart import train_once
from attnmt.viz.text import attention_as_text


def speech_config(folder: Path, data: dict[str, Path], steps: int, attention: str) -> dict:
    """``data``: the TSV files "train", "dev" and any number of test sets by name."""
    tests = {name: {"tsv": str(path)} for name, path in data.items() if name not in ("train", "dev")}
    return {
        "task": "speech",
        "experiment_dir": str(folder / "model"),
        "data": {
            "train": {"tsv": str(data["train"])},
            "dev": {"tsv": str(data["dev"])},
            "test": tests,
            "batch_size": 32,
            "max_length": 80,
        },
        # CTC beside the decoder's loss makes each encoder state carry its own stretch of audio, and
        # without a summary of the audio in its first state (decoder_init: zeros) the decoder must find it
        # by attention: the attention walks along the audio (docs/speech.md). CTC needs ~2 states a character.
        "speech": {"subsample": 4, "ctc_weight": 0.3},
        "model": {
            "embedding_size": 128,
            "encoder_hidden": 128,
            "encoder_layers": 2,
            "decoder_hidden": 256,
            "attention_size": 128,
            "dropout": 0.1,
            "attention": {"type": "location", "kernel": 15} if attention == "location" else attention,
            "decoder_init": "zeros",
        },
        "training": {
            "max_steps": steps,
            "validate_every": max(steps // 3, 1),
            "learning_rate": 0.002,
            "log_every": 25,
            "early_stopping_patience": None,
        },
        # ~15 characters a second of speech, 100 frames a second: 0.3 characters a frame is ample
        "decoding": {"beam": 5, "batch_size": 64, "max_length_ratio": 0.3, "max_length_offset": 10},
    }


def time_axis(states: int, seconds_per_state: float) -> str:
    """A header marking every second along the encoder states: "0    .    1    ..."."""
    marks = []
    for i in range(states):
        t = i * seconds_per_state
        whole = int(t + 1e-9)
        marks.append(
            str(whole % 10)
            if abs(t - whole) < seconds_per_state / 2
            else "."
            if abs(t * 10 - round(t * 10)) < seconds_per_state * 5 and round(t * 10) % 5 == 0
            else " "
        )
    return "".join(marks)


def run_speech_quickstart(
    folder: Path,
    steps: int = 800,
    attention: str = "location",
    log: Callable[[str], None] = print,
    progress: bool = True,
    sizes: tuple[int, int, int] = (2500, 150, 300),
) -> dict:
    """``sizes``: utterances of the training, dev and test sets."""
    folder = Path(folder).resolve()
    data = speech.write_spoken_corpus(folder / "data", *sizes, log=log)
    config = train_once(
        folder,
        speech_config(folder, data, steps, attention),
        f"a speech model with {attention} attention on {data['train']} ({steps} steps)",
        log,
        progress,
    )

    model = Recognizer(config.experiment_dir)
    report = speech_test_set_reports(model, model.test_sets, beam=1, log=log, progress=progress)["test"]
    hypotheses = report.pop("hypotheses")
    log(
        f"\nheld-out speech (half of it by voices and speeds not heard in training), greedy:\n"
        f"{format_speech_report(report)}"
    )
    paths, texts = read_speech_tsv(data["test"])
    for path, text, hypothesis in list(zip(paths, texts, hypotheses))[:3]:
        log(f"  {path}: {text!r} -> {hypothesis!r}")
    [example] = model.transcribe([data["test"].parent / paths[1]], beam=5)
    seconds_per_state = example.frames_per_state * example.hop_ms / 1000
    print(f"\n{paths[1]} ({texts[1]!r})  ->  {example.text!r}   (score {example.score:.3f})")
    print(
        f"each row an output character, each column {seconds_per_state * 1000:.0f} ms of audio "
        "(digits mark seconds, dots half seconds):"
    )
    print(attention_as_text(example, header=time_axis(len(example.source_tokens), seconds_per_state)))
    out = folder / "attention.json"
    out.write_text(
        json.dumps(
            {
                "audio": str(paths[1]),
                "transcript": example.text,
                "tokens": example.tokens,
                "state_times": example.source_tokens,
                "attention": np.round(example.attention, 4).tolist(),
            },
            ensure_ascii=False,
        ),
        encoding="utf-8",
    )
    log(f"\nattention saved to {out}; model in {config.experiment_dir}")
    log(f"try: attnmt plot {config.experiment_dir} {data['test'].parent / paths[1]} --out alignment.png")
    return {"report": report, "example": example}
