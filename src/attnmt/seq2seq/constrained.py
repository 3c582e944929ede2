"""Constrained sparsemax (Malaviya et al. 2018): attention weights that sum to 1 and stay below an
upper bound at each source position,

    csparsemax(e; u) = argmin_{p in simplex, p <= u} ||p - e||^2,   p_j = clip(e_j - tau, 0, u_j)

with tau the threshold that makes the weights sum to 1. In translation the bound of source position
j at step t is what is left of its fertility f_j after the attention it has had, u_j = f_j -
sum_{t'<t} a_{t'}(j), so that no word is attended to more than f_j over the whole output (against
words translated again and again), and a word that has had its share makes room for the others.
The caller keeps the problem feasible (sum_j u_j >= 1): attnmt leaves the last source position, the
sentence's </s>, unbounded, as Malaviya et al.'s sink token.

sum_j clip(e_j - tau, 0, u_j) is piecewise linear and decreasing in tau, with its kinks at tau = e_j
and tau = e_j - u_j; tau is found exactly by evaluating the sum at those 2S kinks and interpolating
between the two that bracket 1: no sort and no loop, so that a GPU's decoder step runs without
waiting for the host. The gradient is the implicit one: with F the positions strictly inside their
bounds (0 < p_j < u_j) and A those at their upper bound,

    dp_F / de_F = I - 1 1^T / |F|,    dp_A / du_A = I,    dp_F / du_A = -1 / |F|
"""

from __future__ import annotations

import torch
from torch import Tensor


def csparsemax(scores: Tensor, upper: Tensor) -> Tensor:
    """Weights p (..., S) of scores e (-inf where a position may not be attended) within the bounds
    ``upper`` (u >= 0, sum_j u_j >= 1 over the attendable positions), in float32."""
    return ConstrainedSparsemax.apply(scores.float(), upper.float())


class ConstrainedSparsemax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, scores: Tensor, upper: Tensor) -> Tensor:
        weights = _project(scores, upper)
        ctx.save_for_backward(weights, upper)
        return weights

    @staticmethod
    def backward(ctx, grad: Tensor):
        weights, upper = ctx.saved_tensors
        free = (weights > 0) & (weights < upper)
        at_bound = (weights == upper) & (upper > 0)
        mean = (grad * free).sum(-1, keepdim=True) / free.sum(-1, keepdim=True).clamp(min=1)
        shifted = grad - mean
        return shifted * free, shifted * at_bound


def _project(scores: Tensor, upper: Tensor) -> Tensor:
    """The closest point to e in {p : sum p = 1, 0 <= p <= u} (see the module)."""
    real = scores > float("-inf")
    e, u = scores.masked_fill(~real, 0.0), upper.masked_fill(~real, 0.0)
    kinks = torch.cat([e, e - u], dim=-1)  # (..., 2S): the taus where some p_j starts or stops moving
    sums = _clipped(e.unsqueeze(-2) - kinks.unsqueeze(-1), u.unsqueeze(-2)).sum(-1)  # (..., 2S): the sum at each
    inf = torch.full_like(kinks, float("inf"))
    low, low_at = torch.where(sums >= 1, kinks, -inf).max(-1, keepdim=True)  # the last kink with sum >= 1 ...
    high, high_at = torch.where(sums <= 1, kinks, inf).min(-1, keepdim=True)  # ... and the first with sum <= 1
    sum_low, sum_high = sums.gather(-1, low_at), sums.gather(-1, high_at)
    # between them the sum is linear in tau: where it is 1
    drop = sum_low - sum_high
    tau = torch.where(drop > 0, low + (sum_low - 1) * (high - low) / drop.clamp(min=1e-30), low)
    return _clipped(e - tau, u).masked_fill(~real, 0.0)


def _clipped(x: Tensor, upper: Tensor) -> Tensor:
    """clip(x, 0, u)."""
    return torch.minimum(x.clamp(min=0), upper)


def fertility_bounds(coverage: Tensor, mask: Tensor, fertility: float) -> Tensor:
    """u_j = f - sum_{t'<t} a_{t'}(j) (not below 0) of the coverage (B,T,S) and the real positions
    ``mask`` (B,S); the last real position of each sentence, the sink, unbounded: its bound is 1,
    which no weight of the simplex can pass (a larger one would only cost precision: e_j - u_j is a
    kink of the search)."""
    upper = (fertility - coverage.float()).clamp(min=0)
    positions = torch.arange(mask.size(-1), device=mask.device)
    sink = positions == (mask.sum(-1, keepdim=True) - 1)  # (B,S)
    return upper.masked_fill(sink.unsqueeze(1), SINK_BOUND)


SINK_BOUND = 1.0  # the sink's bound: no weight is larger


__all__ = ["csparsemax", "fertility_bounds", "ConstrainedSparsemax"]
