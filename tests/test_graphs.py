"""The GPU training path of attnmt.seq2seq.graphs: what it captures computes the loss and gradients
of the usual path, shapes are captured once each, the random state is put back after a capture,
and the path is only taken where it applies. A CPU stands in for the GPU here (the capture is
replaced by the module itself); tests/test_gpu.py captures for real on a GPU."""

import pytest
import torch

from attnmt.core import speed
from attnmt.core.config import TransformerConfig, model_config_of
from attnmt.data.batching import training_batch
from attnmt.seq2seq import build_model, graphs
from attnmt.seq2seq.graphs import BatchLoss, GraphedLoss, graphed_loss, padded_targets
from attnmt.seq2seq.training import TrainingLoss, sequence_loss
from attention_helpers import rnn_fields

RNN = dict(embedding_size=16, encoder_hidden=12, decoder_hidden=24, attention_size=10, location_kernel=5, dropout=0.0)
SOURCES = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [14, 15, 16, 17]]
TARGETS = [[5, 6], [7, 8, 9, 10, 11, 12, 13, 14, 15], [16]]


def gradients(model, loss):
    model.zero_grad()
    loss.backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


class FakeCuda:
    """torch.cuda's capture and random state on a CPU: the 'graph' is the module itself."""

    def __init__(self, monkeypatch):
        self.captured, self.state_sets, self.pools = [], 0, []
        monkeypatch.setattr(torch.cuda, "make_graphed_callables", self.make_graphed_callables)
        monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: object())
        monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device=None: torch.get_rng_state())
        monkeypatch.setattr(torch.cuda, "set_rng_state", self.set_rng_state)

    def make_graphed_callables(self, module, samples, num_warmup_iters, allow_unused_input, pool):
        self.pools.append(pool)
        assert not torch.is_autocast_cache_enabled() or not torch.is_autocast_enabled("cuda")
        for _ in range(num_warmup_iters):  # warm-up passes draw random numbers, as on a GPU
            torch.rand(3)
        self.captured.append(tuple(x.shape for x in samples))
        return module

    def set_rng_state(self, state, device=None):
        self.state_sets += 1
        torch.set_rng_state(state)


def attention_options(attention: str) -> dict:
    """A config's attention fields: "local-m" and "local-p" are Luong's local attention with the general score;
    "sparsemax", "entmax15" and "csparsemax" the Bahdanau score with that normalizer; "coverage-fertility"
    coverage attention with Tu et al.'s fertility, "coverage-nn" with their NN-based coverage."""
    if attention == "coverage-fertility":
        return {"attention": "coverage", "coverage_fertility": 2}
    if attention == "coverage-nn":
        return {"attention": "coverage", "coverage_dim": 4}
    if attention == "csparsemax":
        return {"attention": "bahdanau", "attention_normalizer": "csparsemax", "fertility_bound": 1.0}
    if attention in ("sparsemax", "entmax15"):
        return {"attention": "bahdanau", "attention_normalizer": attention}
    if attention.startswith("local-"):
        return {"attention": "luong-general", "local_attention": attention, "local_window": 1}
    return {"attention": attention}


@pytest.mark.parametrize(
    "attention",
    [
        "bahdanau",
        "luong-general",
        "location",
        "none",
        "local-m",
        "local-p",
        "sparsemax",
        "entmax15",
        "coverage-fertility",
        "coverage-nn",
        "csparsemax",
    ],
)
@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
def test_the_captured_loss_is_the_usual_loss(attention, rnn_type):
    """BatchLoss (fixed shapes: unpacked encoder, targets padded in time, padding ignored by
    target) against sequence_loss on the textbook path (packed encoder, padding selected away):
    same loss and gradients."""
    torch.manual_seed(0)
    model = build_model(
        model_config_of(**rnn_fields(**attention_options(attention), rnn_type=rnn_type, **RNN)), 30, 30
    ).train()
    batch = training_batch(SOURCES, TARGETS)
    tgt_in, tgt_out = padded_targets(batch)
    assert tgt_in.size(1) % graphs.TIME_MULTIPLE == 0 and tgt_in.size(1) > batch.tgt_in.size(1)
    with speed.plain():  # the usual path's packed encoder, against the unpacked one of the capture
        usual = sequence_loss(model, batch, label_smoothing=0.1)
        usual_grads = gradients(model, usual)
    captured = BatchLoss(model, 0.1)(batch.src, batch.src_lengths, tgt_in, tgt_out)
    captured_grads = gradients(model, captured)

    torch.testing.assert_close(captured, usual, rtol=1e-5, atol=1e-5)
    assert captured_grads.keys() == usual_grads.keys()
    for name in usual_grads:
        torch.testing.assert_close(captured_grads[name], usual_grads[name], rtol=1e-4, atol=1e-6, msg=name)


TRANSFORMER = dict(
    type="transformer",
    d_model=16,
    heads=2,
    feed_forward=32,
    encoder_layers=2,
    decoder_layers=2,
    dropout=0.0,
    attention_dropout=0.0,
)


@pytest.mark.parametrize(
    "options",
    [{}, {"norm": "post", "positions": "learned", "max_positions": 32}, {"attention_normalizer": "entmax15"}],
    ids=["pre-norm", "post-norm-learned-positions", "entmax15"],
)
def test_the_captured_loss_of_a_transformer_is_the_usual_loss(options):
    """A Transformer's BatchLoss (targets padded in time, padding ignored by target) against
    sequence_loss with the padding selected away: same loss and gradients."""
    torch.manual_seed(0)
    model = build_model(model_config_of(**rnn_fields(**TRANSFORMER, **options)), 30, 30).train()
    batch = training_batch(SOURCES, TARGETS)
    usual = sequence_loss(model, batch, label_smoothing=0.1)
    usual_grads = gradients(model, usual)
    captured = BatchLoss(model, 0.1)(batch.src, batch.src_lengths, *padded_targets(batch))
    captured_grads = gradients(model, captured)
    torch.testing.assert_close(captured, usual, rtol=1e-5, atol=1e-5)
    assert captured_grads.keys() == usual_grads.keys()
    for name in usual_grads:
        torch.testing.assert_close(captured_grads[name], usual_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_ignored_targets_add_nothing_and_get_no_gradient():
    torch.manual_seed(0)
    x, weight = torch.randn(5, 4, requires_grad=True), torch.randn(7, 4, requires_grad=True)
    target = torch.tensor([3, 0, 2, 0, 6])
    loss = speed.linear_cross_entropy(x, weight, None, target, 0.1, ignore_index=0)
    kept = target != 0
    expected = speed.linear_cross_entropy(x[kept], weight, None, target[kept], 0.1)
    torch.testing.assert_close(loss, expected)
    loss.backward()
    assert x.grad[~kept].abs().sum() == 0 and x.grad[kept].abs().sum() > 0
    with speed.plain():  # the textbook path ignores them too
        torch.testing.assert_close(speed.linear_cross_entropy(x, weight, None, target, 0.1, ignore_index=0), expected)


def test_each_shape_is_captured_once_and_the_random_state_put_back(monkeypatch):
    cuda = FakeCuda(monkeypatch)
    torch.manual_seed(0)
    model = build_model(model_config_of(**rnn_fields(attention="bahdanau", **{**RNN, "dropout": 0.3})), 30, 30).train()
    loss = GraphedLoss(model, 0.1)
    batch = training_batch(SOURCES, TARGETS)
    before = torch.get_rng_state()
    loss(batch)
    assert len(cuda.captured) == 1 and cuda.state_sets == 1
    # the warm-up draws were undone: the pass drew what it would have drawn without a capture
    after_captured = torch.get_rng_state()
    torch.set_rng_state(before)
    loss(batch)  # the same shape again: no capture
    assert len(cuda.captured) == 1
    assert torch.equal(torch.get_rng_state(), after_captured)
    loss(training_batch(SOURCES, [t + [9] * 8 for t in TARGETS]))  # a longer target: a new shape
    assert len(cuda.captured) == 2
    assert cuda.pools[0] is cuda.pools[1] is not None  # one memory pool for all shapes


def test_shapes_past_the_limit_run_without_a_graph(monkeypatch):
    cuda = FakeCuda(monkeypatch)
    monkeypatch.setattr(graphs, "MAX_GRAPHS", 1)
    model = build_model(model_config_of(**rnn_fields(attention="bahdanau", **RNN)), 30, 30).train()
    loss = GraphedLoss(model, 0.0)
    loss(training_batch(SOURCES, TARGETS))
    value = loss(training_batch(SOURCES, [t + [9] * 8 for t in TARGETS]))
    assert len(cuda.captured) == 1 and torch.isfinite(value)


def test_the_graphed_path_is_taken_only_where_it_applies(monkeypatch):
    rnn = build_model(model_config_of(**rnn_fields(attention="bahdanau", **RNN)), 30, 30)
    from attnmt.core.config import SpeechConfig
    from attnmt.speech.model import build_speech_model

    transformer = build_model(TransformerConfig(d_model=16, heads=2, feed_forward=32), 30, 30)
    speech = build_speech_model(model_config_of(**rnn_fields(**RNN)), SpeechConfig(n_mels=8, conv_channels=4), 20)
    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    assert isinstance(graphed_loss(rnn, 0.1, cuda, enabled=True), GraphedLoss)
    assert graphed_loss(rnn, 0.1, cpu, enabled=True) is None
    assert graphed_loss(rnn, 0.1, cuda, enabled=False) is None
    assert graphed_loss(rnn, 0.1, cuda, enabled=True, processes=2) is None
    assert isinstance(graphed_loss(transformer, 0.1, cuda, enabled=True), GraphedLoss)
    assert graphed_loss(speech, 0.1, cuda, enabled=True) is None  # (its loss adds CTC)
    with speed.plain():
        assert graphed_loss(rnn, 0.1, cuda, enabled=True) is None


def test_the_training_loss_leaves_the_graphs_under_plain(monkeypatch):
    FakeCuda(monkeypatch)
    model = build_model(model_config_of(**rnn_fields(attention="bahdanau", **RNN)), 30, 30).train()
    calls = []
    graphed = GraphedLoss(model, 0.0)
    monkeypatch.setattr(graphed, "batch_loss", lambda inputs: calls.append(1) or BatchLoss(model, 0.0))
    loss = TrainingLoss(model, 0.0, graphed)
    batch = training_batch(SOURCES, TARGETS)
    graphed_value, tokens = loss(batch)
    assert calls and tokens == sum(len(t) + 1 for t in TARGETS)
    with speed.plain():
        plain_value, _ = loss(batch)
    assert len(calls) == 1
    torch.testing.assert_close(graphed_value, plain_value, rtol=1e-5, atol=1e-5)


def test_a_capture_that_fails_leaves_training_going_without_graphs(monkeypatch):
    cuda = FakeCuda(monkeypatch)

    def refuse(*args, **kwargs):
        torch.rand(3)  # it had drawn random numbers before failing
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(torch.cuda, "make_graphed_callables", refuse)
    model = build_model(model_config_of(**rnn_fields(attention="bahdanau", **RNN)), 30, 30).train()
    loss = GraphedLoss(model, 0.0)
    before = torch.get_rng_state()
    with pytest.warns(UserWarning, match="could not be captured"):
        value = loss(training_batch(SOURCES, TARGETS))
    assert torch.isfinite(value) and loss.failed and cuda.state_sets == 1
    torch.set_rng_state(before)
    torch.testing.assert_close(loss(training_batch(SOURCES, TARGETS)), value)  # no second try, no warning


def test_a_gpu_config_trains_on_token_batches_unless_it_sets_a_batch_size():
    from attnmt.core.config import GPU_BATCH_TOKENS, Config

    def config(data=None, device="cuda"):
        data = {"train": {"src": "a", "tgt": "b"}, **(data or {})}
        training = {"max_steps": 1, "device": device}
        return Config.model_validate({"experiment_dir": "x", "data": data, "training": training})

    assert config().data.batch_tokens == GPU_BATCH_TOKENS
    assert config(device="cpu").data.batch_tokens is None
    assert config({"batch_size": 64}).data.batch_tokens is None
    assert config({"batch_tokens": 1000}).data.batch_tokens == 1000
    on_cpu = config(device="cpu")
    on_cpu.training.device = "cuda"  # as `attnmt train --device cuda` does
    on_cpu.token_batches_on_gpus()
    assert on_cpu.data.batch_tokens == GPU_BATCH_TOKENS


@pytest.mark.gpu
@pytest.mark.parametrize(
    "attention",
    [
        "bahdanau",
        "luong-general",
        "location",
        "local-m",
        "local-p",
        "sparsemax",
        "entmax15",
        "coverage-fertility",
        "coverage-nn",
        "csparsemax",
        "transformer",
        "transformer-entmax15",
    ],
)
def test_on_a_gpu_the_graphs_compute_the_loss_and_gradients_of_the_usual_path(attention):
    """Captured for real: replays (a second batch of the same shape, new values) against the usual
    path on the same weights, dropout off; and with dropout on, two replays from one random
    state draw the same masks."""
    device = torch.device("cuda")
    torch.manual_seed(0)
    if attention.startswith("transformer"):
        config = model_config_of(
            **rnn_fields(**TRANSFORMER, attention_normalizer=attention.partition("-")[2] or "softmax")
        )
    else:
        config = model_config_of(**rnn_fields(**attention_options(attention), **RNN))
    model = build_model(config, 30, 30).to(device).train()
    loss = GraphedLoss(model, 0.1)
    loss(training_batch(SOURCES, TARGETS).to(device))  # the capture
    loss(training_batch(SOURCES, [t + [9] * 8 for t in TARGETS]).to(device))  # another shape, the same pool
    other = training_batch([s[::-1] for s in SOURCES], [t[::-1] for t in TARGETS]).to(device)
    replayed = loss(other)
    replayed_grads = gradients(model, replayed)
    assert len(loss.graphs) == 2 and not loss.failed
    usual = sequence_loss(model, other, label_smoothing=0.1)
    usual_grads = gradients(model, usual)
    torch.testing.assert_close(replayed, usual, rtol=1e-4, atol=1e-4)
    for name in usual_grads:
        torch.testing.assert_close(replayed_grads[name], usual_grads[name], rtol=1e-3, atol=1e-5, msg=name)


@pytest.mark.gpu
@pytest.mark.parametrize("model_type", ["rnn", "transformer"])
def test_on_a_gpu_a_capture_leaves_the_random_state_as_it_found_it(model_type):
    """(The Transformer's dropout includes the fused attention kernel's.)"""
    device = torch.device("cuda")
    torch.manual_seed(0)
    config = (
        model_config_of(**rnn_fields(attention="bahdanau", **{**RNN, "dropout": 0.3}))
        if model_type == "rnn"
        else model_config_of(**rnn_fields(**{**TRANSFORMER, "dropout": 0.3, "attention_dropout": 0.3}))
    )
    model = build_model(config, 30, 30).to(device).train()
    loss = GraphedLoss(model, 0.1)
    batch = training_batch(SOURCES, TARGETS).to(device)
    state = torch.cuda.get_rng_state()
    first = loss(batch).item()  # captured, then replayed (.item(): a replay's output is overwritten by the next)
    torch.cuda.set_rng_state(state)
    again = loss(batch).item()  # replayed only
    assert first == again
    assert loss(batch).item() != again  # the next replay draws new masks


@pytest.mark.parametrize("model_type", ["rnn", "transformer"])
def test_the_loss_without_selecting_rows_is_the_loss_with(monkeypatch, model_type):
    """On a GPU sequence_loss leaves padding out by its target id instead of selecting the real rows
    (which would wait for the GPU): the same loss and gradients as the CPU's selection."""
    from attnmt.data.subwords import PAD
    from attnmt.seq2seq import training

    torch.manual_seed(0)
    config = (
        model_config_of(**rnn_fields(**RNN))
        if model_type == "rnn"
        else TransformerConfig(
            d_model=16,
            heads=2,
            feed_forward=32,
            encoder_layers=1,
            decoder_layers=1,
            dropout=0.0,
            attention_dropout=0.0,
        )
    )
    model = build_model(config, 30, 30).train()
    batch = training_batch(SOURCES, TARGETS)
    assert training.selects_real_rows(torch.device("cpu")) and not training.selects_real_rows(torch.device("cuda"))
    selected = sequence_loss(model, batch, label_smoothing=0.1)
    selected_grads = gradients(model, selected)
    monkeypatch.setattr(training, "selects_real_rows", lambda device: False)
    rows, loss_of = [], model.generator.loss
    monkeypatch.setattr(
        model.generator,
        "loss",
        lambda x, target, smoothing, ignore_index=None: (
            rows.append((x.size(0), ignore_index)) or loss_of(x, target, smoothing, ignore_index)
        ),
    )
    by_target = sequence_loss(model, batch, label_smoothing=0.1)
    assert rows == [(batch.tgt_out.numel(), PAD)]  # every row, the padding left out by its target
    by_target_grads = gradients(model, by_target)
    torch.testing.assert_close(by_target, selected, rtol=1e-5, atol=1e-5)
    for name in selected_grads:
        torch.testing.assert_close(by_target_grads[name], selected_grads[name], rtol=1e-4, atol=1e-6, msg=name)
