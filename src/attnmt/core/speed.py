"""Speed tricks, in one place: for CPUs here, for GPUs in attnmt.seq2seq.graphs and
attnmt.seq2seq.fast_decoding (which follow the same rules: the textbook path a switch away, a test that
both compute the same).

A small model trained or run on two CPU cores spends much of its time not in arithmetic but in
what surrounds it: kernels compiled for each new matrix shape, passes over large tensors,
elementwise work. Each trick below computes what the textbook version computes (to float
rounding, and dropout to the same distribution); ``plain()`` switches them all off, so that tests
compare the two (tests/test_speed.py) and a benchmark can measure what they bring
(``ATTNMT_PLAIN=1`` in the environment does the same for a whole process). Measurements:
docs/performance.md.

Few matrix shapes. oneDNN, which runs the bf16 products on CPUs, compiles kernels per shape and
keeps a bounded number of them (``ONEDNN_CACHE``, set by ``configure``). Training meets every
sentence length, so shapes are rounded up:
  - the source width of a training batch to a multiple of ``SOURCE_WIDTH_MULTIPLE`` (the padding
    is masked: ``source_width_multiple``);
  - the target steps of the products that teacher forcing does outside the recurrence to a
    multiple of ``TIME_MULTIPLE`` (``padded_in_time``);
  - the rows of the output layer's product to a multiple of ``ROW_MULTIPLE`` (in the fused loss).

An unpacked encoder (``rnn_direction``): each direction of each nn.GRU / nn.LSTM layer runs over
the whole padded batch with PyTorch's own kernel, the backward direction on each sentence reversed
within its length. A packed batch would shrink step by step, a new shape at every step.

The output layer and the label-smoothed cross-entropy as one function (``linear_cross_entropy``):
their cost is the traffic through the (tokens x vocabulary) score matrix, which this reads a few
times instead of the dozen passes of log_softmax, gather, smoothing and their backward functions.

Dropout masks drawn from random integers (``dropout``, ``Dropout``): about twice as fast as
nn.Dropout's ``bernoulli_``, the slowest elementwise operation of a training step on a CPU. (On a
GPU, PyTorch's own dropout is one fused kernel: it is used there.)

On a GPU the encoder is cuDNN's fused RNN over the packed batch (the textbook path), not
``rnn_direction``: cuDNN skips the padding itself, and wants the weights as the one block it keeps.
(Inside the CUDA graphs of training, which cannot read lengths from the host, it runs unpacked.)

Encoder states cast once per batch to the autocast type (``cast_for_autocast``), instead of at
every decoder step's context product.

Additive attention's scores v^T tanh(a + b) through a sigmoid (``v_tanh``): PyTorch's tanh is 3-7x
slower than its sigmoid on a CPU, and these energies are an RNN decoder step's largest elementwise work.
In training they are computed again in the backward pass instead of kept (``_RecomputedEnergies``):
kept, they were most of a training step's memory.

In decoding, each token's embedding already multiplied by the RNN decoder's input weights, once per
model (``looked_up_product``): a lookup instead of a product at every step.

The products of a model loaded for inference (``for_inference``), on a CPU, through oneDNN on
weights reordered once into its blocked layout (``linear``), instead of PyTorch's F.linear (MKL's
sgemm): on an AMD EPYC, MKL's float32 product of a decoding step's shapes (a few dozen rows by 512
against 512 to 15,000 columns) ran at a third to a half of oneDNN's speed, the output layer's the
slowest (docs/performance.md). The same float32 products, summed in another order.
"""

from __future__ import annotations

import math
import os
import threading
import weakref
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import _VF, Tensor, nn  # _VF: nn.GRU / nn.LSTM's own kernels, one direction at a time

SOURCE_WIDTH_MULTIPLE = 8
TIME_MULTIPLE = 8
ROW_MULTIPLE = 128
# About 300 kernel shapes in a 20-minute run of the reference model: 512 holds them all, so none
# is compiled twice, and bounds the memory if a corpus brings more (oneDNN's default is 1,024).
ONEDNN_CACHE = 512
# Energies of additive attention computed at a time (v_tanh): 2 MB in float32, within a core's L2.
ENERGY_CHUNK = 1 << 19
# The largest table of token embeddings times the decoder's input weights kept (looked_up_product).
FOLDED_TABLE_BYTES = 64 << 20
# The rows that oneDNN reorders a weight for (``linear``): a decoding step's batch. Measured on an
# AMD EPYC with 2 threads, a weight reordered for 64 rows multiplied 8 to 2,112 rows as fast as one
# reordered for each count, or faster.
PACKED_ROWS = 64
# Where the packed product pays (benchmarks/products.py, and whole greedy searches of an OPUS-MT-shaped
# model, on an AMD EPYC with AVX512, 2 threads): weights of PACKED_MIN_WEIGHT entries or more (512 x
# 512 and up) at PACKED_MIN_ROWS rows or more: 1.1-3x F.linear's speed; 512 x 512 alone, its weight
# hot in the cache, measured 0.9-1.0x, but within a decoding step, where the other weights push it
# out, packing it too made greedy search 5-10 % faster. Not below 8 rows (a single sentence's
# greedy step: oneDNN's call costs more than MKL's product), except for an output layer's weight
# (PACKED_ALWAYS_WEIGHT entries or more, 8,000 x 512 and up: 2-3x F.linear's speed with 1 row).
PACKED_MIN_ROWS = 8
PACKED_MIN_WEIGHT = 1 << 18
PACKED_ALWAYS_WEIGHT = 1 << 21

_plain = os.environ.get("ATTNMT_PLAIN") == "1"


def enabled() -> bool:
    return not _plain


@contextmanager
def plain():
    """The textbook path for everything inside the block: no trick of this module."""
    global _plain
    before, _plain = _plain, True
    try:
        yield
    finally:
        _plain = before


def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX). Without, oneDNN falls
    back to kernels that run bf16 products tens of times slower than float32 (measured on an AVX2
    AMD EPYC: 1.8 against 74 GFLOP/s): bf16 training or decoding then only costs time."""
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def configure():
    """Settings that must precede the first computation: oneDNN reads its cache size when it makes
    its first kernel. A value set by the user wins."""
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(ONEDNN_CACHE))


# ------------------------------------------------------------------------------- few shapes


def source_width_multiple() -> int:
    return SOURCE_WIDTH_MULTIPLE if enabled() else 1


def padded_in_time(function, *inputs: Tensor) -> Tensor:
    """function(*inputs) on (B,T,.) inputs, computed with T zero-padded up to a multiple of
    TIME_MULTIPLE and cut back (function must treat time steps independently)."""
    steps = inputs[0].size(1)
    extra = -steps % TIME_MULTIPLE if enabled() else 0
    if extra:
        inputs = [F.pad(x, (0, 0, 0, extra)) for x in inputs]
    return function(*inputs)[:, :steps]


def _pad_rows(t: Tensor) -> Tensor:
    extra = -t.size(0) % ROW_MULTIPLE
    return torch.cat([t, t.new_zeros((extra, *t.shape[1:]))]) if extra else t


# ------------------------------------------------------------------------------- the encoder


def rnn_direction(rnn: nn.RNNBase, layer: int, reverse: bool, x: Tensor) -> Tensor:
    """One direction of one layer of ``rnn`` (with its own weights) over x (B,S,I) -> (B,S,H),
    starting from a zero state."""
    suffix = "_reverse" if reverse else ""
    weights = [getattr(rnn, f"{name}_l{layer}{suffix}") for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
    h0 = x.new_zeros(1, x.size(0), rnn.hidden_size)
    options = dict(
        has_biases=True, num_layers=1, dropout=0.0, train=rnn.training, bidirectional=False, batch_first=True
    )
    if isinstance(rnn, nn.LSTM):
        return _VF.lstm(x, (h0, h0), weights, *options.values())[0]
    return _VF.gru(x, h0, weights, *options.values())[0]


def cast_for_autocast(states: Tensor) -> Tensor:
    """``states`` in the type autocast computes products in (bf16 here), or unchanged outside it."""
    return states.to(autocast_dtype(states.device.type, states.dtype)) if enabled() else states


def autocast_dtype(device: str, default: torch.dtype) -> torch.dtype:
    """The type autocast computes products in on ``device``, or ``default`` outside it."""
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else default


# ------------------------------------------------------------------------------- additive attention


def v_tanh(v: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """v^T tanh(a + b) over the last dimension (v: (1, H), as an nn.Linear(H, 1)'s weight), with a
    and b broadcast against each other; ``a`` should be the smaller (the query's term). These are
    the energies of additive attention (Bahdanau, location-aware): beam 5 over a batch of 64
    sentences computes 320 x S x 512 of them at every decoder step.

    On a CPU, PyTorch's tanh runs 6x slower than its sigmoid in float32 and 3x in bf16 (2 cores,
    AVX512; docs/performance.md), and took 19 % of a beam search's time. As tanh(x) = 2 sigmoid(2x) - 1,

        v^T tanh(a + b) = 2 v^T sigmoid(2a + 2b) - sum(v)

    computed as one pass for 2a + 2b (torch.add scales its second input by ``alpha``), a sigmoid in
    place and the product, a few rows at a time (``ENERGY_CHUNK`` energies) so that the energies
    stay in the core's cache from the sum to the product. In training the backward pass computes
    them again (``_RecomputedEnergies``) rather than keeping them. On a GPU tanh is as fast: the
    textbook form runs there."""
    if not enabled() or a.device.type != "cpu":
        return F.linear(torch.tanh(a + b), v).squeeze(-1)
    if torch.is_grad_enabled() and (v.requires_grad or a.requires_grad or b.requires_grad):
        return _RecomputedEnergies.apply(v, a, b)
    return _energies(v, a, b)


def _energies(v: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """v_tanh's value on a CPU: 2 v^T sigmoid(2a + 2b) - sum(v), a few rows at a time."""
    v2 = 2 * v
    scores = [_v_sigmoid(v2, a_rows, b_rows) for a_rows, b_rows in _energy_pieces(a, b)]
    return (scores[0] if len(scores) == 1 else torch.cat(scores)).squeeze(-1) - v.sum()


def _energy_pieces(a: Tensor, b: Tensor) -> list[tuple[Tensor, Tensor]]:
    """a and b cut along their first dimension into pieces of about ENERGY_CHUNK energies, or
    whole where they are broadcast over it."""
    if a.size(0) != b.size(0) or a.dim() != b.dim():  # broadcast over the first dimension: one piece
        return [(a, b)]
    # (not torch.broadcast_shapes: its first call imports sympy, half a second of every command)
    per_row = math.prod(max(x, y) for x, y in zip(a.shape[1:], b.shape[1:]))
    step = max(1, ENERGY_CHUNK // max(per_row, 1))
    return list(zip(a.split(step), b.split(step)))


def _v_sigmoid(v2: Tensor, a: Tensor, b: Tensor) -> Tensor:
    return F.linear(_sigmoids(a, b), v2)  # (2v)^T sigmoid(2a + 2b)


def _sigmoids(a: Tensor, b: Tensor, out: Tensor | None = None) -> Tensor:
    """sigmoid(2a + 2b) = (tanh(a + b) + 1) / 2: one pass for the sum, the sigmoid in place (in ``out``)."""
    return torch.add(2 * a, b, alpha=2, out=out).sigmoid_()


class _RecomputedEnergies(torch.autograd.Function):
    """v_tanh with a gradient, keeping only v, a and b for the backward pass. Autograd would keep
    every energy's sigmoid: for the (B, S, H) energies of each target step, 64 x 100 x 512 floats
    (13 MB) a step and 1.3 GB for a batch of 64 pairs of 100 pieces, most of a training step's memory.
    The backward pass computes s = sigmoid(2a + 2b) again, a few rows at a time, and from it (with
    tanh(a + b) = 2s - 1 and 1 - tanh(a + b)^2 = 4s(1 - s))

        d/dv = sum g (2s - 1),    d/da = d/db = 4 g v s (1 - s)   (each summed over its broadcast dims)

    The recomputation is elementwise work on pieces that stay in the cache; where b is as large as
    the energies (one target step's), its gradient is computed in place in its own buffer."""

    @staticmethod
    def forward(ctx, v: Tensor, a: Tensor, b: Tensor) -> Tensor:
        ctx.save_for_backward(v, a, b)
        return _energies(v, a, b)

    @staticmethod
    def backward(ctx, grad: Tensor):
        v, a, b = ctx.saved_tensors
        dtype = torch.result_type(a, b)
        v4, grad = 4 * v.reshape(-1).to(dtype), grad.to(dtype)
        shape = (*grad.shape, v.size(-1))  # the energies'
        grad_b = (
            torch.empty(shape, dtype=dtype, device=b.device)
            if tuple(b.shape) == shape and ctx.needs_input_grad[2]
            else None
        )
        grad_v = torch.zeros(v.size(-1))
        grads_a, grads_b, row, pieces = [], [], 0, _energy_pieces(a, b)
        for a_rows, b_rows in pieces:  # (cut only where a and b have the same rows; else one piece, all rows)
            rows = slice(None) if len(pieces) == 1 else slice(row, row + a_rows.size(0))
            row += a_rows.size(0)
            s = _sigmoids(a_rows, b_rows, None if grad_b is None else grad_b[rows])
            g = grad[rows].unsqueeze(-1)
            grad_v += (g.reshape(1, -1) @ s.reshape(-1, s.size(-1))).reshape(-1).float().mul_(2) - g.sum().float()
            s.addcmul_(s, s, value=-1).mul_(g).mul_(v4)  # 4 g v s (1 - s)
            if ctx.needs_input_grad[1]:
                grads_a.append(s.sum_to_size(a_rows.shape))
            if grad_b is None and ctx.needs_input_grad[2]:
                grads_b.append(s.sum_to_size(b_rows.shape))
        grad_a = torch.cat(grads_a) if grads_a else None
        if grads_b:
            grad_b = torch.cat(grads_b)
        return grad_v.reshape(v.shape).to(v.dtype), grad_a, grad_b


# ------------------------------------------------------------------------------- the decoder's input


def looked_up_product(linear: nn.Module, embedding: nn.Embedding, tokens: Tensor) -> Tensor:
    """linear(embedding(tokens)), for a decoding step (no dropout, no gradient): on a CPU, the rows
    of the table linear(embedding.weight), computed once and kept on ``linear`` until a weight
    changes (their version counters, which load_state_dict bumps) or the autocast type does. The
    RNN decoder's W_y y_{t-1} is then a lookup instead of a product (8 % of a beam-5 step with a
    shortlist). Only in a model loaded for inference (``for_inference``) or quantized to int8 (no
    parameters): in training, the fused Adam's steps leave the version counters as they were, and
    validation would read a stale table. Kept only up to FOLDED_TABLE_BYTES: the table has a row
    per token (8,000 pieces x 1,536 GRU gates: 49 MB). On a GPU the product is cheap: it runs there."""
    table_bytes = embedding.num_embeddings * linear.out_features * 4
    frozen = getattr(linear, "frozen", False) or next(linear.parameters(), None) is None
    if (
        not enabled()
        or not frozen
        or tokens.device.type != "cpu"
        or torch.is_grad_enabled()
        or table_bytes > FOLDED_TABLE_BYTES
    ):
        return linear(embedding(tokens))
    weights = [embedding.weight, *linear.parameters()]  # an int8 layer has none: it cannot change
    key = (autocast_dtype("cpu", torch.float32), *[(w.data_ptr(), w._version) for w in weights])
    cached = linear.__dict__.get("_looked_up")
    if cached is None or cached[0] != key:
        cached = linear.__dict__["_looked_up"] = (key, linear(embedding.weight))
    return cached[1][tokens]


# ------------------------------------------------------------------------------- inference products


def for_inference(model: nn.Module) -> nn.Module:
    """Marks the layers of ``model`` that keep copies of their weights (``Linear``, the output layer)
    as ``frozen``: a model loaded to translate, score or align (attnmt.core.folders.load_model),
    whose weights stay as they are. Then ``linear``'s products and the looked-up table are theirs.
    Never a model in training: the fused Adam updates weights without bumping their version
    counters, which is how a kept copy sees its weight change, and validation would read stale
    copies."""
    for module in model.modules():
        if hasattr(module, "frozen"):
            module.frozen = True
    return model


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """F.linear(x, weight, bias) = x W^T + b. Outside autograd (no_grad, inference_mode), on a CPU,
    in float32, outside autocast, for the weights and row counts where it pays (PACKED_MIN_WEIGHT):
    oneDNN's product on ``weight`` reordered once (``_packed``) and kept until it changes."""
    if not _packs(x, weight):
        return F.linear(x, weight, bias)
    return torch.ops.mkldnn._linear_pointwise(x, _packed(weight), bias, "none", [], "")


class Linear(nn.Linear):
    """nn.Linear (same parameters, same state dict) whose product, once ``for_inference`` has
    frozen it, is ``linear``'s."""

    frozen = False

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias) if self.frozen else F.linear(x, self.weight, self.bias)


def _packs(x: Tensor, weight: Tensor) -> bool:
    return (
        not _plain
        and not torch.is_grad_enabled()
        and x.device.type == "cpu"
        and x.dtype == weight.dtype == torch.float32
        and not torch.is_autocast_enabled("cpu")
        and (
            weight.numel() >= PACKED_ALWAYS_WEIGHT
            or (weight.numel() >= PACKED_MIN_WEIGHT and x.numel() >= PACKED_MIN_ROWS * x.size(-1))
        )
        and _has_packed_product()
    )


_PACKED: dict[int, tuple] = {}  # id(weight) -> (its data, version and shape, the reordered copy)
_PACKING = threading.Lock()  # (the server decodes in threads)


def _packed(weight: Tensor) -> Tensor:
    """``weight`` in oneDNN's layout, made again when the weight changes: load_state_dict bumps its
    version, .to() moves its data. Kept beside the weight, not on the
    module, so a module's copies and state dict are as nn.Linear's; gone with the weight."""
    # (a tensor made in inference mode, a shortlist's rows, has no version counter: it is made anew)
    version = None if weight.is_inference() else weight._version
    key = (weight.data_ptr(), version, weight.shape)
    with _PACKING:
        cached = _PACKED.get(id(weight))
        if cached is None:  # (by identity: a weak dictionary would compare tensors with ==)
            weakref.finalize(weight, _PACKED.pop, id(weight), None)
        if cached is None or cached[0] != key:
            cached = _PACKED[id(weight)] = (key, torch.ops.mkldnn._reorder_linear_weight(weight.detach(), PACKED_ROWS))
    return cached[1]


_packed_product: bool | None = None


def _has_packed_product() -> bool:
    """Whether this PyTorch has oneDNN's linear products (CPU builds of x86 and ARM do)."""
    global _packed_product
    if _packed_product is None:
        mkldnn = torch.ops.mkldnn
        _packed_product = (
            torch.backends.mkldnn.is_available()
            and hasattr(mkldnn, "_reorder_linear_weight")
            and hasattr(mkldnn, "_linear_pointwise")
        )
    return _packed_product


# ------------------------------------------------------------------------------- dropout


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """nn.functional.dropout: each element kept with probability 1-p (to 2^-31) and scaled by 1/(1-p)."""
    if not enabled() or x.is_cuda:
        return F.dropout(x, p, training)
    if not training or p == 0:
        return x
    if p == 1:
        return x * 0
    # int32 random_() draws uniformly from [0, 2^31): below p 2^31 with probability p.
    keep = torch.empty(x.shape, dtype=torch.int32, device=x.device).random_() >= round(p * 2**31)
    return x * keep.to(x.dtype).mul_(1 / (1 - p))


class Dropout(nn.Dropout):
    """nn.Dropout (same attribute ``p``, no parameters) with the faster mask."""

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)


# ------------------------------------------------------------------------------- the loss


def linear_cross_entropy(
    x: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor, eps: float, ignore_index: int | None = None
) -> Tensor:
    """F.cross_entropy(F.linear(x, weight, bias), target, label_smoothing=eps, reduction="sum"),
    without the rows whose target is ``ignore_index`` (they add 0 and get no gradient: fixed shapes
    for a CUDA graph, where selecting the other rows first would not be).

    With q the smoothed target distribution ((1-eps) on the reference token, eps/V on every token)
    the loss of a row of scores z is

        -sum_v q_v log softmax(z)_v = logsumexp(z) - (1-eps) z_y - (eps/V) sum_v z_v

    and its gradient softmax(z) - q: both are computed directly.
    """
    if not enabled():
        return F.cross_entropy(
            F.linear(x, weight, bias).float(),
            target,
            label_smoothing=eps,
            reduction="sum",
            ignore_index=-100 if ignore_index is None else ignore_index,
        )
    return _LinearCrossEntropy.apply(x, weight, bias, target, eps, ignore_index)


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, x: Tensor, weight: Tensor, bias: Tensor, target: Tensor, eps: float, ignore_index: int | None
    ) -> Tensor:
        # The products run in the autocast type (bf16); the softmax and the loss in float32.
        device = x.device.type
        dtype = autocast_dtype(device, weight.dtype)
        with torch.autocast(device, enabled=False):
            rows = x.size(0)
            x, w = _pad_rows(x.to(dtype)), weight.to(dtype)
            target = _pad_rows(target)
            z = (x @ w.t()).float()
            if bias is not None:
                z += bias
            log_norm = torch.logsumexp(z, dim=-1)
            z_target = z.gather(1, target.unsqueeze(1)).squeeze(1)
            loss = log_norm - (1 - eps) * z_target - eps / z.size(1) * z.sum(dim=-1)
            # Padding rows (added here or ignored) count 0; as a float factor, for the backward too.
            counted = (torch.arange(z.size(0), device=z.device) < rows).float()
            if ignore_index is not None:
                counted = counted * (target != ignore_index).float()
        ctx.save_for_backward(x, w, z, log_norm, target, counted)
        ctx.eps, ctx.weight_dtype, ctx.has_bias, ctx.rows = eps, weight.dtype, bias is not None, rows
        return (loss * counted).sum()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor):
        x, w, z, log_norm, target, counted = ctx.saved_tensors  # z is overwritten: one backward only
        eps = ctx.eps
        grad_z = z.sub_(log_norm.unsqueeze(1)).exp_()  # softmax(z), in place of z
        grad_z.sub_(eps / z.size(1))
        grad_z.scatter_add_(1, target.unsqueeze(1), grad_z.new_full((z.size(0), 1), -(1 - eps)))
        grad_z.mul_((grad * counted).unsqueeze(1))  # 0 on padding rows
        grad_bias = grad_z.sum(dim=0) if ctx.has_bias else None
        grad_z = grad_z.to(x.dtype)
        grad_x = (grad_z @ w)[: ctx.rows]
        grad_weight = (grad_z.t() @ x).to(ctx.weight_dtype)
        return grad_x, grad_weight, grad_bias, None, None, None
