"""A synthetic sentence-pair task whose right attention is known in advance, and ``attnmt
quickstart --pairs``, which trains the decomposable attention model on it in a minute or two.

A premise describes a scene of one or two groups: "three red dogs are running in the park", "three
red dogs and two blue cats are running in the park". Its hypothesis repeats it, perhaps in another
order ("in the park , two blue cats and three red dogs are running"), with at most one change:

    ENTAILMENT     the same scene, without a size word ("small"), or with a word replaced by a more
                   general one ("three" -> "3", "red" -> "bright", "dogs" -> "animals",
                   "running" -> "moving"; two groups: both their colours or numbers so)
    CONTRADICTION  another number, colour, noun or activity, a general word that does not cover
                   the premise's ("red" -> "dark"), "are not", or two groups' colours or numbers
                   exchanged (as they are or in general words: the same words as the premise, or
                   as an entailed hypothesis)
    NEUTRAL        a size word the premise does not have: it may or may not hold

Whether a replaced word is entailed depends on which word replaced it, so the model gains from
aligning each word with its counterpart; the attention should show it: for pairs that differ in
one word, that word's row attends most to its counterpart ("red" -> "blue"; ``counterpart_found``;
tests/test_pair_quickstart.py). The exchanged pairs need word order, which the model without
intra-sentence attention lacks (docs/decomposable.md).
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
ACTIVITIES = ["running", "sitting", "sleeping", "playing", "jumping", "standing", "dancing", "waiting"]
PLACES = ["park", "beach", "street", "garden", "field", "yard", "river", "house"]
LABELS = ["CONTRADICTION", "ENTAILMENT", "NEUTRAL"]
# A word that says less (a digit says the same): "three red dogs" entails "3 bright animals" word by
# word, and contradicts "3 dark people"; whether a changed word is entailed depends on its counterpart.
GENERAL = {
    **{n: str(d) for d, n in enumerate(NUMBERS, start=2)},
    **{c: "dark" for c in ("black", "brown", "grey", "blue")},
    **{c: "bright" for c in ("white", "yellow", "red", "green")},
    **{n: "animals" for n in ("dogs", "cats", "horses", "birds", "cows")},
    **{n: "people" for n in ("children", "men", "women")},
    **{a: "moving" for a in ("running", "playing", "jumping", "dancing")},
    **{a: "resting" for a in ("sitting", "sleeping", "standing", "waiting")},
}

EXAMPLES = [
    ("three red dogs are running in the park", "three blue dogs are running in the park"),
    ("three red dogs are running in the park", "in the park , three bright dogs are running"),
    ("five small white cats are sleeping in the house", "in the house , five small white animals are sleeping"),
    ("two black horses are dancing in the field", "two black horses are not dancing in the field"),
    ("four green birds are waiting in the garden", "in the garden , four old green birds are waiting"),
]


def entity(rng: random.Random, colours: list[str], nouns: list[str]) -> dict:
    return {
        "number": rng.choice(NUMBERS),
        "size": rng.choice(SIZES) if rng.random() < 0.5 else None,
        "colour": rng.choice(colours),
        "noun": rng.choice(nouns),
    }


def scene(rng: random.Random) -> dict:
    """One group of animals or people ("three red dogs"), or two of them ("three red dogs and two
    blue cats") with different colours and nouns, doing one thing in one place."""
    first = entity(rng, COLOURS, NOUNS)
    entities = [first]
    if rng.random() < 0.5:
        entities.append(
            entity(rng, [c for c in COLOURS if c != first["colour"]], [n for n in NOUNS if n != first["noun"]])
        )
    return {"entities": entities, "activity": rng.choice(ACTIVITIES), "place": rng.choice(PLACES), "negated": False}


def sentence(s: dict, place_first: bool = False, reverse: bool = False) -> str:
    """The scene in words; ``reverse`` names two groups in the other order (the same scene)."""
    groups = s["entities"][::-1] if reverse else s["entities"]
    subject = " and ".join(" ".join(w for w in (e["number"], e["size"], e["colour"], e["noun"]) if w) for e in groups)
    verb = f"are {'not ' if s['negated'] else ''}{s['activity']}"
    place = f"in the {s['place']}"
    return f"{place} , {subject} {verb}" if place_first else f"{subject} {verb} {place}"


def other(rng: random.Random, words: list[str], *taken: str) -> str:
    return rng.choice([w for w in words if w not in taken])


WORDS = {"number": NUMBERS, "colour": COLOURS, "noun": NOUNS}


def copy(s: dict) -> dict:
    return {**s, "entities": [dict(e) for e in s["entities"]]}


def changed_word(premise: dict, rng: random.Random, entailed: bool) -> dict:
    """The premise scene with one word replaced: by its more general word (``entailed``), or by a
    word that contradicts it: another number, colour, noun or activity than any in the scene, or a
    general word that does not cover it ("red" -> "dark")."""
    h = copy(premise)
    attribute = rng.choice(["number", "colour", "noun", "activity"])
    if attribute == "activity":
        word, taken, words, put = premise["activity"], [premise["activity"]], ACTIVITIES, h.__setitem__
    else:
        k = rng.randrange(len(h["entities"]))
        word, taken, words = h["entities"][k][attribute], [e[attribute] for e in h["entities"]], WORDS[attribute]
        put = h["entities"][k].__setitem__
    if entailed:
        put(attribute, GENERAL[word])
    elif rng.random() < 0.5 or attribute == "number":  # a number's general word is a digit: of another number
        replacement = other(rng, words, *taken)
        put(attribute, GENERAL[replacement] if attribute == "number" and rng.random() < 0.5 else replacement)
    else:
        put(attribute, other(rng, sorted(set(GENERAL[w] for w in words)), GENERAL[word]))
    return h


def two_general(premise: dict, attribute: str, exchange: bool) -> dict:
    """Both groups' ``attribute`` in general words, exchanged between the groups or not."""
    h = copy(premise)
    words = [GENERAL[e[attribute]] for e in premise["entities"]]
    for e, word in zip(h["entities"], words[::-1] if exchange else words):
        e[attribute] = word
    return h


def exchanged(premise: dict, rng: random.Random) -> dict:
    """Two groups with their colours or numbers exchanged, as they are or in general words (when
    these differ): the same words as the premise, or as the entailed hypothesis with general words."""
    entities = premise["entities"]
    attribute = "colour" if entities[0]["number"] == entities[1]["number"] or rng.random() < 0.5 else "number"
    if GENERAL[entities[0][attribute]] != GENERAL[entities[1][attribute]] and rng.random() < 0.5:
        return two_general(premise, attribute, exchange=True)
    h = copy(premise)
    h["entities"][0][attribute], h["entities"][1][attribute] = entities[1][attribute], entities[0][attribute]
    return h


def contradiction(premise: dict, rng: random.Random) -> dict:
    """The premise scene with one word changed (``changed_word``) or "are not", or, with two groups,
    their colours or numbers exchanged: the same words, so that only aligning each group with its
    counterpart tells the scenes apart."""
    entities = premise["entities"]
    if len(entities) == 2 and rng.random() < 0.5:
        return exchanged(premise, rng)
    if rng.random() < 0.2:
        return {**copy(premise), "negated": True}
    return changed_word(premise, rng, entailed=False)


def variant(premise: dict, rng: random.Random) -> tuple[dict, dict, str]:
    """The premise scene (without a size for NEUTRAL), a hypothesis scene, and its label."""
    label = rng.choice(LABELS)
    if label == "CONTRADICTION":
        return premise, contradiction(premise, rng), label
    h = copy(premise)
    k = rng.randrange(len(h["entities"]))  # the group whose size may change
    if label == "ENTAILMENT":  # the same scene, without one group's size, or with a more general word
        if premise["entities"][k]["size"] and rng.random() < 0.3:
            h["entities"][k]["size"] = None
        elif len(h["entities"]) == 2 and rng.random() < 0.3:
            h = two_general(premise, rng.choice(["colour", "number"]), exchange=False)
        elif rng.random() < 0.5:
            h = changed_word(premise, rng, entailed=True)
    else:  # NEUTRAL: a detail the premise leaves open
        premise = copy(premise)
        premise["entities"][k]["size"] = None
        h["entities"][k]["size"] = rng.choice(SIZES)
    return premise, h, label


def make_pairs(n: int, seed: int) -> list[tuple[str, str, str]]:
    """``n`` (premise, hypothesis, label) triples; a hypothesis names its place first or last, and
    two groups in either order, at random."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        premise, h, label = variant(scene(rng), rng)
        pairs.append(
            (sentence(premise), sentence(h, place_first=rng.random() < 0.5, reverse=rng.random() < 0.5), label)
        )
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
        "data": {
            "train": {"tsv": str(folder / "data" / "train.tsv")},
            "dev": {"tsv": str(folder / "data" / "dev.tsv")},
            "test": {"tsv": str(folder / "data" / "test.tsv")},
            "subwords": {"type": "word", "vocab_size": 100},
            "batch_size": 64,
        },
        # one-to-one attention: a changed word aligns with its counterpart (docs/decomposable.md)
        "model": {"embedding_size": 32, "hidden_size": 128, "dropout": 0.0, "attend": "one-to-one"},
        # one thread: these products are too small to gain from more, and lose much on a busy machine
        "training": {
            "max_steps": steps,
            "validate_every": max(steps // 4, 1),
            "learning_rate": 0.003,
            "log_every": 25,
            "early_stopping_patience": None,
            "threads": 1,
        },
    }


def run_pair_quickstart(
    folder: Path, steps: int = 3000, log: Callable[[str], None] = print, progress: bool = True
) -> dict:
    """Writes the synthetic corpus, trains the model on it, prints its test accuracy and the
    attention of a few examples; returns {"accuracy", "examples"}."""
    from attnmt.pairs.classifier import PairClassifier
    from attnmt.training.quickstart import train_once
    from attnmt.viz.text import shades

    folder = Path(folder)
    data = write_corpus(folder / "data")
    config = train_once(
        folder,
        quickstart_config(folder.resolve(), steps),
        f"the decomposable attention model on {data['train']} ({steps} steps)",
        log,
        progress,
    )
    model = PairClassifier(config.experiment_dir)
    report = model.evaluate(model.test_sets["test"])
    log(f"accuracy on {report['pairs']} test pairs: {report['accuracy']:.1%}")
    examples = model.classify(EXAMPLES)
    for r in examples:
        chances = ", ".join(f"{label} {p:.2f}" for label, p in r.probabilities.items())
        print(f"\npremise     {r.premise}\nhypothesis  {r.hypothesis}\n  -> {r.label}  ({chances})")
        changed = changed_words(r.premise, r.hypothesis)
        if changed is not None:
            row = r.premise_attention[[_word(t) for t in r.premise_tokens].index(changed[0])]
            print(
                f"  '{changed[0]}' attends most to '{_word(r.hypothesis_tokens[int(row.argmax())])}' ({row.max():.2f})"
            )
        print(
            shades([_word(t) for t in r.premise_tokens], [_word(t) for t in r.hypothesis_tokens], r.premise_attention)
        )
    out = folder / "attention.json"
    out.write_text(
        json.dumps(
            [
                {
                    "premise": r.premise,
                    "hypothesis": r.hypothesis,
                    "label": r.label,
                    "probabilities": r.probabilities,
                    "premise_tokens": r.premise_tokens,
                    "hypothesis_tokens": r.hypothesis_tokens,
                    "premise_attention": np.round(r.premise_attention, 4).tolist(),
                    "hypothesis_attention": np.round(r.hypothesis_attention, 4).tolist(),
                }
                for r in examples
            ],
            ensure_ascii=False,
            indent=1,
        ),
        encoding="utf-8",
    )
    log(
        f"\nrows: premise words; columns: hypothesis words; each row is what its word attends to "
        f"(softmax over the hypothesis).\nattention matrices saved to {out}; model in {config.experiment_dir}"
    )
    log(f"try: printf 'two red cats are sleeping\\ttwo cats are sleeping\\n' | attnmt classify {config.experiment_dir}")
    return {"accuracy": report["accuracy"], "examples": examples}


def changed_words(premise: str, hypothesis: str) -> tuple[str, str] | None:
    """The premise's word and its counterpart in the hypothesis when the two sentences differ in
    that one word only (the hypothesis perhaps reordered: its "," aside), else None."""
    p, h = premise.split(), [w for w in hypothesis.split() if w != ","]
    gone, new = [w for w in p if w not in h], [w for w in h if w not in p]
    return (gone[0], new[0]) if len(gone) == 1 and len(new) == 1 and len(p) == len(h) else None


def counterpart_found(result) -> bool | None:
    """For a pair that differs in one word (``changed_words``): whether that word's row of the
    premise attention attends most to its counterpart ("red" -> "blue"); None for other pairs."""
    changed = changed_words(result.premise, result.hypothesis)
    if changed is None:
        return None
    premise, hypothesis = [_word(t) for t in result.premise_tokens], [_word(t) for t in result.hypothesis_tokens]
    row = result.premise_attention[premise.index(changed[0])]
    return hypothesis[int(row.argmax())] == changed[1]


def _word(piece: str) -> str:
    return "</s>" if piece == "</s>" else piece.replace("\u2581", "")
