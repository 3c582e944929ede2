"""The output layer: decoder states -> scores over the target vocabulary.

Training calls ``loss``, the layer and the label-smoothed cross-entropy in one function (see
attnmt.core.speed.linear_cross_entropy). Decoding calls the layer itself, in float32, or with
``compute_dtype = torch.bfloat16`` (``attnmt.load(..., quantize="bf16")``) in bfloat16 as bf16
training does: the output layer is the largest product of a decoder step. ``restrict(ids)``
(attnmt.translation.shortlist) makes it score the rows ``ids`` only: a vocabulary shortlist.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnmt.core import speed


class OutputLayer(nn.Linear):
    #: the type of the product outside training: None (float32) or torch.bfloat16
    compute_dtype: torch.dtype | None = None

    #: a loaded model's (speed.for_inference): the float32 product through attnmt.core.speed.linear
    frozen = False

    #: decoding with a shortlist: (its weight rows, in compute_dtype, and bias entries), else None
    _restricted: tuple[Tensor, Tensor | None] | None = None

    def forward(self, x: Tensor) -> Tensor:
        if self.training:
            return super().forward(x)
        weight, bias = self._restricted or (self.weight, self.bias)
        dtype = self.compute_dtype
        if dtype is None:
            return speed.linear(x, weight, bias) if self.frozen else F.linear(x, weight, bias)
        if self._restricted is None:
            weight = self.weight_as(dtype)
        logits = F.linear(x.to(dtype), weight).float()
        return logits if bias is None else logits.add_(bias)

    def restrict(self, ids: Tensor | None):
        """From now on score the vocabulary ids ``ids`` only (sorted, starting with PAD, UNK, BOS,
        EOS so that those keep their columns), column c being id ids[c]; None: every id again. The
        rows are copied once here, not at every step."""
        if ids is None:
            self._restricted = None
            return
        weight = self.weight if self.compute_dtype is None else self.weight_as(self.compute_dtype)
        self._restricted = (weight[ids], None if self.bias is None else self.bias[ids])

    def loss(self, x: Tensor, target: Tensor, label_smoothing: float = 0.0, ignore_index: int | None = None) -> Tensor:
        """x (N,H) decoder states, target (N,) token ids -> the cross-entropy summed over N (over
        the rows whose target is not ``ignore_index``)."""
        return speed.linear_cross_entropy(x, self.weight, self.bias, target, label_smoothing, ignore_index)

    def weight_as(self, dtype: torch.dtype) -> Tensor:
        """The weight in ``dtype``, converted once and kept until the weight changes (training
        updates it in place, which bumps its version)."""
        key = (dtype, self.weight.data_ptr(), self.weight._version)
        cached = self.__dict__.get("_weight_cast")
        if cached is None or cached[0] != key:
            cached = self.__dict__["_weight_cast"] = (key, self.weight.detach().to(dtype))
        return cached[1]
