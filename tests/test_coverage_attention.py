"""Coverage attention (Tu et al. 2016; See et al. 2017) and See et al.'s coverage loss: the score
against its equation, the coverage the decoder keeps, every decoding path, the loss, the config's
errors, a trained model through the usual commands."""

import pytest
import torch

from attnmt.core.config import RNNConfig
from attnmt.core.errors import AttnmtError
from attnmt.data.batching import training_batch
from attnmt.seq2seq import build_model, decoding, fast_decoding
from attnmt.seq2seq.attention import CoverageAttention, build_attention
from attnmt.seq2seq.training import coverage_loss, sequence_loss
from attention_helpers import rnn_fields, small_rnn_config
from conftest import toy_config
from test_attention import padded_batch, searches_matching_teacher_forcing, steps_matching_forward

SRC_VOCAB, TGT_VOCAB = 30, 25


def make_coverage_model(fertility=0, rnn_type="gru", layers=1, **options):
    """fertility "nn": Tu et al.'s NN-based coverage (coverage_dim 3) instead of a fertility."""
    if fertility == "nn":
        fertility, options = 0, {"coverage_dim": 3, **options}
    config = small_rnn_config(
        attention="coverage",
        coverage_fertility=fertility,
        rnn_type=rnn_type,
        encoder_layers=layers,
        decoder_layers=layers,
        **options,
    )
    return build_model(config, SRC_VOCAB, TGT_VOCAB).eval()


@pytest.mark.parametrize("fertility", [0, 3])
def test_the_coverage_score_is_its_equation(fertility):
    """e_j = v^T tanh(W_s s + W_h h_j + w_c C_j), C_j the coverage divided by Phi_j = N sigmoid(u_f h_j)."""
    torch.manual_seed(0)
    attention = CoverageAttention(query_size=6, memory_size=5, hidden_size=4, fertility=fertility)
    s, h = torch.randn(2, 1, 6), torch.randn(2, 3, 5)
    coverage = torch.rand(2, 1, 3) * 2
    scores = attention.score(s, attention.project_keys(h), coverage)
    phi = fertility * torch.sigmoid(attention.u_f(h)).squeeze(-1) if fertility else torch.ones(2, 3)
    for b in range(2):
        for j in range(3):
            C = coverage[b, 0, j] / phi[b, j]
            energy = attention.W_s(s[b, 0]) + attention.W_h(h[b, j]) + attention.w_c.weight[:, 0] * C
            expected = attention.v.weight[0] @ torch.tanh(energy)
            assert scores[b, 0, j].item() == pytest.approx(expected.item(), abs=1e-5)


def test_the_score_depends_on_the_coverage_and_fertility_only_with_coverage_attention():
    torch.manual_seed(0)
    attention = CoverageAttention(6, 5, 4, fertility=2)
    s, h = torch.randn(1, 1, 6), torch.randn(1, 3, 5)
    keys = attention.project_keys(h)
    assert keys.shape == (1, 3, 5)  # W_h h (4) and 1 / Phi
    assert not torch.allclose(
        attention.score(s, keys, torch.zeros(1, 1, 3)), attention.score(s, keys, torch.tensor([[[1.0, 0.0, 0.0]]]))
    )
    with pytest.raises(ValueError, match="coverage_fertility is coverage attention's"):
        build_attention("bahdanau", 6, 5, 4, coverage_fertility=2)


@pytest.mark.parametrize("fertility", [0, 2])
@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
def test_the_decoder_keeps_the_sum_of_the_past_weights_and_steps_equal_teacher_forcing(fertility, rnn_type):
    model = make_coverage_model(fertility, rnn_type, layers=2)
    src, lengths, tgt = padded_batch()
    memory = model.encode(src, lengths)
    assert not memory.shareable  # a beam's hypotheses have their own coverage: their own rows
    state = model.init_state(memory)
    assert torch.equal(state.coverage, torch.zeros_like(state.weights))
    steps = steps_matching_forward(model, src, lengths, tgt)
    torch.testing.assert_close(steps[-1].state.coverage, sum(step.weights for step in steps))


def test_nn_based_coverage_is_its_gru_and_steps_equal_teacher_forcing():
    """C_j <- GRU(C_j; a_t(j), h_j, s_{t-1}) (torch's GRUCell with the same weights, per position) and
    e_j = v^T tanh(W_s s + W_h h_j + W_c C_j); the decoder keeps the vectors (B,S,d)."""
    torch.manual_seed(0)
    attention = CoverageAttention(query_size=6, memory_size=5, hidden_size=4, dim=3)
    s, h = torch.randn(2, 6), torch.randn(2, 4, 5)
    keys = attention.project_keys(h)
    assert keys.shape == (2, 4, 4 + 9)  # W_h h and the GRU's input from h_j
    coverage, a = torch.randn(2, 4, 3), torch.softmax(torch.randn(2, 4), -1)
    cell = torch.nn.GRUCell(1 + 5 + 6, 3)
    with torch.no_grad():  # (torch's gate order: r, z, n, as the attention's)
        cell.weight_ih.copy_(torch.cat([attention.gru_a.weight, attention.gru_h.weight, attention.gru_s.weight], 1))
        cell.bias_ih.copy_(attention.gru_a.bias)
        cell.weight_hh.copy_(attention.gru_c.weight)
        cell.bias_hh.copy_(attention.gru_c.bias)
    inputs = torch.cat([a.unsqueeze(-1), h, s.unsqueeze(1).expand(2, 4, 6)], -1)
    expected = cell(inputs.flatten(0, 1), coverage.flatten(0, 1)).view(2, 4, 3)
    torch.testing.assert_close(attention.next_coverage(coverage, a, s, keys), expected)
    scores = attention.score(s.unsqueeze(1), keys, coverage.unsqueeze(1))
    energy = attention.W_s(s).unsqueeze(1) + attention.W_h(h) + attention.w_c(coverage)
    torch.testing.assert_close(scores, (torch.tanh(energy) @ attention.v.weight[0]).unsqueeze(1))

    model = make_coverage_model("nn", layers=2)
    src, lengths, tgt = padded_batch()
    state = model.init_state(model.encode(src, lengths))
    assert torch.equal(state.coverage, torch.zeros(*state.weights.shape, 3))
    steps = steps_matching_forward(model, src, lengths, tgt)
    assert steps[-1].state.coverage.shape == (*state.weights.shape, 3) and steps[-1].state.coverage.abs().sum() > 0
    with pytest.raises(ValueError, match="NN-based coverage"):
        CoverageAttention(6, 5, 4, fertility=2, dim=3)
    with pytest.raises(ValueError, match="coverage_dim is coverage attention's"):
        build_attention("bahdanau", 6, 5, 4, coverage_dim=3)
    with pytest.raises(ValueError, match="csparsemax's bounds need the sum"):
        build_attention("coverage", 6, 5, 4, normalizer="csparsemax", coverage_dim=3)


def test_other_attentions_keep_no_coverage():
    config = RNNConfig(
        **rnn_fields(
            attention="bahdanau",
            embedding_size=16,
            encoder_hidden=12,
            decoder_hidden=24,
            attention_size=10,
            dropout=0.0,
        )
    )
    model = build_model(config, SRC_VOCAB, TGT_VOCAB)
    src, lengths, _ = padded_batch()
    assert model.init_state(model.encode(src, lengths)).coverage is None


@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize("fertility", [0, 2, "nn"])
def test_searches_of_coverage_attention_match_teacher_forcing_and_each_other(fertility, beam):
    """Greedy and beam search (reference and fixed-shape), with the coverage penalty too: each
    hypothesis carries its own coverage through the beam's reordering."""
    torch.manual_seed(1)
    model = make_coverage_model(fertility)
    src, lengths, _ = padded_batch()
    searches_matching_teacher_forcing(model, src, lengths, beam)
    if beam > 1:
        searches_matching_teacher_forcing(model, src, lengths, beam, beta=0.4)  # the coverage penalty


def test_the_coverage_loss_is_its_equation():
    """sum over real steps t and positions j of min(a_t(j), sum_{t' < t} a_t'(j))."""
    torch.manual_seed(0)
    weights = torch.softmax(torch.randn(2, 4, 3), -1)
    real = torch.tensor([[True, True, True, True], [True, True, False, False]])
    expected = 0.0
    for b in range(2):
        for t in range(4):
            if real[b, t]:
                covered = weights[b, :t].sum(0)
                expected += torch.minimum(weights[b, t], covered).sum().item()
    assert coverage_loss(weights, real).item() == pytest.approx(expected, abs=1e-6)


def test_the_coverage_loss_is_zero_while_no_position_is_attended_twice():
    diagonal = torch.eye(4).unsqueeze(0)  # step t on position t
    assert coverage_loss(diagonal, torch.ones(1, 4, dtype=torch.bool)).item() == 0
    again = torch.tensor([[[1.0, 0.0], [1.0, 0.0]]])  # the second step on the first position again
    assert coverage_loss(again, torch.ones(1, 2, dtype=torch.bool)).item() == 1


@pytest.mark.parametrize("attention", ["bahdanau", "coverage", "location"])
def test_sequence_loss_adds_lambda_times_the_coverage_loss_of_the_forced_attention(attention):
    torch.manual_seed(0)
    config = RNNConfig(
        **rnn_fields(
            attention=attention,
            embedding_size=16,
            encoder_hidden=12,
            decoder_hidden=24,
            attention_size=10,
            dropout=0.0,
            location_kernel=5,
        )
    )
    model = build_model(config, SRC_VOCAB, TGT_VOCAB)
    batch = training_batch([[5, 6, 7, 8, 2], [9, 10, 2]], [[4, 5, 6, 2], [7, 2]])
    plain = sequence_loss(model, batch)
    _, weights = model(batch.src, batch.src_lengths, batch.tgt_in)
    penalty = coverage_loss(weights, batch.tgt_out != 0)
    assert penalty.item() > 0
    torch.testing.assert_close(sequence_loss(model, batch, coverage_weight=0.7), plain + 0.7 * penalty)
    penalty.backward()  # the attention learns from it
    assert all(
        p.grad is not None and p.grad.abs().sum() > 0
        for p in model.decoder.attention.parameters()
        if p.requires_grad and p.dim() > 1
    )


FERTILITY_ERROR = "model.attention.fertility: an option of attention type coverage only .this attention is bahdanau."
DIM_ERROR = "model.attention.dim: an option of attention type coverage only .this attention is bahdanau."


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"model": {"attention": {"type": "bahdanau", "fertility": 2}}}, FERTILITY_ERROR),
        (
            {"model": {"attention": "bahdanau", "coverage_fertility": 2}},
            "model.coverage_fertility: an option of attention type coverage only .model.attention.fertility.",
        ),
        (
            {"model": {"type": "transformer", "coverage_fertility": 2}},
            "model.coverage_fertility: a field of model.type: rnn",
        ),
        ({"model": {"attention": {"type": "bahdanau", "dim": 10}}}, DIM_ERROR),
        (
            {"model": {"attention": {"type": "coverage", "dim": 10, "fertility": 2}}},
            "model.attention.dim: .*NN-based coverage has no fertility.*here 2.$",
        ),
        (
            {"model": {"attention": {"type": "coverage", "dim": 10, "normalizer": "csparsemax"}}},
            "model.attention.dim: .*NN-based coverage: not with normalizer csparsemax",
        ),
        ({"model": {"attention": "none"}, "training": {"coverage_loss": 1.0}}, "here model.attention: none"),
        ({"model": {"type": "transformer"}, "training": {"coverage_loss": 1.0}}, "here model.type: transformer"),
        ({"training": {"coverage_loss": -1.0}}, "training.coverage_loss"),
    ],
)
def test_config_errors_name_the_field(tmp_path, fields, message):
    with pytest.raises(AttnmtError, match=message):
        toy_config(tmp_path, [("ab", "ab")], model=fields.get("model"), training=fields.get("training"))


def test_the_coverage_loss_of_a_pair_model_is_an_error(tmp_path):
    from attnmt.core.config import config_from_dict
    from conftest import pair_config

    raw = pair_config(tmp_path)
    raw["training"]["coverage_loss"] = 1.0
    with pytest.raises(AttnmtError, match="here task: pairs"):
        config_from_dict(raw, tmp_path)


@pytest.mark.parametrize("fertility", [2, "nn"])
def test_every_tensor_of_coverage_attention_is_made_on_the_models_device(fertility):
    """With "meta" as the default device, a tensor made without naming its device lands there and
    mixing it with the model's (CPU) tensors fails: training's pass, loss and backward, the searches."""
    model = make_coverage_model(fertility=fertility)
    src, lengths, tgt = padded_batch()
    batch = training_batch([[5, 6, 7, 8, 2], [9, 10, 2]], [[4, 5, 6, 2], [7, 2]])
    limits = decoding.max_output_lengths(lengths, 1.5, 5)
    with torch.device("meta"):
        sequence_loss(model.train(), batch, coverage_weight=1.0).backward()
        model.eval()
        with torch.inference_mode():
            decoding.beam_search(model, src, lengths, limits, beam=3, beta=0.2)
        fast_decoding.beam_search(model, src, lengths, limits, beam=3, graphs=True)


@pytest.mark.slow
@pytest.mark.parametrize(
    "options, name",
    [
        ({"coverage_fertility": 2}, "coverage (fertility N=2) attention"),
        ({"coverage_dim": 4}, "coverage (NN-based, d=4) attention"),
    ],
)
def test_a_trained_coverage_model_translates_traces_and_describes_itself(tmp_path, options, name):
    """Trained with fertility (or NN-based coverage) and the coverage loss (the log says so), saved and
    loaded: its translations' attention is the trace's, /models, `attnmt info` and the step figure name it."""
    from attnmt.info import model_info
    from attnmt.serve import create_app
    from attnmt.viz import decoder_step_figure
    from conftest import copy_model, local_client

    logs = []
    translator = copy_model(
        tmp_path, 12, attention="coverage", **options, training={"coverage_loss": 1.0}, log=logs.append
    )
    [line] = [line for line in logs if line.startswith("model: ")]
    assert line.startswith(f"model: {name}, ") and "; coverage loss, lambda 1;" in line
    [greedy] = translator.translate(["abcdefg"], beam=1)
    trace = translator.trace("abcdefg")
    torch.testing.assert_close(
        torch.as_tensor(trace.attention), torch.as_tensor(greedy.attention), atol=1e-6, rtol=1e-5
    )
    translator.beam_tree("abcdefg", beam=2)
    expected = {
        "attention": "coverage",
        "coverage_fertility": options.get("coverage_fertility", 0),
        "coverage_dim": options.get("coverage_dim", 0),
    }
    assert {key: translator.describe()[key] for key in expected} == expected
    assert name in model_info(translator.folder)["model"]
    with local_client(create_app([translator.folder])) as client:
        [info] = client.get("/models").json()
    assert {key: info[key] for key in expected} == expected
    assert trace.coverage.in_score and (trace.coverage.fertility, trace.coverage.dim) == tuple(expected.values())[1:]
    title = next(a for a in decoder_step_figure(trace, 1).axes if a.get_label() == "coverage").get_title()
    assert ("fertility" in title) == ("coverage_fertility" in options)
    assert ("GRU's 4-dimensional vector" in title) == ("coverage_dim" in options)


@pytest.mark.slow
def test_training_uses_the_configs_coverage_loss(tmp_path):
    """The same run with and without training.coverage_loss ends with other weights."""
    from conftest import copy_model

    plain, covered = (
        copy_model(tmp_path / str(weight), 3, attention="coverage", training={"coverage_loss": weight})
        for weight in (0.0, 5.0)
    )
    w_c = [translator.model.decoder.attention.w_c.weight for translator in (plain, covered)]
    assert not torch.allclose(*w_c)
