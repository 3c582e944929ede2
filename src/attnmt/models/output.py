"""The output layer: decoder states -> scores over the target vocabulary.

In training, the output layer and the label-smoothed cross-entropy are one function, because
on a CPU their cost is the traffic through the (tokens x vocabulary) matrix of scores z, not the
products: with q the smoothed target distribution ((1-eps) on the reference token, eps/V on every
token) the loss of a position is

    -sum_v q_v log softmax(z)_v = logsumexp(z) - (1-eps) z_y - (eps/V) sum_v z_v

and its gradient is softmax(z) - q. Computing both directly reads z a few times instead of the
dozen passes of log_softmax, gather, the smoothing term and their backward functions.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class OutputLayer(nn.Linear):
    def loss(self, x: Tensor, target: Tensor, label_smoothing: float = 0.0) -> Tensor:
        """x (N,H) decoder states, target (N,) token ids -> the cross-entropy summed over N
        (equal to F.cross_entropy(self(x), target, label_smoothing=..., reduction="sum"))."""
        return _LinearCrossEntropy.apply(x, self.weight, self.bias, target, label_smoothing)

    def weight_as(self, dtype: torch.dtype) -> Tensor:
        """The weight in ``dtype``, converted once and kept until the weight changes (training
        updates it in place, which bumps its version)."""
        key = (dtype, self.weight.data_ptr(), self.weight._version)
        cached = self.__dict__.get("_weight_cast")
        if cached is None or cached[0] != key:
            cached = self.__dict__["_weight_cast"] = (key, self.weight.detach().to(dtype))
        return cached[1]


def output_logits(layer: nn.Module, x: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """layer(x) in float32; with ``dtype`` (torch.bfloat16) an OutputLayer's product runs in that
    type, as it does in bf16 training, and comes back as float32 (for decoding: the output layer
    is the largest product of a step). Other layers (int8 ones) keep their own product."""
    if dtype is None or not isinstance(layer, OutputLayer):
        return layer(x)
    logits = F.linear(x.to(dtype), layer.weight_as(dtype)).float()
    return logits if layer.bias is None else logits.add_(layer.bias)


def autocast_dtype(device: str, default: torch.dtype) -> torch.dtype:
    """The type autocast computes products in on ``device`` (bf16 here), or ``default`` outside it."""
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else default


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor, target: Tensor, eps: float) -> Tensor:
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
        ctx.save_for_backward(x, w, z, log_norm, target)
        ctx.eps, ctx.weight_dtype, ctx.has_bias, ctx.rows = eps, weight.dtype, bias is not None, rows
        return loss[:rows].sum()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor):
        x, w, z, log_norm, target = ctx.saved_tensors  # z is overwritten: one backward only
        eps = ctx.eps
        grad_z = z.sub_(log_norm.unsqueeze(1)).exp_()  # softmax(z), in place of z
        grad_z.sub_(eps / z.size(1))
        grad_z.scatter_add_(1, target.unsqueeze(1), grad_z.new_full((z.size(0), 1), -(1 - eps)))
        grad_z.mul_(grad)
        grad_z[ctx.rows:] = 0  # padding rows
        grad_bias = grad_z.sum(dim=0) if ctx.has_bias else None
        grad_z = grad_z.to(x.dtype)
        grad_x = (grad_z @ w)[:ctx.rows]
        grad_weight = (grad_z.t() @ x).to(ctx.weight_dtype)
        return grad_x, grad_weight, grad_bias, None, None


ROW_MULTIPLE = 128


def _pad_rows(t: Tensor) -> Tensor:
    """``t`` with zero rows appended up to a multiple of ROW_MULTIPLE. The number of real target
    tokens differs in every batch, and oneDNN compiles kernels per matrix shape (and keeps only
    a bounded number): a few row counts let it reuse them."""
    extra = -t.size(0) % ROW_MULTIPLE
    return torch.cat([t, t.new_zeros((extra, *t.shape[1:]))]) if extra else t
