"""The decomposable attention model (attnmt.models.decomposable), each equation on hand-made
tensors: attend (both softmax directions, padding masked), compare, aggregate (sums over real
positions only), intra-sentence attention with its distance bias."""

from __future__ import annotations

import pytest
import torch

from attnmt.config import PairModelConfig
from attnmt.models.decomposable import (DecomposableAttention, IntraAttention, build_pair_model, masked_softmax,
                                        masked_sum)

PAD = 0


def model(intra: bool = False, seed: int = 0) -> DecomposableAttention:
    torch.manual_seed(seed)
    return DecomposableAttention(vocab_size=12, classes=3, embedding_size=6, hidden_size=5, intra_attention=intra,
                                 max_distance=2, dropout=0.0, pad_id=PAD).eval()


def test_masked_softmax_ignores_masked_positions():
    scores = torch.tensor([[1.0, 2.0, 100.0]])
    mask = torch.tensor([[True, True, False]])
    weights = masked_softmax(scores, mask, dim=1)
    expected = torch.softmax(torch.tensor([1.0, 2.0]), dim=0)
    assert torch.allclose(weights[0, :2], expected)
    assert weights[0, 2] == 0


def test_masked_sum_counts_real_positions_only():
    values = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]])
    mask = torch.tensor([[True, True, False]])
    assert masked_sum(values, mask).tolist() == [[4.0, 6.0]]


def test_attend_both_directions_on_hand_made_scores():
    """With F the identity's stand-in (a fixed linear map), e_ij, beta_i and alpha_j are the
    equations computed by hand; a padded hypothesis position gets no weight in either direction."""
    m = model()
    premise, hypothesis = torch.tensor([[3, 4, 5]]), torch.tensor([[6, 7, PAD]])
    out = m(premise, hypothesis)
    a, b = m.represent(premise, premise != PAD), m.represent(hypothesis, hypothesis != PAD)
    fa, fb = m.F(a)[0], m.F(b)[0, :2]
    e = fa @ fb.T  # (3, 2): the real hypothesis positions only
    assert torch.allclose(out.scores[0, :, :2], e, atol=1e-6)
    assert torch.allclose(out.premise_weights[0, :, :2], torch.softmax(e, dim=1), atol=1e-6)
    assert torch.allclose(out.hypothesis_weights[0, :, :2], torch.softmax(e, dim=0), atol=1e-6)
    assert out.premise_weights[0, :, 2].abs().sum() == 0  # softmax_j: the padding column gets nothing
    assert out.hypothesis_weights[0, :, 2].abs().sum() == 0  # and a padding column has no weights
    # compare: v1_i = G([a_i; beta_i]) with beta_i = sum_j softmax_j(e_ij) b_j
    beta = torch.softmax(e, dim=1) @ b[0, :2]
    alpha = torch.softmax(e, dim=0).T @ a[0]
    assert torch.allclose(out.compared_premise[0], m.G(torch.cat([a[0], beta], dim=-1)), atol=1e-6)
    assert torch.allclose(out.compared_hypothesis[0, :2], m.G(torch.cat([b[0, :2], alpha], dim=-1)), atol=1e-6)
    # aggregate: v1 = sum_i v1_i, v2 = sum_j v2_j over real positions, y = H([v1; v2])
    v1, v2 = out.compared_premise[0].sum(0), out.compared_hypothesis[0, :2].sum(0)
    assert torch.allclose(out.premise_summary[0], v1, atol=1e-6)
    assert torch.allclose(out.hypothesis_summary[0], v2, atol=1e-6)
    assert torch.allclose(out.logits[0], m.classify(m.H(torch.cat([v1, v2]))), atol=1e-6)


def test_padded_premise_positions_get_no_weight_from_the_hypothesis():
    m = model()
    out = m(torch.tensor([[3, 4, PAD, PAD]]), torch.tensor([[6, 7, 8]]))
    columns = out.hypothesis_weights[0]  # softmax_i: each hypothesis word over the premise
    assert torch.allclose(columns.sum(dim=0), torch.ones(3))
    assert columns[2:].abs().sum() == 0
    assert torch.allclose(out.premise_weights[0, :2].sum(dim=1), torch.ones(2))


@pytest.mark.parametrize("intra", [False, True])
def test_a_pair_scores_the_same_alone_or_padded_in_a_batch(intra):
    """Masking in both softmax directions and sums over real positions: padding changes nothing."""
    m = model(intra)
    alone = m(torch.tensor([[3, 4, 1]]), torch.tensor([[5, 1]]))
    batch = m(torch.tensor([[3, 4, 1, PAD, PAD], [5, 6, 7, 8, 1]]), torch.tensor([[5, 1, PAD, PAD], [9, 10, 11, 1]]))
    assert torch.allclose(alone.logits[0], batch.logits[0], atol=1e-5)
    assert torch.allclose(alone.premise_weights[0], batch.premise_weights[0, :3, :2], atol=1e-6)
    assert torch.allclose(alone.hypothesis_weights[0], batch.hypothesis_weights[0, :3, :2], atol=1e-6)
    assert torch.allclose(alone.premise_summary, batch.premise_summary[:1], atol=1e-5)


def test_intra_attention_adds_the_distance_bias_and_masks_padding():
    """a'_i = sum_j softmax_j(F_intra(a_i)^T F_intra(a_j) + d_{i-j}) a_j, distances clamped at max_distance."""
    torch.manual_seed(1)
    intra = IntraAttention(size=4, max_distance=1, dropout=0.0).eval()
    with torch.no_grad():
        intra.d.copy_(torch.tensor([0.5, -1.0, 2.0]))  # d_{-1}, d_0, d_{+1}
    x = torch.randn(1, 4, 4)
    mask = torch.tensor([[True, True, True, False]])
    out = intra(x, mask)
    assert out.shape == (1, 4, 8)
    assert torch.equal(out[..., :4], x)  # a_i becomes [a_i; a'_i]
    p = intra.F_intra(x)[0, :3]
    f = p @ p.T
    i, j = torch.arange(3)[:, None], torch.arange(3)[None, :]
    bias = intra.d[(i - j).clamp(-1, 1) + 1]
    assert bias[0, 2] == intra.d[0] and bias[2, 0] == intra.d[2]  # distance 2 shares the bias of distance 1
    expected = torch.softmax(f + bias, dim=1) @ x[0, :3]
    assert torch.allclose(out[0, :3, 4:], expected, atol=1e-6)


def test_build_pair_model_follows_the_config():
    config = PairModelConfig(embedding_size=8, hidden_size=6, intra_attention=True, dropout=0.0)
    m = build_pair_model(config, vocab_size=20, classes=4)
    assert m.embed.weight.shape == (20, 8)
    assert m.intra is not None and m.classify.out_features == 4
    assert m.G[1].in_features == 4 * 6  # [a_i; beta_i] with a_i = [x_i; x'_i]
    assert build_pair_model(PairModelConfig(), 20, 3).intra is None


def test_padding_rows_have_no_weights_in_either_direction():
    m = model()
    out = m(torch.tensor([[3, 4, PAD]]), torch.tensor([[6, 7, 8]]))
    assert out.premise_weights[0, 2].abs().sum() == 0
    assert out.hypothesis_weights[0, 2].abs().sum() == 0
