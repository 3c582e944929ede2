"""`attnmt quickstart --pairs`: the synthetic pair task is learned, and the trained model's
attention finds the changed word: the detail added to the hypothesis (NEUTRAL) or dropped from
the premise (ENTAILMENT). (Swapped and negated words, CONTRADICTION, are told apart by the
aggregate step's sums without the attention marking them: see docs/decomposable.md.)"""

from __future__ import annotations

import pytest

from attnmt.cli import main
from attnmt.tasks.pairs import focus, make_pairs


@pytest.fixture(scope="module")
def quickstart_pairs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("quickstart-pairs")
    assert main(["quickstart", "--pairs", "--dir", str(folder)]) == 0
    return folder


def changed_words(premise: str, hypothesis: str) -> tuple[list[str], list[str]]:
    """The words of the hypothesis not in the premise, and those of the premise not in the hypothesis."""
    p, h = premise.split(), [w for w in hypothesis.split() if w != ","]
    return [w for w in h if w not in p], [w for w in p if w not in h]


@pytest.mark.slow
def test_the_synthetic_task_is_learned(quickstart_pairs):
    import attnmt

    model = attnmt.load(quickstart_pairs / "model")
    report = model.evaluate(model.test_sets["test"])
    assert report["accuracy"] >= 0.9
    assert (quickstart_pairs / "attention.json").is_file()


@pytest.mark.slow
def test_the_attention_finds_the_changed_word(quickstart_pairs):
    import attnmt

    model = attnmt.load(quickstart_pairs / "model")
    pairs = make_pairs(300, seed=7)
    # NEUTRAL: a size word added to the hypothesis; ENTAILMENT: the premise's size word dropped
    added = [(p, h) for p, h, label in pairs if label == "NEUTRAL"]
    dropped = [(p, h) for p, h, label in pairs if label == "ENTAILMENT" and changed_words(p, h)[1]]
    assert len(added) >= 50 and len(dropped) >= 20
    found_added = [focus(r)[0] == changed_words(r.premise, r.hypothesis)[0][0] for r in model.classify(added)]
    found_dropped = [focus(r)[1] == changed_words(r.premise, r.hypothesis)[1][0] for r in model.classify(dropped)]
    assert sum(found_added) >= 0.9 * len(added)
    assert sum(found_dropped) >= 0.9 * len(dropped)
