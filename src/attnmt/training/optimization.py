"""What trains a model: its loss on one or several processes, Adam, the learning-rate schedule."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from attnmt.core.config import TrainingConfig
from attnmt.core.distributed import Processes


@dataclass
class TrainingSetup:
    model: nn.Module  # what checkpoints hold and validation scores
    loss: nn.Module  # batch -> (summed loss, number of terms summed), computed by the model
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler | torch.optim.lr_scheduler.ReduceLROnPlateau


def setup_training(model: nn.Module, loss: nn.Module, tc: TrainingConfig, processes: Processes) -> TrainingSetup:
    """Adam and the schedule of ``tc`` for ``model``; with several processes, ``loss`` in
    DistributedDataParallel, which adds up their gradients. (tc.attention_window is the loss's
    to pass on, and validation's: see attnmt.seq2seq.training.)"""
    if processes.active:
        # The gradients are views of the buckets DDP sums them in, rather than tensors of their own
        # copied into and back out of them: one copy of the gradients a process, not two (100 MB
        # less a process for configs/rnn-bahdanau.yaml's model).
        loss = DistributedDataParallel(loss, gradient_as_bucket_view=True)
        torch.manual_seed(tc.seed + processes.rank)  # same weights, own dropout masks
    optimizer = torch.optim.Adam(model.parameters(), lr=tc.learning_rate, betas=tc.adam_betas, fused=True)
    return TrainingSetup(model, loss, optimizer, make_scheduler(optimizer, tc))


def noam(step: int, warmup: int) -> float:
    """The inverse-square-root schedule with linear warm-up of Vaswani et al. (2017), as a factor
    of the learning rate that peaks at 1 at step ``warmup``: min(step^-0.5, step warmup^-1.5) warmup^0.5.
    (The paper's d_model^-0.5 min(...) is this with learning_rate = (d_model warmup)^-0.5.)"""
    return min(step**-0.5, step * warmup**-1.5) * warmup**0.5


def make_scheduler(optimizer: torch.optim.Optimizer, tc: TrainingConfig):
    if tc.schedule == "noam":
        # Stepped after every update; LambdaLR counts from 0, and the first update is step 1.
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda index: noam(index + 1, tc.warmup_steps))
    return torch.optim.lr_scheduler.ReduceLROnPlateau(
        optimizer,
        mode="max" if higher_is_better(tc) else "min",
        factor=tc.lr_decay_factor,
        patience=tc.lr_decay_patience,
        min_lr=tc.min_learning_rate,
    )


def higher_is_better(tc: TrainingConfig) -> bool:
    """Whether the early-stopping metric improves upwards (BLEU, accuracy) or downwards (loss, CER)."""
    return tc.early_stopping_metric in ("bleu", "accuracy")
