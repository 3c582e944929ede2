"""A synthetic sentence-pair task whose right attention is known in advance, and ``attnmt
quickstart --pairs``, which trains the decomposable attention model on it in under a minute.

A premise describes a scene: "three red dogs are running in the park". Its hypothesis repeats it,
perhaps in another order ("in the park , three red dogs are running"), with at most one change:

    ENTAILMENT     the same scene, or without the premise's size adjective ("small")
    CONTRADICTION  another number, colour or activity, or a negation ("are not running")
    NEUTRAL        a size adjective the premise does not have: it may or may not hold

What the attention should find is known in advance: the word added to the hypothesis (NEUTRAL:
"old") or dropped from the premise (ENTAILMENT: "small"). The premise's words, comparing
themselves with the hypothesis, attend to its added word; the hypothesis's words attend to the
premise's dropped word (``focus`` reads this off a result, and the tests check it). A swapped
or negated word (CONTRADICTION: "red" -> "blue", "are not") is told apart without the attention
marking it: the sums of the aggregate step already differ by those words (docs/decomposable.md).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Callable

import numpy as np

NUMBERS = ["two", "three", "four", "five", "six", "seven", "eight", "nine"]
COLOURS = ["red", "blue", "green", "yellow", "black", "white", "brown", "grey"]
SIZES = ["small", "big", "young", "old"]
NOUNS = ["dogs", "cats", "horses", "birds", "children", "men", "women", "cows"]
ACTIVITIES = ["running", "sitting", "sleeping", "playing", "jumping", "standing", "eating", "waiting"]
PLACES = ["park", "beach", "street", "garden", "field", "yard", "river", "house"]
LABELS = ["CONTRADICTION", "ENTAILMENT", "NEUTRAL"]

EXAMPLES = [
    ("three red dogs are running in the park", "three blue dogs are running in the park"),
    ("five small white cats are sleeping in the house", "in the house , five white cats are sleeping"),
    ("two black horses are eating in the field", "two black horses are not eating in the field"),
    ("four green birds are waiting in the garden", "in the garden , four old green birds are waiting"),
]


def scene(rng: random.Random) -> dict:
    return {"number": rng.choice(NUMBERS), "size": rng.choice(SIZES) if rng.random() < 0.5 else None,
            "colour": rng.choice(COLOURS), "noun": rng.choice(NOUNS), "activity": rng.choice(ACTIVITIES),
            "place": rng.choice(PLACES), "negated": False}


def sentence(s: dict, place_first: bool = False) -> str:
    subject = " ".join(w for w in (s["number"], s["size"], s["colour"], s["noun"]) if w)
    verb = f"are {'not ' if s['negated'] else ''}{s['activity']}"
    place = f"in the {s['place']}"
    return f"{place} , {subject} {verb}" if place_first else f"{subject} {verb} {place}"


def other(rng: random.Random, words: list[str], word: str) -> str:
    return rng.choice([w for w in words if w != word])


def variant(premise: dict, rng: random.Random) -> tuple[dict, dict, str]:
    """The premise scene (without its size for NEUTRAL), a hypothesis scene, and its label."""
    h, label = dict(premise), rng.choice(LABELS)
    if label == "ENTAILMENT":
        if premise["size"] and rng.random() < 0.5:
            h["size"] = None
    elif label == "CONTRADICTION":
        change = rng.choice(["number", "colour", "activity", "negated"])
        h[change] = True if change == "negated" else \
            other(rng, {"number": NUMBERS, "colour": COLOURS, "activity": ACTIVITIES}[change], premise[change])
    else:  # NEUTRAL: a detail the premise leaves open
        premise = {**premise, "size": None}
        h["size"] = rng.choice(SIZES)
    return premise, h, label


def make_pairs(n: int, seed: int) -> list[tuple[str, str, str]]:
    """``n`` (premise, hypothesis, label) triples."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        premise, h, label = variant(scene(rng), rng)
        pairs.append((sentence(premise), sentence(h, place_first=rng.random() < 0.5), label))
    return pairs


def write_corpus(folder: Path, n_train: int = 20000, n_dev: int = 500, n_test: int = 500) -> dict[str, Path]:
    """premise<TAB>hypothesis<TAB>label files train.tsv, dev.tsv and test.tsv (disjoint seeds)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for seed, (name, n) in enumerate((("train", n_train), ("dev", n_dev), ("test", n_test)), start=1):
        paths[name] = folder / f"{name}.tsv"
        paths[name].write_text("".join("\t".join(triple) + "\n" for triple in make_pairs(n, seed)), encoding="utf-8")
    return paths


# ------------------------------------------------------------------------------ quickstart --pairs


def quickstart_config(folder: Path, steps: int) -> dict:
    return {
        "experiment_dir": str(folder / "model"),
        "task": "pairs",
        "data": {"train": {"tsv": str(folder / "data" / "train.tsv")},
                 "dev": {"tsv": str(folder / "data" / "dev.tsv")},
                 "test": {"tsv": str(folder / "data" / "test.tsv")},
                 "subwords": {"type": "word", "vocab_size": 100}, "batch_size": 64},
        "model": {"embedding_size": 32, "hidden_size": 64, "dropout": 0.0},
        # one thread: these products are too small to gain from more, and lose much on a busy machine
        "training": {"max_steps": steps, "validate_every": max(steps // 4, 1), "learning_rate": 0.003,
                     "log_every": 25, "early_stopping_patience": None, "threads": 1},
    }


def run_pair_quickstart(folder: Path, steps: int = 600, log: Callable[[str], None] = print,
                        progress: bool = True) -> dict:
    """Writes the synthetic corpus, trains the model on it, prints its test accuracy and the
    attention of a few examples; returns {"accuracy", "examples"}."""
    from attnmt.api import load
    from attnmt.tasks.quickstart import shades, train_once

    folder = Path(folder)
    data = write_corpus(folder / "data")
    config = train_once(folder, quickstart_config(folder.resolve(), steps),
                        f"the decomposable attention model on {data['train']} ({steps} steps)", log, progress)
    model = load(config.experiment_dir)
    report = model.evaluate(model.test_sets["test"])
    log(f"accuracy on {report['pairs']} test pairs: {report['accuracy']:.1%}")
    examples = model.classify(EXAMPLES)
    for r in examples:
        chances = ", ".join(f"{label} {p:.2f}" for label, p in r.probabilities.items())
        looked_at = focus(r)
        print(f"\npremise     {r.premise}\nhypothesis  {r.hypothesis}\n  -> {r.label}  ({chances})\n"
              f"  the premise's words look at '{looked_at[0]}', the hypothesis's at '{looked_at[1]}'")
        print(shades([_word(t) for t in r.premise_tokens], [_word(t) for t in r.hypothesis_tokens],
                     r.premise_attention))
    out = folder / "attention.json"
    out.write_text(json.dumps([{"premise": r.premise, "hypothesis": r.hypothesis, "label": r.label,
                                "probabilities": r.probabilities, "premise_tokens": r.premise_tokens,
                                "hypothesis_tokens": r.hypothesis_tokens,
                                "premise_attention": np.round(r.premise_attention, 4).tolist(),
                                "hypothesis_attention": np.round(r.hypothesis_attention, 4).tolist()}
                               for r in examples], ensure_ascii=False, indent=1), encoding="utf-8")
    log(f"\nrows: premise words; columns: hypothesis words; each row is what its word attends to "
        f"(softmax over the hypothesis).\nattention matrices saved to {out}; model in {config.experiment_dir}")
    log(f"try: printf 'two red cats are sleeping\\ttwo cats are sleeping\\n' | attnmt classify {config.experiment_dir}")
    return {"accuracy": report["accuracy"], "examples": examples}


def focus(result) -> tuple[str, str]:
    """The hypothesis word the premise's words attend to most (summed over them) and the premise
    word the hypothesis's words attend to most: where each side of the pair looks in the other."""
    from_premise = result.premise_attention.sum(axis=0).argmax()
    from_hypothesis = result.hypothesis_attention.sum(axis=1).argmax()
    return _word(result.hypothesis_tokens[from_premise]), _word(result.premise_tokens[from_hypothesis])


def _word(piece: str) -> str:
    return "</s>" if piece == "</s>" else piece.replace("\u2581", "")
