"""Longer than training: joined test sets, the attention failure counts, data.max_source_words."""

import numpy as np
import pytest

from attnmt.core.errors import AttnmtError
from attnmt.translation.evaluation import attention_failures, joined
from conftest import toy_config


def test_joining_keeps_pairs_aligned():
    sources = [f"s{i} a" for i in range(7)]
    targets = [f"t{i} b" for i in range(7)]
    src2, tgt2 = joined(sources, targets, 2)
    assert src2 == ["s0 a s1 a", "s2 a s3 a", "s4 a s5 a"]  # the 7th is left out: a group of one
    assert tgt2 == ["t0 b t1 b", "t2 b t3 b", "t4 b t5 b"]
    src3, tgt3 = joined(sources, targets, 3)
    for s, t in zip(src3, tgt3):
        assert [w[1:] for w in s.split()[::2]] == [w[1:] for w in t.split()[::2]]  # same pair numbers, in order
    assert joined(sources, targets, 1) == (sources, targets)


def test_joining_checks_its_arguments():
    with pytest.raises(AttnmtError, match="k >= 1"):
        joined(["a"], ["b"], 0)
    with pytest.raises(AttnmtError, match="differ"):
        joined(["a", "b"], ["c"], 2)


def test_failure_counts_on_hand_made_attention():
    # 3 output words x 4 source words: source 0 read by all three steps (coverage 3.0 is not > 3);
    # source 3 never read (coverage 0).
    steady = np.array(
        [[0.9, 0.1, 0.0, 0.0], [0.9, 0.0, 0.1, 0.0], [1.2, 0.0, 0.0, 0.0]]
    )  # coverage [3.0, 0.1, 0.1, 0.0]
    looping = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.9, 0.1]])  # coverage [3.9, 0.1]
    counts = attention_failures(
        [steady, looping, None],
        ["a b c", "a a a a a a a", "a"],  # hypotheses
        ["a b c", "a b c", "a b c"],
    )  # references
    assert counts == {
        "sentences": 3,
        "source_words": 6,
        "unattended": 4,
        "over_attended": 1,
        "too_long": 1,
        "too_short": 1,
        "trigrams": 1 + 5,
        "repeated_trigrams": 4,
    }


def test_without_attention_only_lengths_count():
    counts = attention_failures([None, None], ["a a a a a", "a"], ["a b", "a"])
    assert counts == {
        "sentences": 2,
        "source_words": None,
        "unattended": None,
        "over_attended": None,
        "too_long": 1,
        "too_short": 0,
        "trigrams": 3,
        "repeated_trigrams": 2,
    }


def test_repeated_trigrams_count_within_each_output():
    counts = attention_failures([None, None], ["the dog and the dog and a cat", "the dog and"], ["x", "x"])
    assert counts["trigrams"] == 6 + 1  # the second output's "the dog and" repeats nothing of its own
    assert counts["repeated_trigrams"] == 1  # the first output's "the dog and", written a second time


def test_failure_thresholds_are_parameters():
    matrix = np.array([[0.5, 0.5]])
    assert attention_failures([matrix], ["a"], ["a"], low=0.6)["unattended"] == 2
    assert attention_failures([matrix], ["a"], ["a"], high=0.4)["over_attended"] == 2


def test_max_source_words_drops_long_training_pairs(tmp_path):
    from attnmt.translation.training import prepare_data

    pairs = [(" ".join("ab" for _ in range(n)), "x" * n) for n in range(1, 21)]
    messages = []
    config = toy_config(tmp_path, pairs, data={"max_source_words": 5})
    data = prepare_data(config, log=messages.append)
    assert sorted(len(data.src_sw.decode(ids).split()) for ids in data.train.src_ids) == [1, 2, 3, 4, 5]
    assert any("15 pair(s) whose source has more than 5 words" in m for m in messages)
    config = toy_config(tmp_path / "all", pairs)
    assert len(prepare_data(config, log=messages.append).train) == 20
