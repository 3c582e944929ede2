"""Symmetrization of word alignments, shift-by-one, and the statistical baseline scored by the
same function as attention's alignments."""

from importlib.util import find_spec

import numpy as np
import pytest

from attnmt.seq2seq.links import shifted_by_one
from attnmt.translation.align import alignment_scores, grow_diag_final, symmetrize, symmetrized_scores, transposed
from conftest import require

# Hand-made: a 3x3 sentence pair.
#   forward  (each target word -> one source word):  0-0 1-1 1-2
#   backward (each source word -> one target word):  0-0 1-1 2-2
FORWARD = [(0, 0), (1, 1), (1, 2)]
BACKWARD = [(0, 0), (1, 1), (2, 2)]


def test_intersection_and_union():
    assert symmetrize(FORWARD, BACKWARD, "intersection") == [(0, 0), (1, 1)]
    assert symmetrize(FORWARD, BACKWARD, "union") == [(0, 0), (1, 1), (1, 2), (2, 2)]


def test_grow_diag_final_grows_from_the_intersection_to_unaligned_words():
    # From {0-0, 1-1}: 1-2 (next to 1-1; target word 2 unaligned) is added, then 2-2 (next to 1-2;
    # source word 2 unaligned).
    assert grow_diag_final(FORWARD, BACKWARD) == [(0, 0), (1, 1), (1, 2), (2, 2)]


def test_grow_diag_final_leaves_out_links_between_aligned_words():
    # 2-0 is next to 1-1 (diagonally), but source 2 and target 0 are both aligned already.
    forward, backward = [(0, 0), (1, 1), (2, 2)], [(0, 0), (1, 1), (2, 2), (2, 0)]
    assert grow_diag_final(forward, backward) == [(0, 0), (1, 1), (2, 2)]


def test_grow_diag_final_adds_union_links_of_unaligned_words_last():
    # No link of the union is next to the intersection {0-0}; 3-5 is far away but its words are
    # unaligned: "final" adds it; 0-4 shares source word 0 but target 4 is unaligned: added too.
    forward, backward = [(0, 0), (3, 5)], [(0, 0), (0, 4)]
    assert grow_diag_final(forward, backward) == [(0, 0), (0, 4), (3, 5)]


def test_grow_diag_final_lies_between_intersection_and_union():
    rng = np.random.default_rng(0)
    for _ in range(50):
        forward = {(int(rng.integers(6)), j) for j in range(6)}
        backward = {(i, int(rng.integers(6))) for i in range(6)}
        grown = set(grow_diag_final(forward, backward))
        assert forward & backward <= grown <= forward | backward


def test_unknown_symmetrization_is_an_error():
    with pytest.raises(ValueError, match="grow-diag-final"):
        symmetrize(FORWARD, BACKWARD, "grow")


def test_transposed_turns_a_reverse_model_s_links_around():
    assert transposed([(0, 2), (1, 0)]) == [(0, 1), (2, 0)]


def test_shift_by_one_takes_each_row_from_the_next_step():
    matrix = np.array(
        [
            [1.0, 0.0, 0.0],  # step 0 (predicts piece 0)
            [0.0, 1.0, 0.0],  # step 1
            [0.0, 0.0, 1.0],
        ]
    )  # step 2 (predicts </s>)
    shifted = shifted_by_one(matrix)
    np.testing.assert_array_equal(shifted[0], matrix[1])
    np.testing.assert_array_equal(shifted[1], matrix[2])
    np.testing.assert_array_equal(shifted[2], matrix[2])  # the </s> row keeps its own (dropped later)
    assert shifted.shape == matrix.shape


def test_symmetrized_scores_score_each_way_with_the_one_aer_function():
    sure, possible = [{(0, 0), (1, 1), (2, 2)}], [{(0, 0), (1, 1), (2, 2), (1, 2)}]
    scores = symmetrized_scores([FORWARD], [BACKWARD], sure, possible)
    assert set(scores) == {"forward", "backward", "intersection", "union", "grow-diag-final"}
    assert scores["union"] == alignment_scores([symmetrize(FORWARD, BACKWARD, "union")], sure, possible)
    assert scores["backward"]["aer"] == 0.0  # exactly the sure links
    assert symmetrized_scores([FORWARD], None, sure, possible).keys() == {"forward"}


def test_eflomal_output_is_scored_by_the_same_function():
    require(find_spec("eflomal") is not None, "pip install eflomal (attnmt[experiments])")
    from attnmt.translation.statistical_align import eflomal_links

    # Word i of the source always translates as word i of the target (distinct words, varied orders).
    rng = np.random.default_rng(1)
    vocabulary = [(f"s{k}", f"t{k}") for k in range(12)]
    sources, targets = [], []
    for _ in range(300):
        words = [vocabulary[k] for k in rng.choice(12, size=int(rng.integers(2, 6)), replace=False)]
        sources.append(" ".join(s for s, _ in words))
        targets.append(" ".join(t for _, t in words))
    forward, backward = eflomal_links(sources, targets)
    assert len(forward) == len(backward) == len(sources)
    gold = [{(i, i) for i in range(len(s.split()))} for s in sources]
    scores = symmetrized_scores(forward, backward, gold, gold)
    assert scores["forward"] == alignment_scores(forward, gold, gold)
    assert scores["intersection"]["aer"] < 0.05  # an easy corpus: eflomal finds the diagonal
