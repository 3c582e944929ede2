"""Luong et al.'s (2015) local attention: local-m (p_t = t) and local-p (p_t predicted, a Gaussian
around it), each step within [p_t - D, p_t + D]; its equations, the decoder's paths, and the
searches."""

import math

import pytest
import torch

from attnmt.core.config import RNNConfig, TransformerConfig, config_from_dict, load_config
from attnmt.core.errors import AttnmtError
from attnmt.seq2seq import PAD, build_model, decoding, fast_decoding
from attnmt.seq2seq.attention import LocalAttention, LuongGeneralAttention, build_attention
from attention_helpers import small_rnn_config
from test_attention import (
    SRC_VOCAB,
    TGT_VOCAB,
    padded_batch,
    searches_matching_teacher_forcing,
    steps_matching_forward,
)

LOCAL = ["local-m", "local-p"]


def make_local_model(local, attention="luong-general", input_feeding=True, layers=1, window=2, rnn_type="gru"):
    config = small_rnn_config(
        attention=attention,
        local_attention=local,
        local_window=window,
        rnn_type=rnn_type,
        input_feeding=input_feeding,
        decoder_layers=layers,
    )
    return build_model(config, SRC_VOCAB, TGT_VOCAB).eval()


def long_batch(width=12):
    """Three sources of 12, 9 and 3 pieces (padded): wider than a window of 2 on either side."""
    torch.manual_seed(0)
    lengths = torch.tensor([width, 9, 3])
    src = torch.randint(4, SRC_VOCAB, (3, width))
    for i, n in enumerate(lengths.tolist()):
        src[i, n:] = PAD
    return src, lengths, torch.randint(4, TGT_VOCAB, (3, 7))


def test_local_m_attends_within_d_of_t_and_softmaxes_the_scores_there():
    """local-m: a_t = softmax(e) over |j - t| <= D; past the source's end, around its last position."""
    D = 2
    attention = LocalAttention(LuongGeneralAttention(4, 6), "local-m", D, query_size=4, hidden_size=5)
    T, S = 7, 5
    s, h = torch.randn(1, T, 4), torch.randn(1, S, 6)
    mask = torch.tensor([[True] * 4 + [False]])  # 4 real positions
    steps = torch.arange(T).unsqueeze(0)
    context, weights, scores = attention(s, h, attention.project_keys(h), mask, steps=steps)
    for t in range(T):
        p = min(t, 3)
        inside = [j for j in range(S) if abs(j - p) <= D and j < 4]
        e = torch.stack([s[0, t] @ attention.scorer.W(h[0, j]) for j in inside])
        expected = torch.zeros(S)
        expected[inside] = torch.softmax(e, 0)
        torch.testing.assert_close(weights[0, t], expected)
        torch.testing.assert_close(context[0, t], expected @ h[0])


def test_local_p_is_its_equation():
    """local-p: p_t = (S-1) sigmoid(v_p^T tanh(W_p s_t)); a_t(j) = softmax(e)_j exp(-(j-p_t)^2 / (2 (D/2)^2))
    over |j - p_t| <= D, not renormalised."""
    D = 2
    attention = LocalAttention(LuongGeneralAttention(4, 6), "local-p", D, query_size=4, hidden_size=5)
    S = 9
    s, h = torch.randn(2, 3, 4), torch.randn(2, S, 6)
    mask = torch.tensor([[True] * S, [True] * 6 + [False] * 3])
    _, weights, _ = attention(s, h, attention.project_keys(h), mask)
    for b, length in enumerate([S, 6]):
        for t in range(3):
            p = (length - 1) * torch.sigmoid(attention.v_p.weight @ torch.tanh(attention.W_p.weight @ s[b, t]))[0]
            inside = [j for j in range(length) if abs(j - p.item()) <= D]
            e = torch.stack([s[b, t] @ attention.scorer.W(h[b, j]) for j in inside])
            gaussian = torch.exp(-((torch.tensor(inside, dtype=torch.float) - p) ** 2) / (2 * (D / 2) ** 2))
            expected = torch.zeros(S)
            expected[inside] = torch.softmax(e, 0) * gaussian
            torch.testing.assert_close(weights[b, t], expected)
            assert weights[b, t].sum() < 1


def test_local_p_learns_its_position_through_the_gaussian():
    attention = LocalAttention(LuongGeneralAttention(4, 6), "local-p", 2, query_size=4, hidden_size=5)
    s, h = torch.randn(1, 2, 4), torch.randn(1, 8, 6)
    context, _, _ = attention(s, h, attention.project_keys(h), torch.ones(1, 8, dtype=torch.bool))
    context.sum().backward()
    assert attention.W_p.weight.grad.abs().sum() > 0 and attention.v_p.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("input_feeding", [True, False])
@pytest.mark.parametrize("attention", ["luong-dot", "luong-general", "luong-concat"])
@pytest.mark.parametrize("local", LOCAL)
def test_stepwise_decoding_equals_teacher_forced_forward(local, attention, input_feeding, layers, rnn_type):
    """The all-steps-at-once pass (Luong without input feeding: positions 0..T-1 at once) and the
    sequential ones compute what the steps compute one by one, the step counter included."""
    model = make_local_model(local, attention, input_feeding, layers, rnn_type=rnn_type)
    steps = steps_matching_forward(model, *long_batch())
    assert (steps[-1].state.step is not None) == (local == "local-m")


def test_local_m_weights_are_zero_outside_the_window_and_sum_to_one():
    model = make_local_model("local-m", window=2)
    src, lengths, tgt = long_batch()
    _, weights = model(src, lengths, tgt)
    j = torch.arange(src.size(1))
    for b, n in enumerate(lengths.tolist()):
        for t in range(tgt.size(1)):
            inside = (j - min(t, n - 1)).abs().le(2) & (j < n)
            assert torch.all(weights[b, t][~inside] == 0) and torch.all(weights[b, t][inside] > 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, tgt.size(1)))


def test_local_p_weights_stay_within_d_of_their_own_position():
    model = make_local_model("local-p", window=2)
    src, lengths, tgt = long_batch()
    _, weights = model(src, lengths, tgt)
    for b, n in enumerate(lengths.tolist()):
        for t in range(tgt.size(1)):
            attended = weights[b, t].nonzero().flatten()
            assert attended.max() - attended.min() <= 4 and attended.max() < n  # 2D + 1 positions at most
    assert torch.all(weights.sum(-1) <= 1 + 1e-6) and torch.all(weights.sum(-1) > 0)


@pytest.mark.parametrize("local", LOCAL)
def test_sentence_alone_equals_sentence_in_padded_batch(local):
    model = make_local_model(local, input_feeding=False)
    src, lengths, tgt = long_batch()
    batch_logits, batch_weights = model(src, lengths, tgt)
    for i, n in enumerate(lengths.tolist()):
        alone_logits, alone_weights = model(src[i : i + 1, :n], lengths[i : i + 1], tgt[i : i + 1])
        torch.testing.assert_close(alone_logits[0], batch_logits[i], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(alone_weights[0], batch_weights[i, :, :n], atol=1e-5, rtol=1e-4)


def test_a_window_wider_than_any_source_is_global_attention_for_local_m():
    local = make_local_model("local-m", window=50)
    attention = local.config.attention.model_copy(update={"local": "none"})
    plain = build_model(local.config.model_copy(update={"attention": attention}), SRC_VOCAB, TGT_VOCAB).eval()
    plain.load_state_dict({k.replace("attention.scorer.", "attention."): v for k, v in local.state_dict().items()})
    src, lengths, tgt = padded_batch()
    torch.testing.assert_close(local(src, lengths, tgt), plain(src, lengths, tgt))


@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize("local", LOCAL)
def test_searches_of_local_attention_match_teacher_forcing_and_each_other(local, beam):
    """Beam search shares each sentence's memory among its hypotheses (k queries of one row, each at
    step t): its best hypothesis scores as teacher forcing scores it, its attention is the forced
    pass's; and the fixed-shape searches of GPUs (on static buffers here) return the same."""
    model = make_local_model(local, "luong-dot", window=2)
    with torch.no_grad():
        model.generator.bias[3] -= 2.0  # outputs of several steps (3 = EOS)
    searches_matching_teacher_forcing(model, *long_batch()[:2], beam)


def test_config_refuses_local_attention_without_a_luong_score(tmp_path):
    with pytest.raises(AttnmtError, match="model.attention.local: an option of attention types luong-dot, "):
        config_from_dict(
            {
                "experiment_dir": "x",
                "data": {"train": {"src": "a", "tgt": "b"}},
                "training": {"max_steps": 1},
                "model": {"attention": {"type": "bahdanau", "local": "local-p"}},
            },
            tmp_path,
            source="c",
        )
    with pytest.raises(ValueError, match="local_attention"):
        TransformerConfig(attention="luong-general", local_attention="local-m")
    with pytest.raises(ValueError, match="Luong score"):
        build_attention("location", 4, 4, 4, local="local-m")
    with pytest.raises(ValueError, match="attention.luong-dot.window"):
        RNNConfig(attention={"type": "luong-dot", "local": "local-m", "window": 0})
    path = tmp_path / "c.yaml"
    path.write_text(
        "experiment_dir: x\ndata: {train: {src: a, tgt: b}}\ntraining: {max_steps: 1, "
        "attention_window: [1, 1]}\nmodel: {attention: {type: luong-dot, local: local-p}, "
        "decoder_hidden: 512}\n"
    )
    with pytest.raises(AttnmtError, match="training.attention_window.*model.attention.window"):
        load_config(path)


def test_an_attention_window_at_decoding_time_is_a_clear_error():
    model = make_local_model("local-p")
    src, lengths, _ = padded_batch()
    with pytest.raises(AttnmtError, match="local attention"):
        model.encode(src, lengths, window=(1, 1))


def test_the_gaussian_has_sigma_d_over_2():
    """At distance D the Gaussian is exp(-2): the window's edge keeps 13.5 % of a score's weight."""
    attention = LocalAttention(LuongGeneralAttention(2, 2), "local-p", 4, query_size=2, hidden_size=2)
    with torch.no_grad():
        attention.v_p.weight.zero_()  # p_t = (S-1) / 2 = 4 with S = 9
        attention.scorer.W.weight.zero_()  # equal scores: softmax 1/9 inside the window
    s, h = torch.randn(1, 1, 2), torch.randn(1, 9, 2)
    _, weights, _ = attention(s, h, attention.project_keys(h), torch.ones(1, 9, dtype=torch.bool))
    assert weights[0, 0, 4].item() == pytest.approx(1 / 9)
    assert weights[0, 0, 0].item() == pytest.approx(math.exp(-2) / 9)


@pytest.fixture(scope="module")
def local_model(tmp_path_factory):
    """A local-m model (D = 1) trained, saved and loaded through the usual code (20 steps, a few seconds)."""
    from conftest import copy_model

    return copy_model(
        tmp_path_factory.mktemp("local"), 20, attention="luong-general", local_attention="local-m", local_window=1
    )


@pytest.mark.slow
def test_a_trained_local_model_translates_traces_and_describes_itself(local_model):
    """Translations, the step trace, the beam tree, the server's description and `attnmt info`'s
    line; every output row's weights inside its window (local-m: around t)."""
    from attnmt.info import model_info

    translator = local_model
    assert translator.config.model.attention.local == "local-m"
    for t in translator.translate(["abcdefg", "hij"], beam=3):
        for row, weights in enumerate(t.attention):
            attended = weights.nonzero()[0]
            p = min(row, len(t.source_tokens) - 1)
            assert attended.min() >= p - 1 and attended.max() <= p + 1
    greedy = translator.translate(["abcdefg"], beam=1)[0]
    torch.testing.assert_close(translator.trace("abcdefg").attention, greedy.attention, atol=1e-6, rtol=1e-5)
    translator.beam_tree("abcdefg", beam=2)
    info = translator.describe()
    assert (info["local_attention"], info["local_window"]) == ("local-m", 1)
    assert "luong-general local-m (D=1) attention" in model_info(translator.folder)["model"]
    assert "luong-general local-m (D=1) attention" in repr(translator)


@pytest.mark.slow
def test_the_trace_of_a_local_model_has_no_score_outside_the_window(local_model):
    """Over HTTP a score outside the window (-inf) is null, its weight 0; the step figure draws no
    bar there and says so."""
    import numpy as np

    from attnmt.serve import create_app
    from attnmt.viz import decoder_step_figure
    from conftest import local_client

    with local_client(create_app([local_model.folder])) as client:
        body = client.post("/trace", json={"text": "abcdefg"}).json()
        [info] = client.get("/models").json()
    assert (info["local_attention"], info["local_window"]) == ("local-m", 1)
    for t, step in enumerate(body["steps"]):
        p = min(t, len(body["source_tokens"]) - 1)
        inside = [abs(j - p) <= 1 for j in range(len(body["source_tokens"]))]
        assert [e is not None for e in step["scores"]] == inside
        assert [w > 0 for w in step["weights"]] == inside
    figure = decoder_step_figure(local_model.trace("abcdefg"), 0)
    ax = next(a for a in figure.axes if a.get_label() == "scores")
    heights = [bar.get_height() for bar in ax.patches]
    assert sum(np.isfinite(heights)) == 2  # step 0: positions 0 and 1
    assert "none outside the window" in ax.get_title()


def test_every_tensor_of_local_attention_is_made_on_the_models_device():
    """With "meta" as the default device, a tensor made without naming its device lands there and
    mixing it with the model's (CPU) tensors fails: training's pass, the searches and the fixed-shape ones."""
    models = [make_local_model(local, input_feeding=False) for local in LOCAL]
    src, lengths, tgt = long_batch()
    limits = decoding.max_output_lengths(lengths, 1.5, 5)
    with torch.device("meta"):
        for model in models:
            model(src, lengths, tgt)
            with torch.inference_mode():
                decoding.beam_search(model, src, lengths, limits, beam=3)
                decoding.greedy_search(model, src, lengths, limits)
            fast_decoding.beam_search(model, src, lengths, limits, beam=3, graphs=True)
