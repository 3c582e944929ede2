"""Every attention variant: shapes, masking, normalisation, batch independence."""

import pytest
import torch

from attnmt.core.config import ATTENTIONS, RNNConfig, TransformerConfig
from attnmt.core.errors import AttnmtError
from attnmt.seq2seq import BOS, EOS, PAD, build_model
from attnmt.seq2seq.attention import BahdanauAttention, LocationAttention, LuongDotAttention, build_attention
from attention_helpers import rnn_fields, small_rnn_config

WITH_WEIGHTS = [a for a in ATTENTIONS if a != "none"]
SRC_VOCAB, TGT_VOCAB = 30, 25


def make_model(attention, rnn_type="gru", input_feeding=True, layers=1):
    config = small_rnn_config(
        attention=attention,
        rnn_type=rnn_type,
        input_feeding=input_feeding,
        encoder_layers=layers,
        decoder_layers=layers,
    )
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
        alone_logits, alone_weights = model(src[i : i + 1, :n], lengths[i : i + 1], tgt[i : i + 1])
        torch.testing.assert_close(alone_logits[0], batch_logits[i], atol=1e-5, rtol=1e-4)
        if alone_weights is not None:
            torch.testing.assert_close(alone_weights[0], batch_weights[i, :, :n], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("input_feeding", [True, False])
@pytest.mark.parametrize("attention", ATTENTIONS)
def test_stepwise_decoding_equals_teacher_forced_forward(attention, input_feeding, layers, rnn_type):
    """Each of the decoder's three teacher-forcing paths computes what its steps compute one by one."""
    model = make_model(attention, rnn_type, input_feeding, layers)
    src, lengths, tgt = padded_batch()
    memory, weights = model.encode(src, lengths), model(src, lengths, tgt)[1]
    for step in steps_matching_forward(model, src, lengths, tgt):
        if weights is None:
            assert step.weights is None and step.scores is None
            torch.testing.assert_close(step.context, memory.final)  # the fixed context
        else:
            torch.testing.assert_close(step.weights, torch.softmax(step.scores, -1))  # a = softmax(e)
            torch.testing.assert_close(step.context, torch.einsum("bs,bsm->bm", step.weights, memory.states))


def steps_matching_forward(model, src, lengths, tgt) -> list:
    """The decoder's steps along ``tgt``, one by one, each checked to give the teacher-forced
    pass's log-probabilities; and their attention weights the forced pass's."""
    logits, weights = model(src, lengths, tgt)
    logits[:, :, [PAD, BOS]] = float("-inf")  # decoding never produces these
    memory = model.encode(src, lengths)
    state, steps = model.init_state(memory), []
    for t in range(tgt.size(1)):
        steps.append(model.decode_step(tgt[:, t], state, memory))
        state = steps[-1].state
        torch.testing.assert_close(steps[-1].log_probs, torch.log_softmax(logits[:, t], -1), atol=1e-5, rtol=1e-4)
        if weights is not None:
            torch.testing.assert_close(steps[-1].weights, weights[:, t], atol=1e-6, rtol=1e-5)
    return steps


def searches_matching_teacher_forcing(model, src, lengths, beam: int, **options) -> list:
    """Greedy (beam 1) or beam search with ``options``: its best output of each sentence scores as
    teacher forcing scores it and has the forced pass's attention; the fixed-shape searches of
    GPUs (on static buffers here) return the same. -> the reference search's best hypotheses."""
    from attnmt.seq2seq import decoding, fast_decoding

    limits = decoding.max_output_lengths(lengths, 1.5, 5)
    search = decoding.greedy_search if beam == 1 else decoding.beam_search
    options = options if beam == 1 else {"beam": beam, **options}
    with torch.inference_mode():
        reference = search(model, src, lengths, limits, **options)
    fast = (fast_decoding.greedy_search if beam == 1 else fast_decoding.beam_search)(
        model, src, lengths, limits, graphs=True, **options
    )
    for i, (ours, theirs) in enumerate(zip(fast, reference)):
        assert ours[0].tokens == theirs[0].tokens
        assert ours[0].log_prob == pytest.approx(theirs[0].log_prob, abs=1e-5)
        assert ours[0].score == pytest.approx(theirs[0].score, abs=1e-5)
        torch.testing.assert_close(ours[0].attention, theirs[0].attention, atol=1e-5, rtol=0)
        tokens = torch.tensor([theirs[0].tokens])
        tgt_in = torch.cat([torch.tensor([[BOS]]), tokens[:, :-1]], 1)
        n = lengths[i].item()
        with torch.no_grad():
            forced = model.target_log_probs(src[i : i + 1, :n], lengths[i : i + 1], tgt_in, tokens)
            _, weights = model(src[i : i + 1, :n], lengths[i : i + 1], tgt_in)
        assert forced.sum().item() == pytest.approx(theirs[0].log_prob, abs=1e-4)
        torch.testing.assert_close(theirs[0].attention, weights[0], atol=1e-5, rtol=1e-4)
    return [hypotheses[0] for hypotheses in reference]


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
    context, weights, scores = attention(s, h, attention.project_keys(h), mask)
    assert scores[0, 0, 2] == float("-inf")  # padding
    expected = torch.softmax(torch.stack([s[0, 0] @ h[0, 0], s[0, 0] @ h[0, 1]]), 0)
    torch.testing.assert_close(weights[0, 0, :2], expected)
    torch.testing.assert_close(context[0, 0], expected[0] * h[0, 0] + expected[1] * h[0, 1])


def test_location_attention_depends_on_previous_weights():
    attention = LocationAttention(query_size=4, memory_size=6, hidden_size=5, channels=3, kernel=3)
    s, h = torch.randn(1, 1, 4), torch.randn(1, 5, 6)
    keys, mask = attention.project_keys(h), torch.ones(1, 5, dtype=torch.bool)
    _, first, _ = attention(s, h, keys, mask, torch.tensor([[[1.0, 0, 0, 0, 0]]]))
    _, moved, _ = attention(s, h, keys, mask, torch.tensor([[[0, 0, 0, 0, 1.0]]]))
    assert not torch.allclose(first, moved)


def test_luong_dot_needs_equal_sizes():
    with pytest.raises(ValueError, match="luong-dot"):
        build_attention("luong-dot", 8, 6, 4)
    with pytest.raises(AttnmtError, match="luong-dot"):
        build_model(RNNConfig(**rnn_fields(attention="luong-dot", decoder_hidden=8, encoder_hidden=3)), 10, 10)


def test_tied_embeddings_share_the_output_matrix():
    config = RNNConfig(**rnn_fields(embedding_size=16, decoder_hidden=16, tie_embeddings=True))
    model = build_model(config, 20, 20)
    assert model.generator.weight is model.tgt_embed.weight
    with pytest.raises(AttnmtError, match="tie_embeddings"):
        build_model(RNNConfig(**rnn_fields(embedding_size=16, decoder_hidden=32, tie_embeddings=True)), 20, 20)


@pytest.mark.parametrize("kind", ["rnn", "transformer"])
def test_training_loss_is_the_cross_entropy_of_the_real_target_tokens(kind):
    """The loss runs the output layer on the real positions only: the textbook loss of the full output."""
    from attnmt.data.batching import make_batch
    from attnmt.seq2seq.training import sequence_loss

    config = TransformerConfig(d_model=16, heads=2, feed_forward=32) if kind == "transformer" else None
    model = build_model(config, SRC_VOCAB, TGT_VOCAB).eval() if config else make_model("bahdanau")
    batch = make_batch([[5, 6, 7], [8]], [[9, 10], [11, 12, 13, 14]])
    logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in)
    expected = torch.nn.functional.cross_entropy(
        logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=PAD, label_smoothing=0.1, reduction="sum"
    )
    torch.testing.assert_close(sequence_loss(model, batch, 0.1), expected)


@pytest.mark.parametrize("attention", ["bahdanau", "location"])
def test_zeros_decoder_init_starts_from_zero_without_a_bridge_and_steps_equal_forward(attention):
    config = RNNConfig(
        **rnn_fields(
            attention=attention,
            decoder_init="zeros",
            embedding_size=16,
            encoder_hidden=12,
            decoder_hidden=24,
            attention_size=10,
            decoder_layers=2,
            dropout=0.0,
            location_kernel=5,
        )
    )
    model = build_model(config, SRC_VOCAB, TGT_VOCAB).eval()
    assert not any("bridge" in name for name, _ in model.named_parameters())
    src, lengths, tgt = padded_batch()
    memory = model.encode(src, lengths)
    state = model.init_state(memory)
    assert state.hidden.shape == (2, 3, 24) and not state.hidden.any()
    logits, weights = model(src, lengths, tgt)
    logits[:, :, [PAD, BOS]] = float("-inf")
    for t in range(tgt.size(1)):
        step = model.decode_step(tgt[:, t], state, memory)
        state = step.state
        torch.testing.assert_close(step.log_probs, torch.log_softmax(logits[:, t], -1), atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(step.weights, weights[:, t], atol=1e-6, rtol=1e-5)
    bridged = build_model(config.model_copy(update={"decoder_init": "bridge"}), SRC_VOCAB, TGT_VOCAB).eval()
    assert bridged.init_state(bridged.encode(src, lengths)).hidden.any()


# --- decoding with a window (Chorowski et al. 2015) ----------------------------------------------


def test_window_mask_is_around_the_median_of_the_previous_weights():
    from attnmt.seq2seq.attention import window_mask

    prev = torch.tensor(
        [
            [0.1, 0.2, 0.3, 0.4, 0.0, 0.0],  # running sum reaches 1/2 at 2
            [1.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # at 0, the first step's weights
            [0.0, 0.0, 0.0, 0.5, 0.5, 0.0],
        ]
    )  # exactly 1/2 at 3
    mask = torch.tensor([[True] * 4 + [False] * 2, [True] * 6, [True] * 5 + [False]])
    expected = torch.tensor([[0, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0], [0, 0, 1, 1, 1, 0]], dtype=torch.bool)
    assert torch.equal(window_mask(prev, mask, 1, 2), expected)  # [m-1, m+2] and real


@pytest.mark.parametrize("input_feeding", [True, False])
@pytest.mark.parametrize("attention", WITH_WEIGHTS)
def test_windowed_steps_attend_only_near_the_previous_median(attention, input_feeding):
    """Forced and step by step: each row's weights sum to one inside the window of the row before,
    are zero outside it, and the steps equal the teacher-forced pass (which for Luong without input
    feeding then runs step by step)."""
    from attnmt.seq2seq.attention import window_mask

    model = make_model(attention, input_feeding=input_feeding)
    src, lengths, tgt = padded_batch()
    _, weights = model(src, lengths, tgt, window=(1, 1))
    memory = model.encode(src, lengths, window=(1, 1))
    state = model.init_state(memory)
    for t in range(tgt.size(1)):
        inside = window_mask(state.weights, memory.mask, 1, 1)
        step = model.decode_step(tgt[:, t], state, memory)
        assert torch.all(step.weights[~inside] == 0) and torch.all(step.weights[inside] > 0)
        torch.testing.assert_close(step.weights.sum(-1), torch.ones(3))
        torch.testing.assert_close(step.weights, weights[:, t], atol=1e-6, rtol=1e-5)
        state = step.state
    assert torch.all(weights[:, :, 5:] == 0)  # from position 0, a step moves one position at most: 5 steps


@pytest.mark.parametrize("attention", ["bahdanau", "location"])
def test_a_window_wider_than_the_source_changes_nothing(attention):
    model = make_model(attention)
    src, lengths, tgt = padded_batch()
    _, free = model(src, lengths, tgt)
    _, windowed = model(src, lengths, tgt, window=(7, 7))
    torch.testing.assert_close(windowed, free)


def test_luong_location_scores_positions_from_the_decoder_state_alone():
    """Luong et al.'s location: e = W_a s_t, the first S rows of W_a; the source states are not read."""
    from attnmt.seq2seq.attention import LuongLocationAttention

    attention = LuongLocationAttention(query_size=4, max_positions=6)
    s = torch.randn(2, 3, 4)
    h, other = torch.randn(2, 5, 4), torch.randn(2, 5, 4)
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    _, weights, scores = attention(s, h, attention.project_keys(h), mask)
    torch.testing.assert_close(scores[0], s[0] @ attention.W_a.weight[:5].T)
    torch.testing.assert_close(weights[1, :, :3], torch.softmax(s[1] @ attention.W_a.weight[:3].T, -1))
    torch.testing.assert_close(attention(s, other, other, mask)[1], weights)  # content-blind
    with pytest.raises(AttnmtError, match=r"at most 6 source positions \(model.max_positions\).* 7"):
        attention(s, torch.randn(2, 7, 4), torch.randn(2, 7, 4), torch.ones(2, 7, dtype=torch.bool))
