"""The decomposable attention model (attnmt.pairs.model), each equation on hand-made
tensors: attend (both softmax directions, padding masked), compare, aggregate (sums over real
positions only), intra-sentence attention with its distance bias."""

from __future__ import annotations

import pytest
import torch

from attnmt.core.config import PairModelConfig
from attnmt.pairs.model import (
    DecomposableAttention,
    IntraAttention,
    build_pair_model,
    centred,
    masked_softmax,
    masked_sum,
    sinkhorn,
)

PAD = 0


def model(
    intra: bool = False, seed: int = 0, attend: str = "dot", normalizer: str = "softmax"
) -> DecomposableAttention:
    torch.manual_seed(seed)
    return DecomposableAttention(
        vocab_size=12,
        classes=3,
        embedding_size=6,
        hidden_size=5,
        intra_attention=intra,
        max_distance=2,
        dropout=0.0,
        pad_id=PAD,
        attend=attend,
        normalizer=normalizer,
    ).eval()


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


@pytest.mark.parametrize("normalizer", ["sparsemax", "entmax15"])
def test_sparse_attend_normalizes_both_directions_with_its_map(normalizer):
    """attention_normalizer: beta_i = sum_j sparsemax_j(e_ij) b_j and alpha_j = sum_i sparsemax_i(e_ij) a_i
    (or entmax15), over the real positions; exact zeros where the scores spread (the intra-sentence
    attention keeps its softmax)."""
    from attnmt.seq2seq.attention import normalize

    m = model(normalizer=normalizer, seed=3)
    with torch.no_grad():
        m.project.weight.mul_(20)  # spread-out scores: sparse weights
    premise, hypothesis = torch.tensor([[3, 4, 5, 6]]), torch.tensor([[6, 7, 8, PAD]])
    out = m(premise, hypothesis)
    e = out.scores[0, :, :3]
    torch.testing.assert_close(out.premise_weights[0, :, :3], normalize(e, normalizer))
    torch.testing.assert_close(out.hypothesis_weights[0, :, :3], normalize(e.T, normalizer).T)
    assert out.premise_weights[0, :, 3].abs().sum() == 0
    assert (out.premise_weights[0, :, :3] == 0).any() and (out.hypothesis_weights[0, :, :3] == 0).any()
    b = m.represent(hypothesis, hypothesis != PAD)[0, :3]
    a = m.represent(premise, premise != PAD)[0]
    beta, alpha = normalize(e, normalizer) @ b, normalize(e.T, normalizer) @ a
    torch.testing.assert_close(out.compared_premise[0], m.G(torch.cat([a, beta], dim=-1)))
    torch.testing.assert_close(out.compared_hypothesis[0, :3], m.G(torch.cat([b, alpha], dim=-1)))
    assert build_pair_model(PairModelConfig(attention_normalizer=normalizer), 20, 3).normalizer == normalizer


def test_padded_premise_positions_get_no_weight_from_the_hypothesis():
    m = model()
    out = m(torch.tensor([[3, 4, PAD, PAD]]), torch.tensor([[6, 7, 8]]))
    columns = out.hypothesis_weights[0]  # softmax_i: each hypothesis word over the premise
    assert torch.allclose(columns.sum(dim=0), torch.ones(3))
    assert columns[2:].abs().sum() == 0
    assert torch.allclose(out.premise_weights[0, :2].sum(dim=1), torch.ones(2))


@pytest.mark.parametrize(
    "intra,attend,normalizer",
    [
        (False, "dot", "softmax"),
        (True, "dot", "softmax"),
        (False, "one-to-one", "softmax"),
        (True, "one-to-one", "softmax"),
        (True, "dot", "sparsemax"),
        (False, "one-to-one", "entmax15"),
    ],
)
def test_a_pair_scores_the_same_alone_or_padded_in_a_batch(intra, attend, normalizer):
    """Masking in both softmax directions and sums over real positions: padding changes nothing."""
    m = model(intra, attend=attend, normalizer=normalizer)
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
    one_to_one = build_pair_model(PairModelConfig(attend="one-to-one", temperature=0.2, sinkhorn_rounds=3), 20, 3)
    assert (one_to_one.attend, one_to_one.temperature, one_to_one.sinkhorn_rounds) == ("one-to-one", 0.2, 3)


def test_padding_rows_have_no_weights_in_either_direction():
    m = model()
    out = m(torch.tensor([[3, 4, PAD]]), torch.tensor([[6, 7, 8]]))
    assert out.premise_weights[0, 2].abs().sum() == 0
    assert out.hypothesis_weights[0, 2].abs().sum() == 0


# ------------------------------------------------------------------------------ attend="one-to-one"


def test_centred_subtracts_the_mean_of_the_real_positions():
    values = torch.tensor([[[1.0, 2.0], [3.0, 6.0], [100.0, 100.0]]])
    out = centred(values, torch.tensor([[True, True, False]]))
    assert torch.allclose(out[0, :2], torch.tensor([[-1.0, -2.0], [1.0, 2.0]]))


def test_sinkhorn_rounds_make_the_real_block_doubly_stochastic_and_padding_stays_out():
    torch.manual_seed(0)
    real = torch.ones(1, 4, 4, dtype=torch.bool)
    real[0, 3, :] = real[0, :, 3] = False  # a padded premise and hypothesis position
    weights = sinkhorn(torch.randn(1, 4, 4), real, rounds=50).exp()
    assert torch.allclose(weights[0, :3, :3].sum(dim=0), torch.ones(3), atol=1e-4)
    assert torch.allclose(weights[0, :3, :3].sum(dim=1), torch.ones(3), atol=1e-4)
    assert weights[0, 3].sum() == 0 and weights[0, :, 3].sum() == 0


def test_one_to_one_scores_are_centred_cosines_and_same_words_over_the_temperature_then_sinkhorn():
    m = model(attend="one-to-one")
    premise, hypothesis = torch.tensor([[3, 4, 5]]), torch.tensor([[5, 7]])  # premise word 3 is hypothesis word 1
    out = m(premise, hypothesis)
    fa, fb = m.F(m.represent(premise, premise != PAD))[0], m.F(m.represent(hypothesis, hypothesis != PAD))[0]
    fa, fb = fa - fa.mean(dim=0), fb - fb.mean(dim=0)
    cosines = torch.nn.functional.cosine_similarity(fa[:, None], fb[None, :], dim=-1)
    cosines[2, 0] += 1  # [a_i is b_j]
    expected = sinkhorn(cosines[None] / m.temperature, torch.ones(1, 3, 2, dtype=torch.bool), m.sinkhorn_rounds)
    assert torch.allclose(out.scores, expected, atol=1e-5)
    assert torch.allclose(out.premise_weights[0], torch.softmax(expected[0], dim=1), atol=1e-5)


def collapsing_model(attend: str) -> DecomposableAttention:
    """Words 1..5 one-hot, each with a shared part; word 5 ("are") has the largest shared part, as
    F's ReLU outputs had in the trained quick-start model; words 2 ("red") and 3 ("blue") share a
    colour dimension. F passes its input through (identity weights, positive inputs)."""
    m = DecomposableAttention(
        vocab_size=6, classes=3, embedding_size=6, hidden_size=6, dropout=0.0, pad_id=PAD, attend=attend
    ).eval()
    with torch.no_grad():
        shared = torch.tensor([0.0, 1.0, 1.0, 1.0, 1.0, 3.0])[:, None]
        m.embed.weight.copy_(torch.eye(6) + shared * torch.tensor([0, 0, 0, 0, 0, 1.0]))
        m.embed.weight[2, 0] = m.embed.weight[3, 0] = 0.5  # the colour dimension
        m.embed.weight[PAD] = 0
        m.project.weight.copy_(torch.eye(6))
        for layer in (m.F[1], m.F[4]):
            layer.weight.copy_(torch.eye(6))
            layer.bias.zero_()
    return m


def test_one_to_one_attention_aligns_the_changed_word_where_dot_products_collapse():
    """'three red dogs are' against 'three blue dogs are': with the paper's dot products every word
    attends to the word with the largest shared part ("are"); one-to-one scores send each unchanged
    word to its copy and "red" to "blue"."""
    premise, hypothesis = torch.tensor([[1, 2, 4, 5]]), torch.tensor([[1, 3, 4, 5]])
    dot = collapsing_model("dot")(premise, hypothesis).premise_weights[0].argmax(dim=1)
    assert dot.tolist() == [3, 3, 3, 3]
    aligned = collapsing_model("one-to-one")(premise, hypothesis)
    assert aligned.premise_weights[0].argmax(dim=1).tolist() == [0, 1, 2, 3]
    assert aligned.hypothesis_weights[0].argmax(dim=0).tolist() == [0, 1, 2, 3]
