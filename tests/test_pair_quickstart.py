"""`attnmt quickstart --pairs`: the synthetic pair task is learned, and the trained model's
attention aligns a changed word with its counterpart: for pairs that differ in one word ("red" ->
"blue", "dogs" -> "animals"), that word's row of the premise attention attends most to the word
that replaced it (issue 26; docs/decomposable.md)."""

from __future__ import annotations

import pytest

from attnmt.cli import main
from attnmt.pairs.quickstart import changed_words, counterpart_found, make_pairs


@pytest.fixture(scope="module")
def quickstart_pairs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("quickstart-pairs")
    # 750 of the quick start's 3,000 steps: the model has learned nearly all it can by then (test accuracy
    # 0.888 and counterparts 0.89 at 1,000 and 1,500 steps; at 750, 0.892 and 0.891, and with training
    # seeds 1, 2, 3 instead of 42 at least 0.900 and 0.883: against the thresholds 0.85 and 0.8)
    assert main(["quickstart", "--pairs", "--dir", str(folder), "--steps", "750"]) == 0
    return folder


def test_changed_words_finds_the_one_word_that_differs():
    assert changed_words("three red dogs are running", "three blue dogs are running") == ("red", "blue")
    assert changed_words("three red dogs are running in the park", "in the park , three blue dogs are running") == (
        "red",
        "blue",
    )
    assert changed_words("three dogs are running", "three old dogs are running") is None  # an added word
    assert changed_words("red dogs and blue cats", "blue dogs and red cats") is None  # the same words


@pytest.mark.slow
def test_the_synthetic_task_is_learned(quickstart_pairs):
    import attnmt

    model = attnmt.load(quickstart_pairs / "model")
    report = model.evaluate(model.test_sets["test"])
    # the pairs whose groups exchanged colours or numbers (about 1 in 11) need word order, which
    # the model without intra-sentence attention does not see: the rest are learned
    assert report["accuracy"] >= 0.85
    assert (quickstart_pairs / "attention.json").is_file()


@pytest.mark.slow
def test_a_changed_word_attends_most_to_its_counterpart(quickstart_pairs):
    import attnmt

    model = attnmt.load(quickstart_pairs / "model")
    one_word = [(p, h) for p, h, _ in make_pairs(400, seed=7) if changed_words(p, h)]
    assert len(one_word) >= 100
    found = [counterpart_found(r) for r in model.classify(one_word)]
    # measured 89.1 % (114 of 128); with the paper's dot-product scores 4.9 % (docs/results/decomposable.md)
    assert sum(found) >= 0.8 * len(found)
