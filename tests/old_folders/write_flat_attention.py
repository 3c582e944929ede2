"""Writes tests/old_folders/flat-attention/: the config.yaml that attnmt writes into a model folder
(config_to_yaml, as prepare and train write it) for models of every attention variant, with what
the model built from it is (weights, shapes, the attention's settings: ``structure``), as the
attnmt of the time wrote and built them. Run with the attnmt whose folders are to be kept loading:

    PYTHONPATH=/path/to/that/checkout/src python tests/old_folders/write_flat_attention.py

The files there were written at commit 2c61382 (main before model.attention became a section, whose
model section held the attention's options as flat fields: ``attention: location``,
``location_kernel: 5``, ...; d21baf7, main a docs commit later, writes the same bytes);
tests/test_old_folders.py loads them with today's code. Paths are written under /old-folders, as in
the other old folders. To check them again: a worktree of that commit, and

    PYTHONPATH=WORKTREE/src python tests/old_folders/write_flat_attention.py && git diff --stat tests/old_folders
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import attnmt  # noqa: F401 (before torch: attnmt sets OpenMP's threads up)
import torch

HERE = Path(__file__).parent / "flat-attention"
TOY_RNN = {"embedding_size": 32, "encoder_hidden": 32, "decoder_hidden": 64, "attention_size": 32}
# name -> the model section of a translation model (TOY_RNN's sizes); "speech": a speech model
MODELS = {
    "none": {"attention": "none"},
    "bahdanau-csparsemax": {"attention": "bahdanau", "attention_normalizer": "csparsemax", "fertility_bound": 1.5},
    # options that attention leaves unused, which that version accepted and wrote
    "bahdanau-unused-options": {
        "attention": "bahdanau",
        "input_feeding": False,
        "location_kernel": 5,
        "location_channels": 4,
        "local_window": 3,
        "coverage_fertility": 0,
    },
    "luong-dot-local-m": {
        "attention": "luong-dot",
        "input_feeding": False,
        "local_attention": "local-m",
        "local_window": 3,
        "attention_normalizer": "sparsemax",
    },
    "luong-concat-local-p": {"attention": "luong-concat", "local_attention": "local-p", "local_window": 2},
    "luong-general": {"attention": "luong-general", "rnn_type": "lstm", "location_kernel": 5},
    "luong-location": {"attention": "luong-location", "max_positions": 64, "attention_normalizer": "entmax15"},
    "location": {"attention": "location", "location_kernel": 5, "location_channels": 4, "decoder_init": "zeros"},
    "coverage-fertility": {
        "attention": "coverage",
        "coverage_fertility": 2,
        "attention_normalizer": "csparsemax",
        "fertility_bound": 1.0,
    },
    "coverage-nn": {"attention": "coverage", "coverage_dim": 4, "input_feeding": False},
    "transformer": {"type": "transformer", "d_model": 32, "heads": 2, "feed_forward": 64},
    "speech": {"attention": "location", "location_kernel": 5, "location_channels": 4},
}
VOCABULARY = 40


def raw_config(name: str, model: dict) -> dict:
    folder = Path("/old-folders") / name
    sizes = {} if model.get("type") == "transformer" else TOY_RNN
    raw = {
        "experiment_dir": str(folder / "exp"),
        "data": {
            "train": {"tsv": str(folder / "train.tsv")},
            "subwords": {"type": "char", "vocab_size": VOCABULARY, "joint": True},
            "batch_size": 32,
        },
        "model": {**sizes, "dropout": 0.0, **model},
        "training": {"max_steps": 2, "validate_every": 2, "threads": 1},
        "decoding": {"beam": 3},
    }
    if name == "speech":
        raw |= {"task": "speech", "speech": {"conv_channels": 8, "n_mels": 40}}
        raw["data"]["subwords"] = {"type": "char", "vocab_size": VOCABULARY, "joint": False}
    return raw


def built(config):
    """The model of a config, as training builds it (attnmt.seq2seq.model, attnmt.speech.model)."""
    from attnmt.seq2seq.model import build_model
    from attnmt.speech.model import build_speech_model

    torch.manual_seed(0)
    if config.task == "speech":
        return build_speech_model(config.model, config.speech, VOCABULARY)
    return build_model(config.model, VOCABULARY, VOCABULARY)


def structure(model) -> dict:
    """What a built model is: its weights' shapes, its decoder's path and its attention's settings
    (what the weights do not show: the normalizer, its bound, local attention's kind and D)."""
    found = {"weights": {name: "x".join(map(str, t.shape)) for name, t in model.state_dict().items()}}
    decoder = getattr(model, "decoder", None)
    attention = getattr(decoder, "attention", None)
    if hasattr(decoder, "path"):
        found["path"] = decoder.path
    if attention is not None:
        found["attention"] = {
            "class": type(attention).__name__,
            "normalizer": attention.normalizer,
            "fertility_bound": attention.fertility_bound,
            "coverage_dim": attention.coverage_dim,
            "query_is_previous_state": attention.query_is_previous_state,
            "reads_step": attention.reads_step,
            "kind": getattr(attention, "kind", None),
            "D": getattr(attention, "D", None),
            "scorer": type(attention.scorer).__name__ if hasattr(attention, "scorer") else None,
            "fertility": getattr(attention, "fertility", None),
        }
    return found


def forward(model) -> dict:
    """Sums of squares of what the model, as built (seed 0), computes of a fixed batch by teacher forcing: its
    scores and attention weights (a translation model's; a speech model's none)."""
    if type(model).__name__ == "SpeechModel":
        return {}
    generator = torch.Generator().manual_seed(1)
    src = torch.randint(4, VOCABULARY, (2, 7), generator=generator)
    tgt = torch.randint(4, VOCABULARY, (2, 6), generator=generator)
    tgt[:, 0] = 2  # BOS
    model.eval()
    with torch.no_grad():
        scores, weights = model(src, torch.tensor([7, 5]), tgt)
    return {
        name: None if t is None else round(float(t.double().square().sum()), 6)
        for name, t in (("scores", scores), ("weights", weights))
    }


def main():
    from attnmt.core.config import config_from_dict, config_to_yaml

    HERE.mkdir(exist_ok=True)
    for name, model in MODELS.items():
        config = config_from_dict(raw_config(name, model), Path("/"))
        (HERE / f"{name}.yaml").write_text(config_to_yaml(config), encoding="utf-8")
        name_of = getattr(config.model, "attention_name", None)
        model = built(config)
        record = {"attention_name": name_of, **structure(model), "forward": forward(model)}
        (HERE / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        print(name, name_of, file=sys.stderr)


if __name__ == "__main__":
    main()
