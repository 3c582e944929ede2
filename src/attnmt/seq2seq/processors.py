"""Log-probability processors: what changes a step's log-probabilities before a strategy chooses
from them, in the shape of fairseq's and transformers' logits processors (our own code).

A processor is a callable ``(log_probs (rows, columns)) -> (rows, columns)``, tensor operations
only (no value read back), so that both executors apply it the same way: the eager one
(attnmt.seq2seq.decoding.Greedy) and the fixed-shape one (attnmt.seq2seq.fast_decoding._Greedy,
a GPU's step). Both choose a step's tokens through ``choose``, the one code path where a pick
(``Sampler``: the processors, then a draw) meets the log-probabilities.

Sampling's filters are processors: ``SamplingFilters`` (temperature, top-k, top-p) shapes the
distribution a token is drawn from; the hypothesis' score stays the model's log-probability of
the tokens drawn (``choose``). The shortlist is not a processor: it restricts the output layer
(attnmt.seq2seq.output.OutputLayer.restrict), so that the other columns are never computed (a
processor would mask columns already paid for). A prefix's forcing is processors too (``Forced``:
the prefix's next token, ``Allowed``: the pieces that may spell its word), which the model wrapper
of attnmt.seq2seq.prefix (``Prefixed``) makes at each step from each row's own progress, in both
executors: that progress is a state that moves with the rows (beam search's reordering, the eager
loop's finished rows leaving), which the decoder state carries for it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

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
