"""Every speed trick of attnmt.core.speed computes what the textbook path (speed.plain()) computes."""

import gc
import os

import pytest
import torch
import torch.nn.functional as F

from attnmt.core import speed
from attnmt.core.config import model_config_of
from attnmt.data.batching import make_batch, training_batch
from attnmt.seq2seq import build_model
from attnmt.seq2seq.training import sequence_loss
from attention_helpers import rnn_fields

RNN = dict(embedding_size=16, encoder_hidden=12, decoder_hidden=24, attention_size=10, location_kernel=5)
TRANSFORMER = dict(
    type="transformer", d_model=16, heads=2, feed_forward=32, encoder_layers=2, decoder_layers=2, attention_dropout=0.0
)
MODELS = {
    "bahdanau": {**RNN, "attention": "bahdanau"},
    "luong-general-lstm-2-layers": {
        **RNN,
        "attention": "luong-general",
        "rnn_type": "lstm",
        "encoder_layers": 2,
        "decoder_layers": 2,
    },
    "luong-dot-no-feeding": {**RNN, "attention": "luong-dot", "input_feeding": False},
    "location": {**RNN, "attention": "location"},
    "none": {**RNN, "attention": "none"},
    "transformer": TRANSFORMER,
}
SOURCES = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [14, 15, 16, 17]]
TARGETS = [[5, 6], [7, 8, 9, 10, 11, 12, 13, 14, 15], [16]]


def loss_and_gradients(model, batch, bf16: bool):
    model.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = sequence_loss(model, batch, label_smoothing=0.1)
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", list(MODELS))
def test_a_training_step_computes_the_textbook_loss_and_gradients(name, bf16):
    """The tricks together: the fast path (padded shapes, unpacked encoder, fused loss, cast
    encoder states) against the plain one, on the same batch and weights (dropout off)."""
    torch.manual_seed(0)
    model = build_model(model_config_of(**rnn_fields(dropout=0.0, **MODELS[name])), 30, 30)
    model.train()
    fast_loss, fast_grads = loss_and_gradients(model, training_batch(SOURCES, TARGETS), bf16)
    with speed.plain():
        plain_loss, plain_grads = loss_and_gradients(model, training_batch(SOURCES, TARGETS), bf16)
    assert training_batch(SOURCES, TARGETS).src.size(1) == 8  # the fast batch was padded
    tolerance = dict(rtol=3e-2, atol=3e-2) if bf16 else dict(rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(fast_loss, plain_loss, **tolerance)
    assert fast_grads.keys() == plain_grads.keys()
    for key in fast_grads:
        torch.testing.assert_close(fast_grads[key], plain_grads[key], **tolerance, msg=key)


def test_plain_switches_every_trick_off_and_back_on():
    assert speed.enabled()
    with speed.plain():
        assert not speed.enabled() and speed.source_width_multiple() == 1
        assert make_batch(SOURCES, TARGETS).src.size(1) == training_batch(SOURCES, TARGETS).src.size(1)
        x = torch.ones(4, 3)
        assert speed.padded_in_time(lambda t: t * 2, x.unsqueeze(0)).shape == (1, 4, 3)
    assert speed.enabled() and speed.source_width_multiple() == speed.SOURCE_WIDTH_MULTIPLE


def test_padded_in_time_pads_to_the_multiple_and_cuts_back():
    shapes = []
    x = torch.randn(2, 11, 3)
    out = speed.padded_in_time(lambda t: shapes.append(t.shape) or t + 1, x)
    assert shapes == [(2, 16, 3)]
    torch.testing.assert_close(out, x + 1)


def test_plain_dropout_is_torchs():
    torch.manual_seed(3)
    x = torch.ones(50, 50)
    with speed.plain():
        ours = speed.dropout(x, 0.4)
    torch.manual_seed(3)
    torch.testing.assert_close(ours, F.dropout(x, 0.4))


def test_configure_sets_the_onednn_cache_unless_the_user_did(monkeypatch):
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
    speed.configure()
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == str(speed.ONEDNN_CACHE)
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "64")
    speed.configure()
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "64"


@pytest.mark.parametrize(
    "shapes",
    [
        ((6, 3, 1, 8), (6, 1, 5, 8)),  # Bahdanau: query over keys
        ((6, 1, 8), (6, 5, 8)),  # location: (B,1,H) over (B,S,H)
        ((1, 1, 8), (6, 5, 8)),
    ],  # broadcast over the first dimension
    ids=["bahdanau", "location", "broadcast-rows"],
)
def test_v_tanh_is_the_textbook_score_without_a_tanh(shapes, monkeypatch):
    """v^T tanh(a + b) through 2 v^T sigmoid(2a + 2b) - sum(v), a few rows at a time: the same
    values and gradients, and no call of torch.tanh (the slow function it avoids)."""
    torch.manual_seed(0)
    a, b = (torch.randn(s, requires_grad=True) for s in shapes)
    v = torch.randn(1, 8, requires_grad=True)
    textbook = F.linear(torch.tanh(a + b), v).squeeze(-1)
    expected = torch.autograd.grad(textbook.sum(), (a, b, v))
    monkeypatch.setattr(speed, "ENERGY_CHUNK", 2 * 5 * 8)  # two rows at a time: three pieces

    def no_tanh(*args, **kwargs):
        raise AssertionError("torch.tanh called")

    monkeypatch.setattr(torch, "tanh", no_tanh)
    fast = speed.v_tanh(v, a, b)
    torch.testing.assert_close(fast, textbook, rtol=1e-5, atol=1e-5)
    for ours, theirs in zip(torch.autograd.grad(fast.sum(), (a, b, v)), expected):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    with pytest.raises(AssertionError, match="torch.tanh called"), speed.plain():
        speed.v_tanh(v, a, b)  # the textbook path is a switch away


ENERGY_SHAPES = pytest.mark.parametrize(
    "shapes",
    [((6, 3, 1, 8), (6, 1, 5, 8)), ((6, 1, 8), (6, 5, 8)), ((1, 1, 8), (6, 5, 8))],
    ids=["bahdanau", "location", "broadcast-rows"],
)


@ENERGY_SHAPES
def test_v_tanh_gradients_pass_gradcheck_however_the_energies_are_cut(shapes, monkeypatch):
    """The recomputing backward pass (its own formulas, not autograd's) against finite differences, in
    float64, with the energies cut into pieces of two rows and whole."""
    torch.manual_seed(0)
    inputs = (torch.randn(1, 8, dtype=torch.float64, requires_grad=True),) + tuple(
        torch.randn(s, dtype=torch.float64, requires_grad=True) for s in shapes
    )
    for chunk in (2 * 5 * 8, speed.ENERGY_CHUNK):
        monkeypatch.setattr(speed, "ENERGY_CHUNK", chunk)
        assert torch.autograd.gradcheck(speed.v_tanh, inputs)


@ENERGY_SHAPES
def test_training_keeps_no_energy_for_the_backward_pass(shapes):
    """What autograd keeps for v_tanh's backward pass is its inputs themselves, never a tensor the
    size of the energies (a x b x H) of its own: the textbook form keeps one, its tanh."""
    torch.manual_seed(0)
    a, b = (torch.randn(s, requires_grad=True) for s in shapes)
    v = torch.randn(1, 8, requires_grad=True)
    energies = torch.broadcast_shapes(a.shape, b.shape).numel()
    inputs = {t.data_ptr() for t in (v, a, b)}

    def kept_besides_the_inputs(compute) -> list[int]:
        kept = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t) or t, lambda t: t):
            compute().sum().backward()
        return [t.numel() for t in kept if t.data_ptr() not in inputs]

    assert all(n < energies for n in kept_besides_the_inputs(lambda: speed.v_tanh(v, a, b)))
    with speed.plain():
        assert max(kept_besides_the_inputs(lambda: speed.v_tanh(v, a, b))) >= energies


def test_v_tanh_gradients_under_bf16_autocast_and_for_some_inputs_only():
    """Under autocast (training.precision: bf16) the gradients are the float64 ones to bf16's precision,
    each in its input's type; where only some inputs need a gradient, only those get one."""
    torch.manual_seed(0)
    a, b = torch.randn(4, 1, 16), torch.randn(4, 7, 16)
    v = torch.randn(1, 16)
    exact = [x.double().requires_grad_() for x in (v, a, b)]
    expected = torch.autograd.grad(F.linear(torch.tanh(exact[1] + exact[2]), exact[0]).sum(), exact)
    leaves = [x.clone().requires_grad_() for x in (v, a.bfloat16(), b.bfloat16())]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        energies = speed.v_tanh(*leaves)
    grads = torch.autograd.grad(energies.float().sum(), leaves)
    assert energies.dtype == torch.bfloat16 and [g.dtype for g in grads] == [x.dtype for x in leaves]
    for ours, theirs in zip(grads, expected):
        assert (ours.double() - theirs).norm() <= 0.02 * theirs.norm()
    only_a = a.clone().requires_grad_()
    (grad_a,) = torch.autograd.grad(speed.v_tanh(v, only_a, b).sum(), only_a)
    torch.testing.assert_close(grad_a, expected[1].float(), rtol=1e-4, atol=1e-4)


def test_looked_up_product_is_the_product_and_follows_the_weights(monkeypatch):
    """W_y E[y] looked up in a kept table: the product's values, recomputed when a weight changes,
    and only where it may be: no gradient, the speed tricks on, a table within its bound."""
    torch.manual_seed(0)
    embedding, linear = torch.nn.Embedding(30, 6), speed.for_inference(speed.Linear(6, 9))
    tokens = torch.tensor([[3, 7], [29, 0]])
    with torch.no_grad():
        torch.testing.assert_close(speed.looked_up_product(linear, embedding, tokens), linear(embedding(tokens)))
        assert linear.__dict__["_looked_up"][1].shape == (30, 9)  # the table, kept
        for weight in (linear.weight, linear.bias, embedding.weight):  # an optimizer step, in place
            weight.add_(0.5)
            torch.testing.assert_close(speed.looked_up_product(linear, embedding, tokens), linear(embedding(tokens)))
    fresh = speed.for_inference(speed.Linear(6, 9))
    assert speed.looked_up_product(fresh, embedding, tokens).requires_grad  # training: the product
    with torch.no_grad():
        with speed.plain():
            speed.looked_up_product(fresh, embedding, tokens)
        monkeypatch.setattr(speed, "FOLDED_TABLE_BYTES", 30 * 9 * 4 - 1)
        speed.looked_up_product(fresh, embedding, tokens)
    assert "_looked_up" not in fresh.__dict__


def test_a_model_in_training_never_looks_up_a_table_its_optimizer_would_leave_stale():
    """The fused Adam updates weights without bumping their version counters: validation during
    training must compute W_y E[y] itself (a table kept from the last validation would be stale)."""
    torch.manual_seed(0)
    embedding, linear = torch.nn.Embedding(30, 6), speed.Linear(6, 9)  # (a model built to train)
    optimizer = torch.optim.Adam([*embedding.parameters(), *linear.parameters()], lr=0.1, fused=True)
    tokens = torch.tensor([3, 7])
    with torch.no_grad():
        speed.looked_up_product(linear, embedding, tokens)  # a validation
    linear(embedding(tokens)).sum().backward()
    optimizer.step()
    with torch.no_grad():
        torch.testing.assert_close(speed.looked_up_product(linear, embedding, tokens), linear(embedding(tokens)))
    assert "_looked_up" not in linear.__dict__


@pytest.mark.parametrize("name", [n for n in MODELS if n != "transformer"])
def test_a_decoding_step_computes_the_textbook_log_probabilities(name, monkeypatch):
    """decode_step with the tricks (the looked-up W_y y, the sigmoid scores, the packed products of a
    loaded model) against the plain one."""
    monkeypatch.setattr(speed, "PACKED_MIN_ROWS", 1)  # (three sentences and small weights)
    monkeypatch.setattr(speed, "PACKED_MIN_WEIGHT", 1)
    torch.manual_seed(0)
    model = speed.for_inference(build_model(model_config_of(**rnn_fields(**MODELS[name])), 30, 30).eval())
    batch = make_batch(SOURCES, TARGETS)
    tokens = torch.tensor([1, 5, 9])

    def log_probs():
        with torch.inference_mode():
            memory = model.encode(batch.src, batch.src_lengths)
            return model.decode_step(tokens, model.init_state(memory), memory).log_probs

    fast = log_probs()
    with speed.plain():
        plain = log_probs()
    torch.testing.assert_close(fast, plain, rtol=1e-5, atol=1e-5)
    assert "_looked_up" in model.decoder.W_y.__dict__  # the lookup was used
    products = (model.decoder.W_c, model.decoder.rnn.W_hh[0], model.generator)
    assert all(id(layer.weight) in speed._PACKED for layer in products)  # and the packed products


def test_inference_products_are_linears_on_packed_weights_that_follow_the_weights(monkeypatch):
    """speed.linear: F.linear's values (to float rounding) from a weight reordered once, kept beside
    it and made again when it changes; only outside autograd, on float32, with the tricks on."""
    monkeypatch.setattr(speed, "PACKED_MIN_WEIGHT", 1)  # (a small weight)
    torch.manual_seed(0)
    layer = speed.Linear(12, 40)
    x = torch.randn(5, 3, 12)
    expected = F.linear(x, layer.weight, layer.bias)
    assert layer(x).requires_grad  # not for_inference: F.linear, training's product
    with torch.no_grad():
        assert id(layer.weight) not in speed._PACKED
        speed.for_inference(layer)
        torch.testing.assert_close(layer(x), expected, rtol=1e-5, atol=1e-5)
        packed = speed._PACKED[id(layer.weight)][1]
        assert layer(x) is not None and speed._PACKED[id(layer.weight)][1] is packed  # kept
        layer.weight.add_(0.5)  # an optimizer step, in place: a new version
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)
        assert speed._PACKED[id(layer.weight)][1] is not packed
        torch.testing.assert_close(speed.linear(x[0], layer.weight), F.linear(x[0], layer.weight))  # no bias
        half = x.to(torch.bfloat16)
        assert torch.equal(speed.linear(half, layer.weight.bfloat16()), F.linear(half, layer.weight.bfloat16()))
    out = layer(x)  # autograd on: the plain product, with its gradient
    out.sum().backward()
    assert layer.weight.grad is not None
    weight = id(layer.weight)
    del layer, out, expected  # (expected's graph holds the weight too)
    gc.collect()
    assert weight not in speed._PACKED  # gone with the weight


def test_the_packed_product_is_taken_only_where_it_pays():
    """F.linear for a small weight (MKL's product of a weight in the cache is as fast), and below
    PACKED_MIN_ROWS rows (oneDNN's call costs more) but for an output layer's weight; the packed
    product for the others. The same values either way."""
    torch.manual_seed(0)
    small = torch.randn(speed.PACKED_MIN_WEIGHT // 16 - 1, 16)
    medium = torch.randn(speed.PACKED_MIN_WEIGHT // 16, 16)
    large = torch.randn(speed.PACKED_ALWAYS_WEIGHT // 16, 16)
    few, enough = torch.randn(speed.PACKED_MIN_ROWS - 1, 16), torch.randn(2, speed.PACKED_MIN_ROWS // 2, 16)
    with torch.no_grad():
        for weight, x, packs in (
            (small, enough, False),
            (medium, few, False),
            (medium, enough, True),
            (large, few, True),
        ):
            torch.testing.assert_close(speed.linear(x, weight), F.linear(x, weight), rtol=1e-5, atol=1e-4)
            assert (id(weight) in speed._PACKED) == packs, (weight.shape, x.shape)
        with torch.inference_mode():  # a weight made there (a shortlist's rows) has no version counter
            rows = large[torch.arange(speed.PACKED_ALWAYS_WEIGHT // 16)]
            torch.testing.assert_close(speed.linear(few, rows), F.linear(few, rows), rtol=1e-5, atol=1e-4)
        fresh = large.clone()
        with speed.plain():
            speed.linear(few, fresh)
        assert id(fresh) not in speed._PACKED  # the textbook product a switch away


def test_a_loaded_transformer_decodes_on_packed_products_as_the_plain_one(tiny_transformer, monkeypatch):
    """A loaded model's Transformer layers and output layer take the packed products (every weight
    packed once it has decoded), and its steps compute the textbook log-probabilities."""
    monkeypatch.setattr(speed, "PACKED_MIN_ROWS", 1)  # (two sentences and small weights)
    monkeypatch.setattr(speed, "PACKED_MIN_WEIGHT", 1)
    model = tiny_transformer.model
    layers = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert layers and all(m.frozen for m in layers)
    batch = make_batch([[5, 6, 7, 8, 9], [10, 11]], [[5], [6]])

    def steps():
        with torch.inference_mode():
            memory = model.encode(batch.src, batch.src_lengths)
            state, tokens, out = model.init_state(memory), torch.tensor([1, 1]), []
            for token in (5, 9, 7):
                step = model.decode_step(tokens, state, memory)
                state, tokens = step.state, torch.full((2,), token)
                out.append(step.log_probs)
            return torch.stack(out)

    fast = steps()
    assert all(id(m.weight) in speed._PACKED for m in layers)
    with speed.plain():
        plain = steps()
    torch.testing.assert_close(fast, plain, rtol=1e-5, atol=1e-5)
