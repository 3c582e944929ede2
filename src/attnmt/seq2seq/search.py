"""The one entry to decoding: greedy search (beam 1), beam search or sampling, on a vocabulary shortlist if
one is given, through attnmt.seq2seq.decoding, or on a GPU with the speed tricks on through
attnmt.seq2seq.fast_decoding (the same hypotheses, without waiting for the GPU at every step)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch
from torch import Tensor

from attnmt.core import speed
from attnmt.core.config import DecodingConfig, Sampling
from attnmt.seq2seq import decoding, fast_decoding
from attnmt.seq2seq.base import EncoderDecoder
from attnmt.seq2seq.constraints import Phrases, constrained_beam_search
from attnmt.seq2seq.decoding import BeamRecorder, output_limits
from attnmt.seq2seq.prefix import Prefix, Prefixes
from attnmt.seq2seq.processors import sampler
from attnmt.seq2seq.shortlist import Shortlist, restricted


def decode(
    model: EncoderDecoder,
    src: Tensor,
    src_lengths: Tensor,
    settings: DecodingConfig,
    *,
    beam: int | None = None,
    n_best: int = 1,
    shortlist: Shortlist | None = None,
    sampling: Sampling | None = None,
    generator: torch.Generator | None = None,
    prefixes: Prefixes | None = None,
    constraints: list[Phrases] | None = None,
    processors: tuple = (),
    record: BeamRecorder | None = None,
    stop: Callable[[], bool] | None = None,
    observers: tuple = (),
    max_length: int | None = None,
):
    """Greedy search (beam 1) or beam search, as ``settings`` say: its beam (unless ``beam`` is
    given), length penalty, output length limits (decoding.output_limits) and attention window.
    On a GPU with the speed tricks on, those of attnmt.seq2seq.fast_decoding: the same
    hypotheses, without waiting for the GPU at every step. ``shortlist``: the output layer
    restricted to the batch's candidates (attnmt.seq2seq.shortlist). ``sampling``: each output
    drawn instead (beam and n_best 1; the greedy search of the device, on a GPU eagerly, see
    fast_decoding.greedy_search), with ``generator``'s random numbers if given. ``prefixes``: what
    each sentence's outputs begin with (attnmt.seq2seq.prefix: token ids, then the start of a word
    to spell), a loop processor (prefix.Prefix, before ``processors``) in either executor.
    ``constraints``: phrases of token ids each sentence's outputs must contain
    (attnmt.seq2seq.constraints; beam search by dynamic beam allocation, in either executor:
    fast_decoding.constrained_beam_search; without a shortlist). ``processors``: loop processors
    (attnmt.seq2seq.processors) that restrict every step's log-probabilities (under a shortlist,
    its columns). ``record``: a BeamRecorder that beam search (even of beam 1) adds every
    candidate it considers to (Translator.beam_tree); ``stop``: asked between two steps of a beam
    search, DecodingStopped when it says True (the server's time limit); in either executor (the
    fixed-shape one asks ``stop`` every fast_decoding.CHECK_EVERY steps). ``observers``: what sees
    the memory and every step of the search (decoding.run_eager: the trace, attnmt.seq2seq.trace,
    a greedy search's), in the eager executor on every device (they read each step's values).
    ``max_length``: every output's length limit instead of the settings' ratio and offset
    (decoding.output_limits).
    (settings.batch_size and settings.shortlist are for the callers that cut the sources into
    batches and choose the table.)"""
    beam = (1 if sampling is not None else settings.beam) if beam is None else beam
    if sampling is not None and (beam, n_best) != (1, 1):
        raise ValueError(f"sampling draws one output per sentence: beam and n_best must be 1 (got {beam}, {n_best})")
    if constraints is not None and sampling is not None:
        raise ValueError("sampling draws outputs as the model writes them: it takes no constraints")
    if sampling is not None and (record is not None or stop is not None):
        raise ValueError("record and stop are for beam search: sampling takes neither")
    if constraints is not None and not any(constraints):
        constraints = None
    vocabulary = None if shortlist is None or constraints is not None else shortlist.vocabulary(src)
    max_lengths = output_limits(src_lengths, settings, prefixes, constraints, max_length)
    if prefixes is not None:
        prefix, vocabulary = prefixed(prefixes, vocabulary, src.device)
        processors = (prefix, *processors)
    alpha, beta, window = settings.length_penalty, settings.coverage_penalty, settings.attention_window
    fast = fast_here(src.device, model) and not observers  # (observers read each step: the eager executor)
    options = {"processors": tuple(processors)} | ({"observers": observers} if observers else {})
    args = (model, src, src_lengths, max_lengths)
    if constraints is not None:
        search = fast_decoding.constrained_beam_search if fast else constrained_beam_search
        return search(*args, constraints, beam, n_best, alpha, window, beta, record=record, stop=stop, **options)
    module = fast_decoding if fast else decoding
    with restricted(model, vocabulary):  # (the model's output layers: an ensemble's each)
        if sampling is not None:  # (its filters: processors of the draw)
            pick = sampler(sampling, generator)
            return module.greedy_search(*args, alpha, vocabulary, window, beta, pick, **options)
        if beam == 1 and n_best == 1 and record is None and (stop is None or observers):  # (the trace's takes stop)
            return module.greedy_search(*args, alpha, vocabulary, window, beta, stop=stop, **options)
        return module.beam_search(
            *args, beam, n_best, alpha, vocabulary, window, beta, record=record, stop=stop, **options
        )


def prefixed(prefixes: Prefixes, vocabulary: Tensor | None, device: torch.device) -> tuple[Prefix, Tensor | None]:
    """The loop processor of ``prefixes`` (prefix.Prefix), and the shortlist's ids with the prefixes'
    (None: no shortlist)."""
    vocabulary = with_prefix_tokens(vocabulary, prefixes)
    if vocabulary is not None:
        prefixes = replace(prefixes, tokens=[columns_of(vocabulary, p) for p in prefixes.tokens])
    return Prefix(prefixes, vocabulary, device), vocabulary


def with_prefix_tokens(vocabulary: Tensor | None, prefixes: Prefixes) -> Tensor | None:
    """A shortlist's ids with those of the prefixes added (still sorted), and every piece that can
    spell a part of their words: a prefix is written whatever the shortlist says."""
    if vocabulary is None:
        return None
    ids = [t for p in prefixes.tokens for t in p]
    for word in filter(None, prefixes.words or []):
        for start in range(len(word)):  # what may be left to spell: the word's ends
            ids += prefixes.spelling.fits(word[start:]).nonzero().view(-1).tolist()
    tokens = torch.tensor(ids, dtype=vocabulary.dtype, device=vocabulary.device)
    return torch.unique(torch.cat([vocabulary, tokens]))


def columns_of(vocabulary: Tensor, tokens: list[int]) -> list[int]:
    """The columns of a shortlist's log-probabilities that stand for ``tokens`` (all in its sorted ids)."""
    return torch.searchsorted(
        vocabulary, torch.tensor(tokens, dtype=vocabulary.dtype, device=vocabulary.device)
    ).tolist()


def fast_here(device: torch.device, model: EncoderDecoder) -> bool:
    """Whether a model's searches on ``device`` run in the fixed-shape executor (fast_decoding): on
    a GPU with the speed tricks on, for a model that allows it (EncoderDecoder.fast_search)."""
    return device.type == "cuda" and speed.enabled() and model.fast_search
