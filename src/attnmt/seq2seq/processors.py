"""Log-probability processors: what changes a step's log-probabilities before a strategy chooses
from them, in the shape of fairseq's and transformers' logits processors (our own code). A
processor is a callable ``(log_probs (rows, columns)) -> (rows, columns)``, tensor operations only
(no value read back), so that both executors apply it the same way.

The search loop of both executors applies *loop processors* to every step (``processed_step``): a
loop processor keeps a state of the rows (``start(memory, fixed)``; tensors only for the
fixed-shape executor), carried beside the decoder state (``Processed``) so that the strategies
move both when they reorder or drop rows, and ``processor(t, prev_tokens, log_probs, state)``
gives the step's restricted log-probabilities and the rows' next state: a prefix
(attnmt.seq2seq.prefix.Prefix, of ``Forced`` and ``Allowed``). A restriction keeps the values it
lets through: scores stay the model's log-probabilities (its own kept in ``model_log_probs``).
Sampling's filters (``SamplingFilters``) are processors of the draw, not of the scores: a
``Sampler`` runs them and draws, ``choose`` scores the draw. The shortlist is not a processor: it
restricts the output layer (OutputLayer.restrict), whose other columns are then never computed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from attnmt.core.config import Sampling

Processor = Callable[[Tensor], Tensor]


class SamplingFilters:
    """Sampling's filters as a processor: the log-probabilities sharpened or flattened by the
    temperature, cut to the top_k most probable tokens, then to the smallest set of them whose
    probability reaches top_p (the most probable token always stays); the others at -inf. Their
    softmax is the distribution a token is drawn from (renormalized)."""

    def __init__(self, sampling: Sampling):
        self.sampling = sampling

    def __call__(self, log_probs: Tensor) -> Tensor:
        sampling = self.sampling
        scores = log_probs.float() / sampling.temperature
        if 0 < sampling.top_k < scores.size(-1):
            kth = scores.topk(sampling.top_k, dim=-1).values[:, -1:]
            scores = scores.masked_fill(scores < kth, -math.inf)
        if sampling.top_p < 1:
            ordered, order = scores.sort(dim=-1, descending=True)
            probs = ordered.softmax(dim=-1)
            # the probability of the tokens more probable than each
            before = probs.cumsum(dim=-1) - probs
            scores = scores.scatter(-1, order, ordered.masked_fill(before >= sampling.top_p, -math.inf))
        return scores


class Forced:
    """A processor that forces a token in each row: every column but the row's of ``tokens``
    (rows, 1) at -inf, that one keeping its log-probability; a row whose token is ``free`` (PAD:
    none forced) left as it is."""

    def __init__(self, tokens: Tensor, free: int):
        self.tokens, self.free = tokens, free

    def __call__(self, log_probs: Tensor) -> Tensor:
        forced = self.tokens
        only = torch.full_like(log_probs, -math.inf).scatter(1, forced, log_probs.gather(1, forced))
        return torch.where(forced != self.free, only, log_probs)


class Allowed:
    """A processor that keeps each row to the columns ``allowed`` (rows, columns) bool: the others
    at -inf."""

    def __init__(self, allowed: Tensor):
        self.allowed = allowed

    def __call__(self, log_probs: Tensor) -> Tensor:
        return log_probs.masked_fill(~self.allowed.to(log_probs.device), -math.inf)


def processed(log_probs: Tensor, processors: Sequence[Processor]) -> Tensor:
    """``log_probs`` through each of ``processors`` in turn."""
    for processor in processors:
        log_probs = processor(log_probs)
    return log_probs


@dataclass
class Processed:
    """The search loop's state of its rows with loop processors: the model's decoder state (``inner``)
    and each processor's state of the same rows (None: it keeps none), selected together."""

    inner: Any
    states: list

    def select(self, index: Tensor) -> Processed:
        return Processed(self.inner.select(index), [None if s is None else s.select(index) for s in self.states])


def started(state, loop_processors: Sequence, memory, fixed: bool):
    """The loop's state before the first step: the model's ``state``, with each loop processor's
    (``start(memory, fixed)``; ``fixed``: for the fixed-shape executor) where there are any."""
    if not loop_processors:
        return state
    return Processed(state, [processor.start(memory, fixed) for processor in loop_processors])


def processed_step(model, loop_processors: Sequence, t, prev_tokens: Tensor, state, memory):
    """A step of the search loop, in both executors (decoding.run_eager, fast_decoding.run_fixed; the
    one call of the model's decode_step in either): the model's step, its log-probabilities through
    each loop processor in turn (each with its state of the rows, ``state``: Processed, at step
    ``t``: an int, or a tensor (1,) in the fixed-shape executor), the model's own kept in
    ``model_log_probs`` where they changed."""
    step = model.decode_step(prev_tokens, state.inner if loop_processors else state, memory)  # (the one call)
    if not loop_processors:
        return step
    log_probs, states = step.log_probs, []
    for processor, own in zip(loop_processors, state.states):
        log_probs, own = processor(t, prev_tokens, log_probs, own)
        states.append(own)
    return replace(
        step,
        log_probs=log_probs,
        state=Processed(step.state, states),
        model_log_probs=None if log_probs is step.log_probs else step.log_probs,
    )


class Sampler:
    """A greedy search's ``pick`` that draws each row's column from the softmax of its
    log-probabilities once ``processors`` have changed them, with ``generator``'s random numbers
    (a seeded one on the rows' device; None: torch's)."""

    def __init__(self, processors: Sequence[Processor], generator: torch.Generator | None = None):
        self.processors = tuple(processors)
        self.generator = generator

    def __call__(self, log_probs: Tensor) -> Tensor:
        scores = processed(log_probs, self.processors)
        return torch.multinomial(scores.softmax(dim=-1), 1, generator=self.generator).squeeze(1)


def sampler(sampling: Sampling, generator: torch.Generator | None = None) -> Sampler:
    """The Sampler of ``sampling``: its filters (``SamplingFilters``), then a draw."""
    return Sampler((SamplingFilters(sampling),), generator)


def choose(log_probs: Tensor, pick: Callable[[Tensor], Tensor] | None) -> tuple[Tensor, Tensor]:
    """A greedy step's column of each row and the model's log-probability of it, in both executors:
    the most probable (no ``pick``), or the one ``pick`` takes (a Sampler: its processors, then a
    draw), still scored by ``log_probs`` (rows, columns)."""
    if pick is None:
        best, column = log_probs.max(dim=-1)
        return column, best
    column = pick(log_probs)
    return column, log_probs.gather(1, column[:, None]).squeeze(1)
