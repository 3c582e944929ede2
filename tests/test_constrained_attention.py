"""Constrained sparsemax attention (Malaviya et al. 2018): the map against its definition, its
gradient, the fertility bounds with their sink, every decoder path and search, the config's errors,
a trained model through the usual commands."""

import entmax
import pytest
import torch

from attnmt.core.config import model_config_of
from attnmt.core.errors import AttnmtError
from attnmt.seq2seq import build_model, decoding, fast_decoding
from attnmt.seq2seq.constrained import SINK_BOUND, ConstrainedSparsemax, csparsemax, fertility_bounds
from attention_helpers import rnn_fields, small_rnn_config
from conftest import toy_config
from test_attention import padded_batch, searches_matching_teacher_forcing, steps_matching_forward

SRC_VOCAB, TGT_VOCAB = 30, 25


def make_constrained_model(attention="bahdanau", fertility=1.5, input_feeding=True, rnn_type="gru", layers=1):
    config = small_rnn_config(
        attention=attention,
        attention_normalizer="csparsemax",
        fertility_bound=fertility,
        input_feeding=input_feeding,
        rnn_type=rnn_type,
        encoder_layers=layers,
        decoder_layers=layers,
    )
    return build_model(config, SRC_VOCAB, TGT_VOCAB).eval()


def projection_by_bisection(e: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The point of {p : sum p = 1, 0 <= p <= u} closest to e, by its own definition: p_j = clip(e_j -
    tau, 0, u_j), tau found by bisection in float64 (another method than the kinks of the module)."""
    e, u = e.double(), u.double()
    low, high = (e - u).min(-1, keepdim=True).values - 1, e.max(-1, keepdim=True).values
    for _ in range(100):
        tau = (low + high) / 2
        total = torch.minimum((e - tau).clamp(min=0), u).sum(-1, keepdim=True)
        low, high = torch.where(total > 1, tau, low), torch.where(total > 1, high, tau)
    return torch.minimum((e - (low + high) / 2).clamp(min=0), u)


def test_csparsemax_is_the_projection_onto_the_bounded_simplex():
    torch.manual_seed(0)
    e = torch.randn(200, 7) * 2
    u = torch.rand(200, 7) * 0.6
    u[:, 3] = u[:, 3] + 1.0  # feasible: the bounds sum to more than 1
    p = csparsemax(e, u)
    torch.testing.assert_close(p.double(), projection_by_bisection(e, u), atol=1e-5, rtol=0)
    torch.testing.assert_close(p.sum(-1), torch.ones(200))
    assert (p >= 0).all() and (p <= u + 1e-6).all()
    assert (p == u).any() and (p == 0).any()  # some weights at their bound, some at 0


def test_with_bounds_that_never_bind_it_is_sparsemax():
    torch.manual_seed(1)
    e = torch.randn(50, 9)
    torch.testing.assert_close(csparsemax(e, torch.full_like(e, 5.0)), entmax.sparsemax(e, dim=-1))


def test_positions_scored_minus_infinity_get_nothing():
    e = torch.tensor([[1.0, 0.5, float("-inf"), 0.2]])
    p = csparsemax(e, torch.tensor([[0.4, 2.0, 2.0, 2.0]]))
    assert p[0, 2] == 0 and p[0, 0] == pytest.approx(0.4)
    assert p.sum().item() == pytest.approx(1.0)


def test_the_gradient_is_the_implicit_one():
    """gradcheck (float64) with respect to the scores and to the bounds, away from ties."""
    torch.manual_seed(2)
    e = torch.randn(6, 5, dtype=torch.float64, requires_grad=True)
    u = torch.rand(6, 5, dtype=torch.float64) * 0.5 + 0.1
    u[:, 0] += 1.0
    u.requires_grad_(True)
    assert torch.autograd.gradcheck(ConstrainedSparsemax.apply, (e, u), eps=1e-7, atol=1e-5)


def test_fertility_bounds_subtract_the_coverage_and_leave_the_sink_unbounded():
    coverage = torch.tensor([[[0.5, 1.9, 2.5, 0.0], [0.0, 0.0, 7.0, 0.0]]]).transpose(0, 1)  # (B=2,T=1,S=4)
    mask = torch.tensor([[True, True, True, True], [True, True, True, False]])
    upper = fertility_bounds(coverage, mask, fertility=2.0)
    torch.testing.assert_close(upper[0, 0, :3], torch.tensor([1.5, 0.1, 0.0]))  # never below 0
    assert upper[0, 0, 3] == SINK_BOUND and upper[1, 0, 2] == SINK_BOUND  # each sentence's last real position
    assert upper[1, 0, 0] == 2.0


@pytest.mark.parametrize(
    "attention, input_feeding",
    [("bahdanau", True), ("luong-general", False), ("luong-dot", True), ("location", True), ("coverage", True)],
)
@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
def test_steps_equal_teacher_forcing_and_no_word_passes_its_fertility(attention, input_feeding, rnn_type):
    """Every decoder path (Luong without input feeding goes step by step: each step's bounds need
    the steps before); over a long target, no source word but the sink gets more than f in all."""
    torch.manual_seed(0)
    model = make_constrained_model(attention, 1.5, input_feeding, rnn_type, layers=2)
    src, lengths, _ = padded_batch()
    tgt = torch.randint(4, TGT_VOCAB, (3, 12))
    steps = steps_matching_forward(model, src, lengths, tgt)
    total = sum(step.weights for step in steps)
    torch.testing.assert_close(steps[-1].state.coverage, total)
    for i, n in enumerate(lengths.tolist()):
        assert (total[i, : n - 1] <= 1.5 + 1e-5).all()
        assert total[i, n - 1] >= 12 - 1.5 * (n - 1) - 1e-4  # the sink takes what the others cannot
        torch.testing.assert_close(steps[0].weights[i].sum(), torch.tensor(1.0))


@pytest.mark.parametrize("beam", [1, 4])
def test_searches_of_constrained_attention_match_teacher_forcing_and_each_other(beam):
    torch.manual_seed(1)
    model = make_constrained_model(fertility=1.0)
    src, lengths, _ = padded_batch()
    searches_matching_teacher_forcing(model, src, lengths, beam)
    assert not model.encode(src, lengths).shareable  # a beam's hypotheses have their own bounds: their own rows


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"type": "transformer", "attention_normalizer": "csparsemax"}, "for an RNN's global attention"),
        (
            {"attention": {"type": "luong-dot", "local": "local-m", "normalizer": "csparsemax"}},
            "model.attention.local: Value error, local-m: normalizer csparsemax .* for global attention",
        ),
        (
            {"attention": {"fertility_bound": 3.0}},
            "model.attention.fertility_bound: .*only with normalizer: csparsemax",
        ),
        (
            {"attention": {"type": "none", "normalizer": "csparsemax"}},
            "model.attention.normalizer: an option of every attention type but none .this attention is none.",
        ),
        ({"attention": {"normalizer": "csparsemax", "fertility_bound": 0}}, "model.attention.fertility_bound"),
        # spelt flat, as before model.attention was a section
        ({"attention": "none", "attention_normalizer": "csparsemax"}, "model.attention_normalizer: an option of"),
    ],
)
def test_config_errors_name_the_field(tmp_path, fields, message):
    with pytest.raises(AttnmtError, match=message):
        toy_config(tmp_path, [("ab", "ab")], model=fields)


def test_every_tensor_of_constrained_attention_is_made_on_the_models_device():
    """With "meta" as the default device, a tensor made without naming its device lands there and
    mixing it with the model's (CPU) tensors fails: training's pass and backward, the searches."""
    model = make_constrained_model("luong-general", input_feeding=False)
    src, lengths, tgt = padded_batch()
    limits = decoding.max_output_lengths(lengths, 1.5, 5)
    with torch.device("meta"):
        logits, _ = model.train()(src, lengths, tgt)
        logits.sum().backward()
        model.eval()
        with torch.inference_mode():
            decoding.beam_search(model, src, lengths, limits, beam=3)
        fast_decoding.beam_search(model, src, lengths, limits, beam=3, graphs=True)


@pytest.mark.slow
def test_a_trained_constrained_model_translates_traces_and_describes_itself(tmp_path):
    """Saved and loaded: the trace's weights are the translation's and keep to the bounds; /models,
    `attnmt info` and the step figure name the map and its fertility."""
    from attnmt.info import model_info
    from attnmt.serve import create_app
    from attnmt.viz import decoder_step_figure
    from conftest import copy_model, local_client

    translator = copy_model(tmp_path, 12, attention_normalizer="csparsemax", fertility_bound=1.0)
    [greedy] = translator.translate(["abcdefg"], beam=1)
    trace = translator.trace("abcdefg")
    torch.testing.assert_close(
        torch.as_tensor(trace.attention), torch.as_tensor(greedy.attention), atol=1e-6, rtol=1e-5
    )
    assert trace.normalizer == "csparsemax"
    assert (trace.attention.sum(0)[:-1] <= 1.0 + 1e-5).all()  # every source piece but </s>: at most f in all
    assert translator.describe()["fertility_bound"] == 1.0
    assert "bahdanau csparsemax (fertility 1) attention" in model_info(translator.folder)["model"]
    with local_client(create_app([translator.folder])) as client:
        [info] = client.get("/models").json()
        body = client.post("/trace", json={"text": "abcdefg"}).json()
    assert info["attention_normalizer"] == "csparsemax" and info["fertility_bound"] == 1.0
    assert body["normalizer"] == "csparsemax"
    assert trace.coverage.bound == 1.0 and not trace.coverage.in_score
    axes = {a.get_label(): a for a in decoder_step_figure(trace, 1).axes}
    assert "a_j = csparsemax(e, u)_j" in axes["weights"].get_title()
    [bound] = axes["coverage"].get_lines()  # the dashed line at f
    assert bound.get_ydata()[0] == 1.0


@pytest.mark.parametrize(
    "options",
    [
        {"attention": "coverage", "coverage_fertility": 2},
        {"attention": "coverage", "coverage_dim": 3},
        {"attention": "location", "attention_normalizer": "csparsemax", "fertility_bound": 1.0},
    ],
)
def test_a_speech_model_attends_with_coverage_and_within_bounds(options):
    """The speech encoder's states under coverage attention and csparsemax: steps = teacher forcing,
    and no state but each utterance's last (the sink) gets more than f over the transcript."""
    from attnmt.core.config import SpeechConfig
    from attnmt.speech.model import build_speech_model

    torch.manual_seed(0)
    model = build_speech_model(
        model_config_of(
            **rnn_fields(
                embedding_size=16,
                encoder_hidden=16,
                decoder_hidden=32,
                attention_size=16,
                location_kernel=5,
                dropout=0.0,
                **options,
            )
        ),
        SpeechConfig(n_mels=20, conv_channels=4, subsample=4),
        TGT_VOCAB,
    ).eval()
    features, lengths = torch.randn(2, 41, 20), torch.tensor([41, 23])
    steps = steps_matching_forward(model, features, lengths, torch.randint(4, TGT_VOCAB, (2, 15)))
    total, states = sum(step.weights for step in steps), model.encode(features, lengths).mask.sum(1)
    if options.get("attention_normalizer") == "csparsemax":
        for i, n in enumerate(states.tolist()):
            assert (total[i, : n - 1] <= 1.0 + 1e-5).all() and total[i, n - 1] >= 15 - (n - 1) - 1e-4
