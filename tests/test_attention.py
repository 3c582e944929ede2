"""Every attention variant: shapes, masking, normalisation, batch independence."""

import pytest
import torch

from attnmt.config import ATTENTIONS, ModelConfig
from attnmt.errors import AttnmtError
from attnmt.models import BOS, EOS, PAD, build_model
from attnmt.models.attention import BahdanauAttention, LocationAttention, LuongDotAttention, build_attention

WITH_WEIGHTS = [a for a in ATTENTIONS if a != "none"]
SRC_VOCAB, TGT_VOCAB = 30, 25


def make_model(attention, rnn_type="gru", input_feeding=True, layers=1):
    config = ModelConfig(attention=attention, rnn_type=rnn_type, input_feeding=input_feeding, embedding_size=16,
                         encoder_hidden=12, decoder_hidden=24, attention_size=10, encoder_layers=layers,
                         decoder_layers=layers, dropout=0.0, location_kernel=5)
    return build_model(config, SRC_VOCAB, TGT_VOCAB).eval()


def padded_batch():
    lengths = torch.tensor([7, 4, 2])
    src = torch.randint(4, SRC_VOCAB, (3, 7))
    for i, n in enumerate(lengths.tolist()):
        src[i, n - 1] = EOS
        src[i, n:] = PAD
    tgt = torch.randint(4, TGT_VOCAB, (3, 5))
    return src, lengths, tgt


@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
@pytest.mark.parametrize("input_feeding", [True, False])
@pytest.mark.parametrize("attention", WITH_WEIGHTS)
def test_weights_sum_to_one_over_real_positions_and_zero_on_padding(attention, rnn_type, input_feeding):
    model = make_model(attention, rnn_type, input_feeding, layers=2)
    src, lengths, tgt = padded_batch()
    logits, weights = model(src, lengths, tgt)
    assert logits.shape == (3, 5, TGT_VOCAB)
    assert weights.shape == (3, 5, 7)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 5))
    for i, n in enumerate(lengths.tolist()):
        assert torch.all(weights[i, :, n:] == 0)
        assert torch.all(weights[i, :, :n] > 0)


def test_no_attention_returns_no_weights_and_uses_final_state_only():
    model = make_model("none")
    src, lengths, tgt = padded_batch()
    logits, weights = model(src, lengths, tgt)
    assert weights is None and logits.shape == (3, 5, TGT_VOCAB)


@pytest.mark.parametrize("attention", ATTENTIONS)
@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
def test_sentence_alone_equals_sentence_in_padded_batch(attention, rnn_type):
    model = make_model(attention, rnn_type)
    src, lengths, tgt = padded_batch()
    batch_logits, batch_weights = model(src, lengths, tgt)
    for i, n in enumerate(lengths.tolist()):
        alone_logits, alone_weights = model(src[i:i + 1, :n], lengths[i:i + 1], tgt[i:i + 1])
        torch.testing.assert_close(alone_logits[0], batch_logits[i], atol=1e-5, rtol=1e-4)
        if alone_weights is not None:
            torch.testing.assert_close(alone_weights[0], batch_weights[i, :, :n], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_stepwise_decoding_equals_teacher_forced_forward(attention):
    model = make_model(attention, input_feeding=False)
    src, lengths, tgt = padded_batch()
    logits, weights = model(src, lengths, tgt)
    logits[:, :, [PAD, BOS]] = float("-inf")  # decoding never produces these
    memory = model.encode(src, lengths)
    state = model.init_state(memory)
    for t in range(tgt.size(1)):
        log_probs, state, step_weights = model.decode_step(tgt[:, t], state, memory)
        torch.testing.assert_close(log_probs, torch.log_softmax(logits[:, t], -1), atol=1e-5, rtol=1e-4)
        if weights is not None:
            torch.testing.assert_close(step_weights, weights[:, t], atol=1e-6, rtol=1e-5)


def test_bahdanau_score_is_its_equation():
    attention = BahdanauAttention(query_size=4, memory_size=6, hidden_size=5)
    s, h = torch.randn(1, 1, 4), torch.randn(1, 3, 6)
    scores = attention.score(s, attention.project_keys(h), None)
    for j in range(3):
        expected = attention.v.weight @ torch.tanh(attention.W_s.weight @ s[0, 0] + attention.W_h(h[0, j]))
        torch.testing.assert_close(scores[0, 0, j], expected[0])


def test_luong_dot_score_is_inner_product_and_context_is_weighted_sum():
    attention = LuongDotAttention()
    s, h = torch.randn(1, 1, 4), torch.randn(1, 3, 4)
    mask = torch.tensor([[True, True, False]])
    context, weights = attention(s, h, attention.project_keys(h), mask)
    expected = torch.softmax(torch.stack([s[0, 0] @ h[0, 0], s[0, 0] @ h[0, 1]]), 0)
    torch.testing.assert_close(weights[0, 0, :2], expected)
    torch.testing.assert_close(context[0, 0], expected[0] * h[0, 0] + expected[1] * h[0, 1])


def test_location_attention_depends_on_previous_weights():
    attention = LocationAttention(query_size=4, memory_size=6, hidden_size=5, channels=3, kernel=3)
    s, h = torch.randn(1, 1, 4), torch.randn(1, 5, 6)
    keys, mask = attention.project_keys(h), torch.ones(1, 5, dtype=torch.bool)
    _, first = attention(s, h, keys, mask, torch.tensor([[[1.0, 0, 0, 0, 0]]]))
    _, moved = attention(s, h, keys, mask, torch.tensor([[[0, 0, 0, 0, 1.0]]]))
    assert not torch.allclose(first, moved)


def test_luong_dot_needs_equal_sizes():
    with pytest.raises(ValueError, match="luong-dot"):
        build_attention("luong-dot", 8, 6, 4)
    with pytest.raises(AttnmtError, match="luong-dot"):
        build_model(ModelConfig(attention="luong-dot", decoder_hidden=8, encoder_hidden=3), 10, 10)


def test_tied_embeddings_share_the_output_matrix():
    config = ModelConfig(embedding_size=16, decoder_hidden=16, tie_embeddings=True)
    model = build_model(config, 20, 20)
    assert model.generator.weight is model.tgt_embed.weight
    with pytest.raises(AttnmtError, match="tie_embeddings"):
        build_model(ModelConfig(embedding_size=16, decoder_hidden=32, tie_embeddings=True), 20, 20)


def test_logits_of_kept_positions_equal_the_full_output():
    model = make_model("bahdanau")
    src, lengths, tgt = padded_batch()
    keep = torch.rand(tgt.shape) > 0.3
    full, _ = model(src, lengths, tgt)
    kept, _ = model(src, lengths, tgt, keep=keep)
    torch.testing.assert_close(kept, full[keep])
