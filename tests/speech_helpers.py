"""Synthetic speech for the tests: each letter a tone of its own pitch, each space a silence, so a
corpus of "utterances" with known transcripts is made in milliseconds, without espeak-ng."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import soundfile

from attnmt.core.config import config_from_dict
from attention_helpers import attention_of

RATE = 16000
LETTERS = "abcd"
PITCH = {letter: 300.0 * 1.6**i for i, letter in enumerate(LETTERS)}  # 300, 480, 768, 1229 Hz


def tone(hz: float, seconds: float, rate: int = RATE) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def tone_utterance(text: str, letter_seconds: float = 0.08, rate: int = RATE) -> np.ndarray:
    pieces = [
        np.zeros(int(letter_seconds * rate), np.float32) if c == " " else tone(PITCH[c], letter_seconds, rate)
        for c in text
    ]
    return np.concatenate(pieces)


def random_texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [
        " ".join("".join(rng.choice(LETTERS) for _ in range(rng.randint(2, 3))) for _ in range(rng.randint(1, 2)))
        for _ in range(n)
    ]


def write_tone_corpus(folder: Path, name: str, texts: list[str], rate: int = RATE) -> Path:
    """folder/NAME.tsv with one WAV file per text in folder/NAME/."""
    (folder / name).mkdir(parents=True, exist_ok=True)
    lines = []
    for i, text in enumerate(texts):
        soundfile.write(folder / name / f"{i}.wav", tone_utterance(text, rate=rate), rate)
        lines.append(f"{name}/{i}.wav\t{text}\n")
    tsv = folder / f"{name}.tsv"
    tsv.write_text("".join(lines), encoding="utf-8")
    return tsv


def speech_config(
    folder: Path,
    train: Path,
    dev: Path | None = None,
    test: Path | None = None,
    steps: int = 150,
    attention: str = "location",
    **sections,
):
    raw = {
        "task": "speech",
        "experiment_dir": str(folder / "exp"),
        "data": {"train": {"tsv": str(train)}, "batch_size": 8, "max_length": 40},
        "speech": {"conv_channels": 8, "n_mels": 40},
        "model": {
            "embedding_size": 32,
            "encoder_hidden": 32,
            "decoder_hidden": 64,
            "attention_size": 32,
            "dropout": 0.0,
            "attention": attention_of(attention, kernel=5, channels=4),
        },
        "training": {
            "max_steps": steps,
            "validate_every": steps,
            "log_every": 25,
            "learning_rate": 0.005,
            "early_stopping_patience": None,
            "threads": 1,
        },
        "decoding": {"beam": 3, "batch_size": 16, "max_length_ratio": 0.3, "max_length_offset": 5},
    }
    if dev is not None:
        raw["data"]["dev"] = {"tsv": str(dev)}
    if test is not None:
        raw["data"]["test"] = {"tsv": str(test)}
    for section, values in sections.items():
        raw[section].update(values)
    return config_from_dict(raw, folder)
