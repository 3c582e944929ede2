"""Stopping a diverged run (a loss or gradient norm that is not finite) before it reaches the weights,
without making a GPU wait for the host at every step.

On a CPU, or with several processes (which add their losses up on the host anyway), the host reads
each step's loss and gradient norm and stops the run at once. On one GPU that reading would wait
for the GPU twice a step, and then the GPU would wait for the host: measured on an H100, a step of
rnn-bahdanau at batch 64 took 13.5 ms, of which the GPU computed about 6. There the check runs on
the device instead: a step whose loss or norm is not finite is skipped by the optimizer (its
``found_inf``, the flag with which mixed-precision training skips an overflowing step; fused Adam
reads it on the device), the first such step is remembered on the device, and the host reads it
only when ``raise_if_diverged`` is called (the loop does at every train record, before every
checkpoint and at the end). Nothing diverged is ever written: the weights never take a
non-finite step, and the run stops before its next checkpoint.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Iterator

import torch
from torch import Tensor

from attnmt.core.errors import AttnmtError

ADVICE = (
    "lower training.learning_rate or training.clip_grad_norm, then train again (or --resume from the last checkpoint)"
)


class DivergenceCheck:
    """Guards each optimizer step of a run. ``on_device``: check on the device (one process on a
    GPU); it needs an optimizer that honours ``found_inf`` (fused Adam), else every step is read."""

    def __init__(self, optimizer: torch.optim.Optimizer, on_device: bool):
        self.optimizer = optimizer
        self.on_device = on_device and getattr(optimizer, "_step_supports_amp_scaling", False)
        self.first_bad_step: Tensor | None = None  # on the device: 0, or the first step not finite

    @contextmanager
    def guarded(self, step: int, loss: Tensor | float, norm: Tensor | None) -> Iterator[None]:
        """Around the optimizer's step number ``step``, with that step's (summed) loss and gradient norm."""
        if not self.on_device:
            self._raise_unless_finite(step, "loss", float(loss))
            if norm is not None:
                self._raise_unless_finite(step, "gradient norm", float(norm))
            yield
            return
        bad = ~torch.isfinite(loss.detach())
        if norm is not None:
            bad |= ~torch.isfinite(norm)
        if self.first_bad_step is None:
            self.first_bad_step = torch.zeros((), dtype=torch.long, device=bad.device)
        self.first_bad_step = torch.where(bad & (self.first_bad_step == 0), step, self.first_bad_step)
        self.optimizer.found_inf = bad.float()  # 1: the optimizer leaves the weights and its state as they are
        try:
            yield
        finally:
            del self.optimizer.found_inf

    def raise_if_diverged(self, step: int):
        """Stops the run if a step up to ``step`` was not finite (reads the device: one wait)."""
        if self.first_bad_step is None:
            return
        first = int(self.first_bad_step)
        if first:
            raise AttnmtError(
                f"step {first}: the training loss or gradient norm is not finite: training diverged "
                f"(checked on the GPU, read at step {step}). No update whose values were not finite "
                "reached the weights, and the files of the last checkpoint stay as they were; " + ADVICE
            )

    @staticmethod
    def _raise_unless_finite(step: int, what: str, value: float):
        if not math.isfinite(value):
            raise AttnmtError(
                f"step {step}: the training {what} is {value}: training diverged. The weights were "
                "not updated, and the files of the last checkpoint stay as they were; " + ADVICE
            )
