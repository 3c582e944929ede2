"""Alignment by agreement: both directions' alignment layers trained at once, each pulled towards
the links of the other (attnmt.translation.agreement)."""

import numpy as np
import pytest
import torch

from attnmt.api import load
from attnmt.core.errors import AttnmtError
from attnmt.training import train
from attnmt.translation.agreement import NO_WORD, disagreement, piece_words, word_index_tensor, word_posteriors
from attnmt.translation.align import alignment_matrices
from attnmt.translation.aligner import AlignerConfig, load_aligner, load_aligner_config, train_aligner
from conftest import toy_config
from test_alignment_layer import scrambled


def test_pieces_belong_to_the_words_they_spell():
    assert piece_words(["▁Ein", "▁Sch", "iff", "▁."]) == [0, 1, 1, 2]
    assert word_index_tensor([[0, 1, 1], [0]], 4).tolist() == [[0, 1, 1, NO_WORD], [0, NO_WORD, NO_WORD, NO_WORD]]


def test_word_posteriors_sum_source_pieces_and_average_target_pieces():
    # target: word 0 = pieces 0 and 1, word 1 = piece 2, then "</s>"; source: word 0 = pieces 0 and 1,
    # word 1 = piece 2, then "</s>" and padding
    r = torch.tensor(
        [[[0.1, 0.2, 0.7, 0.0, 0.0], [0.3, 0.3, 0.4, 0.0, 0.0], [0.5, 0.0, 0.5, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0, 0.0]]]
    )
    tgt = torch.tensor([[0, 0, 1, NO_WORD]])
    src = torch.tensor([[0, 0, 1, NO_WORD, NO_WORD]])
    expected = torch.tensor([[[(0.3 + 0.6) / 2, (0.7 + 0.4) / 2], [0.5, 0.5]]])
    torch.testing.assert_close(word_posteriors(r, tgt, src), expected)


def test_disagreement_is_the_squared_difference_from_the_other_direction_transposed():
    forward = torch.tensor([[[1.0, 0.0], [0.2, 0.8]], [[1.0, 0.0], [0.0, 1.0]]])  # (B, target words, source words)
    backward = forward.transpose(1, 2).clone()  # (B, source words, target words)
    assert float(disagreement(forward, backward, torch.ones(2))) == 0.0
    backward[0, 0, 1] = 0.5  # the first pair's link (source 0, target 1): 0.2 forward, 0.5 backward
    assert float(disagreement(forward, backward, torch.ones(2))) == pytest.approx(0.3**2)
    assert float(disagreement(forward, backward, torch.tensor([0.0, 1.0]))) == 0.0  # that pair left out


@pytest.fixture(scope="module")
def both_ways(tmp_path_factory):
    """Two models of the scramble of test_alignment_layer: lower to upper case, and back."""
    folder = tmp_path_factory.mktemp("both-ways")
    pairs, _ = scrambled(300, seed=5)
    models = []
    for name, direction in (("forward", pairs), ("backward", [(t, s) for s, t in pairs])):
        config = toy_config(
            folder / name,
            direction,
            model={"attention": "luong-general"},
            data={"subwords": {"type": "word", "vocab_size": 40, "joint": True}},
            training={"max_steps": 100, "validate_every": 1000, "threads": 1},
        )
        torch.manual_seed(0)
        train(config, log=lambda m: None, progress=False)
        models.append(config.experiment_dir)
    return models


def mean_disagreement(forward_dir, backward_dir, forward_aligner, backward_aligner) -> float:
    """Of the two directions' word posteriors on new pairs: the mean squared difference per link."""
    pairs, _ = scrambled(30, seed=4)
    sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
    forward, backward = load(forward_dir), load(backward_dir)
    there = alignment_matrices(forward, sources, targets, aligner=load_aligner(forward_aligner, forward))
    back = alignment_matrices(backward, targets, sources, aligner=load_aligner(backward_aligner, backward))
    return float(np.mean([np.mean((f - b.T) ** 2) for f, b in zip(there, back)]))


@pytest.mark.slow  # trains a model (the marker's rule; keeps pytest -m 'not slow' under a minute)
def test_agreement_trains_both_directions_towards_the_same_links(both_ways, tmp_path):
    forward_dir, backward_dir = both_ways
    disagreements, messages = {}, []
    for weight in (0.0, 20.0):
        config = AlignerConfig(
            model=forward_dir,
            out=tmp_path / f"f{weight}",
            backward_model=backward_dir,
            backward_out=tmp_path / f"b{weight}",
            agreement=weight,
            steps=40,
            lexicon_steps=20,
            size=16,
            learning_rate=0.01,
            threads=1,
        )
        assert train_aligner(config, messages.append) == tmp_path / f"f{weight}"
        disagreements[weight] = mean_disagreement(
            forward_dir, backward_dir, tmp_path / f"f{weight}", tmp_path / f"b{weight}"
        )
    assert any("by agreement (weight 20.0)" in m and "disagreement" not in m for m in messages), messages
    assert any("disagreement" in m and "per word" in m for m in messages), messages
    # (measured: 0.16 without agreement and 0.03 with it on an AVX512 EPYC, 0.09 and 0.05 on an
    # AVX2 one: how much less turns on the machine's rounding; that it is less does not)
    assert disagreements[20.0] < disagreements[0.0], disagreements
    # the backward folder is an aligner of the backward model, its config naming its partner
    backward = load_aligner_config(tmp_path / "b20.0" / "aligner.yaml")
    assert backward.model == backward_dir and backward.backward_model == forward_dir
    assert backward.out == tmp_path / "b20.0" and backward.backward_out == tmp_path / "f20.0"
    with pytest.raises(AttnmtError, match="trained on the weights of"):
        load_aligner(tmp_path / "b20.0", load(forward_dir))


def test_a_missing_backward_model_is_named_as_such(both_ways, tmp_path):
    config = AlignerConfig(model=both_ways[0], backward_model=tmp_path / "nowhere", steps=1, threads=1)
    with pytest.raises(AttnmtError, match="backward_model: .*nowhere: no such folder"):
        train_aligner(config, lambda m: None)
