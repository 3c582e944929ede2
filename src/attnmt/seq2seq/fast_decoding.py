"""Greedy and beam search as fixed-shape tensor programs, for GPUs: the searches of
attnmt.seq2seq.decoding, with the same results, but with no host synchronisation in the step loop.

Why. A decoder step of an RNN model is a few dozen small kernels. On a GPU each runs in a few
microseconds: what takes the time is Python launching them and, worse, every point where the host
waits for a value from the GPU. The reference searches drop finished sentences from the batch
(``nonzero``, ``tolist``) and keep beam search's finished hypotheses in Python lists: at every step
the host waits for the GPU's whole queue to drain, then the GPU waits for the host. (A CPU has no
such queue: there the reference searches, which compute fewer rows as sentences end, stay.)

What. Every sentence keeps its rows for the whole search (one for greedy, k for beam search); a
sentence that has ended is masked, not removed. Each step's bookkeeping is tensor operations on
the device:
  - greedy: the best token of each row; log-probability and length grow until EOS, which is the
    only token a row may write at its length limit (decoding.ended_at_limit): the eager
    executor's own strategy, decoding.GreedySearch, on rows that never leave;
  - beam: the eager executor's own strategy too, decoding.BeamSearch, on every sentence's k rows
    to the end (``_Beam``): the 2k best candidates of each sentence; those ending in EOS among the
    best k (at the sentence's length limit all of its live ones; decoding.beam_choice) join a
    fixed-size table of its n best finished hypotheses (decoding.Finished: score,
    log-probability, end step, row, last token), kept in the order Python's stable sort would give;
    the k best candidates that do not end in EOS stay alive; the stopping rules are tensor
    comparisons. With a coverage penalty each row carries its coverage (its attention summed so
    far), which scores the candidates that finish (decoding.coverage_penalty).
  - tokens, back-pointers (the row of step t that each row of step t+1 extends) and attention
    weights go into buffers preallocated for the longest output (decoding.History), written at
    the step counter, itself a tensor on the device.
  - a beam search that records its tree (beam_tree) writes each step's candidates of every
    sentence and their status into buffers too (decoding.TreeBuffers), added to the recorder at
    the end.
  - constrained beam search is the same binding of constraints.ConstrainedBeamSearch, BeamSearch
    with each row's progress through its phrases as tensors and the banks' round as ranks.
  - a prefix (prefix.Prefix), like any loop processor, restricts every step's log-probabilities in
    processors.processed_step, as in the eager loop, its state of the rows tensors beside the
    decoder state (prefix.FixedPrefixState), reordered with the rows.
The host asks "are all sentences done?" every ``CHECK_EVERY`` steps (one synchronisation each; there
too a caller's ``stop``), and reads the hypotheses back once, at the end, after following the
back-pointers on the device.

CUDA graphs. Where the decoder state keeps its shape from step to step (the RNN models, Seq2Seq and
SpeechModel), a whole step (model.decode_step and the bookkeeping) is captured once per batch as a
CUDA graph and replayed: one launch per step instead of a hundred or more. As PyTorch's recipe
says, ``WARMUP_STEPS`` steps first run eagerly on a side stream (lazy set-up, kernel choices); they
are the search's own first steps, and show whether the state keeps its shape. The step is then
captured on static buffers: the loop's tensors (step counter, previous tokens, decoder state,
scores, finished table), which the captured step reads and at its end overwrites with its results.
The memory (encoder output), limits and history buffers belong to the search and live as long as
its graph. The Transformer's state, its cache of keys and values, would grow by one position a
step: here it is preallocated for the longest output (``init_fixed_state``: transformer.FixedCache,
each step writing its position in place of a zero and attending over the positions written), so
its steps are captured too.

The switch. attnmt.seq2seq.search.decode uses these searches when the source is on a CUDA device
and the speed tricks are on (``attnmt.core.speed.plain()`` or ``ATTNMT_PLAIN=1``: the reference
searches). ``graphs=None`` captures graphs on CUDA only; ``False`` runs every step eagerly;
``True`` on a CPU runs the static-buffer path without a graph. tests/test_fast_decoding.py checks
that all of them return decoding's hypotheses, and that a step reads no value back.
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass, replace
from typing import Any, Callable

import torch
from torch import Tensor

from attnmt.seq2seq.base import EncoderDecoder, StepOutput
from attnmt.seq2seq.processors import processed_step, started
from attnmt.seq2seq.capture import captured, side_stream
from attnmt.seq2seq.constraints import ConstrainedBeamSearch, Phrases
from attnmt.seq2seq.decoding import (
    BeamLoop,
    BeamRecorder,
    BeamSearch,
    GreedyLoop,
    GreedySearch,
    Hypothesis,
    checked_search,
    stop_now,
)

CHECK_EVERY = 8  # steps between two "are all sentences done?", each a host synchronisation
WARMUP_STEPS = 2  # eager steps before a capture; two, to see whether the state keeps its shape


@torch.inference_mode()
def greedy_search(
    model: EncoderDecoder,
    src: Tensor,
    src_lengths: Tensor,
    max_lengths: list[int],
    alpha: float = 1.0,
    vocabulary: Tensor | None = None,
    window: tuple[int, int] | None = None,
    beta: float = 0.0,
    pick: Callable[[Tensor], Tensor] | None = None,
    *,
    stop: Callable[[], bool] | None = None,
    graphs: bool | None = None,
    processors: tuple = (),
) -> list[list[Hypothesis]]:
    """decoding.greedy_search's hypotheses, every sentence computed until all have ended (``beta``:
    the coverage penalty of each score). ``pick``: each row's column instead of its most probable
    (processors.sampler), drawn for every row at every step (so unlike the reference's draws, for the
    sentences going), in eager steps: a graph would not know the generator. ``stop``: as
    beam_search's; ``processors``: the loop processors of every step (``_FixedStrategy.step``)."""
    memory = model.encode(src, src_lengths, window)
    search = _Greedy(model, memory, max_lengths, alpha, vocabulary, beta, pick, processors)
    loop, steps = run_fixed(search, max(max_lengths), graphs_on(graphs, src.device) and pick is None, stop)
    return checked_search(search.results(loop, steps))


@torch.inference_mode()
def beam_search(
    model: EncoderDecoder,
    src: Tensor,
    src_lengths: Tensor,
    max_lengths: list[int],
    beam: int = 5,
    n_best: int = 1,
    alpha: float = 1.0,
    vocabulary: Tensor | None = None,
    window: tuple[int, int] | None = None,
    beta: float = 0.0,
    *,
    record: BeamRecorder | None = None,
    stop: Callable[[], bool] | None = None,
    graphs: bool | None = None,
    processors: tuple = (),
) -> list[list[Hypothesis]]:
    """decoding.beam_search's n best hypotheses (same stopping rules: see its docstring), every
    sentence keeping its k rows until all are done. ``beta``: the coverage penalty of the finished
    hypotheses' scores, from each live row's attention summed as it goes (``BeamSearch.coverage``).
    ``record``: decoding.beam_search's search tree, the same, from every step's candidates kept in
    buffers on the device (``TreeBuffers``, inside a captured step too) and added to the
    recorder at the end. ``stop``: asked where the loop asks whether all are done (every
    CHECK_EVERY steps), DecodingStopped when it says True. ``processors``: as greedy_search's."""
    memory = model.encode(src, src_lengths, window)
    search = BeamSearch(memory, max_lengths, beam, n_best, alpha, vocabulary, beta, record=record is not None)
    return run_beam(_Beam(model, memory, search, processors), graphs_on(graphs, src.device), stop, record)


@torch.inference_mode()
def constrained_beam_search(
    model: EncoderDecoder,
    src: Tensor,
    src_lengths: Tensor,
    max_lengths: list[int],
    constraints: list[Phrases],
    beam: int = 5,
    n_best: int = 1,
    alpha: float = 1.0,
    window: tuple[int, int] | None = None,
    beta: float = 0.0,
    *,
    record: BeamRecorder | None = None,
    stop: Callable[[], bool] | None = None,
    graphs: bool | None = None,
    processors: tuple = (),
) -> list[list[Hypothesis]]:
    """constraints.constrained_beam_search's n best (the same arguments, the same strategy,
    constraints.ConstrainedBeamSearch), every sentence keeping its k rows until all are done;
    ``record``, ``stop``, ``graphs`` and ``processors``: as beam_search's."""
    memory = model.encode(src, src_lengths, window)
    search = ConstrainedBeamSearch(memory, max_lengths, constraints, beam, n_best, alpha, beta, record is not None)
    return run_beam(_Beam(model, memory, search, processors), graphs_on(graphs, src.device), stop, record)


def run_beam(search: _Beam, graphs: bool, stop: Callable[[], bool] | None, record: BeamRecorder | None):
    """A beam search's run in the fixed-shape loop, its tree replayed into ``record``."""
    loop, steps = run_fixed(search, len(search.history.tokens), graphs, stop)
    if record is not None:
        search.search.tree.replay(record, steps)
    return checked_search(search.results(loop, steps))


def graphs_on(graphs: bool | None, device: torch.device) -> bool:
    return device.type == "cuda" if graphs is None else graphs


# ------------------------------------------------------------------------------- the step loop


def run_fixed(search, steps: int, graphs: bool, stop: Callable[[], bool] | None = None):
    """The fixed-shape executor's loop: runs ``search`` until all its sentences are done (asked
    every CHECK_EVERY steps) or for ``steps`` steps: eagerly, or with ``graphs`` its first
    WARMUP_STEPS eagerly and the others as a captured graph. ``stop``: asked at each of those
    checks that leaves the search unfinished (decoding.stop_now). Returns the last loop and the
    number of steps run."""
    loop, step, t = search.start(), search.step, 0
    if graphs and steps > WARMUP_STEPS:
        loop, step = _warm_up_and_capture(search.step, loop, WARMUP_STEPS)
        t = WARMUP_STEPS  # (fewer than CHECK_EVERY: no check was due)
    while t < steps:
        loop, t = step(loop), t + 1
        if t % CHECK_EVERY == 0:
            if bool(search.all_done(loop)):
                break
            if t < steps:
                stop_now(stop, t)
    return loop, t


def _warm_up_and_capture(step: Callable, loop, steps: int):
    """Runs ``steps`` steps eagerly on a side stream, then captures ``step`` if the loop kept its
    layout over the last one. Returns the loop and what runs the next steps (the graph or
    ``step``)."""
    with side_stream(loop.prev.device):
        for _ in range(steps):
            before, loop = loop, step(loop)
    if _layout(loop) != _layout(before):  # a growing state (the Transformer's cache): no graph
        return loop, step
    return loop, _StepGraph(step, loop)


class _StepGraph:
    """A search step on static buffers, captured as one CUDA graph; calling it runs the step on
    the buffers, in place, and returns them. (On a CPU it runs the same step eagerly.)"""

    def __init__(self, step: Callable, loop):
        # the static buffers: the step's inputs, then its outputs
        self.loop = _map(torch.clone, loop)
        self.replay = captured(lambda: _copy_into(self.loop, step(self.loop)), loop.prev.device)

    def __call__(self, loop):
        if loop is not self.loop:  # (the first call: the warm-up's loop, equal to the buffers)
            _copy_into(self.loop, loop)
        self.replay()
        return self.loop


# The loops and the model's states are dataclasses of tensors, lists of tensors and None.


def _tensors(value) -> list[Tensor]:
    """The tensors of a loop or state, in a fixed order."""
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, list):
        return [t for v in value for t in _tensors(v)]
    if is_dataclass(value):
        return [t for f in fields(value) for t in _tensors(getattr(value, f.name))]
    return []


def _map(function: Callable[[Tensor], Tensor], value):
    """``value`` with ``function`` applied to each of its tensors."""
    if isinstance(value, Tensor):
        return function(value)
    if isinstance(value, list):
        return [_map(function, v) for v in value]
    if is_dataclass(value):
        return replace(value, **{f.name: _map(function, getattr(value, f.name)) for f in fields(value)})
    return value


def _layout(value) -> list:
    """The shapes and types of the tensors of a loop or state, and its numbers kept on the host: a
    state that counts its positions there (TransformerState's length) changes at every step, and a
    graph would replay its first."""
    return [(t.shape, t.dtype) for t in _tensors(value)] + _host_numbers(value)


def _host_numbers(value) -> list[int | float]:
    if isinstance(value, list):
        return [n for v in value for n in _host_numbers(v)]
    if is_dataclass(value):
        return [n for f in fields(value) for n in _host_numbers(getattr(value, f.name))]
    return [value] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


def _copy_into(static, new):
    for buffer, tensor in zip(_tensors(static), _tensors(new), strict=True):
        buffer.copy_(tensor)


def _batch_size(memory) -> int:
    return memory.states.size(0)


# ------------------------------------------------------------------------------- greedy search


class _FixedStrategy:
    """A strategy of the fixed-shape executor (``run_fixed``): start() the loop, step() it (no value
    read back: the model's step on every row, its log-probabilities through the loop
    ``processors``, processors.processed_step as in the eager loop; then the strategy's choice,
    ``advance``), all_done() for the host's check, results() at the end."""

    model: EncoderDecoder
    memory: Any
    processors: tuple = ()

    def step(self, loop):
        out = processed_step(self.model, self.processors, loop.step, loop.prev, loop.state, self.memory)
        return self.advance(loop, out)

    def first_state(self):
        """The decoder state of the first step, of a shape its steps keep, with the processors'."""
        state = self.model.init_fixed_state(self.memory, self.history.tokens.size(0))
        return started(state, self.processors, self.memory, fixed=True)


class _Greedy(_FixedStrategy):
    """decoding.GreedySearch in the fixed-shape loop: one row per sentence, every row to the end
    (an ended sentence's row masked: it adds nothing)."""

    def __init__(
        self,
        model: EncoderDecoder,
        memory,
        max_lengths: list[int],
        alpha: float,
        vocabulary: Tensor | None = None,
        beta: float = 0.0,
        pick: Callable[[Tensor], Tensor] | None = None,
        processors: tuple = (),
    ):
        self.model = model
        self.memory = memory
        self.processors = tuple(processors)
        self.search = GreedySearch(memory, max_lengths, alpha, vocabulary, beta, pick)
        self.history = self.search.history

    def start(self) -> GreedyLoop:
        step = torch.zeros(1, dtype=torch.long, device=self.search.limits.device)
        return self.search.start(self.first_state(), step)

    def advance(self, loop: GreedyLoop, out: StepOutput) -> GreedyLoop:
        return self.search.advance(loop, out)

    def all_done(self, loop: GreedyLoop) -> Tensor:
        return loop.ended.all()

    def results(self, loop: GreedyLoop, steps: int) -> list[list[Hypothesis]]:
        return self.search.results(loop, steps)


# ------------------------------------------------------------------------------- beam search


class _Beam(_FixedStrategy):
    """decoding.BeamSearch (or constraints.ConstrainedBeamSearch) in the fixed-shape loop: k rows per
    sentence to the end (those of sentence b are rows b*k ... b*k + k-1, its memory repeated k
    times; a done sentence's rows masked), the state's rows moved to their parents at each step."""

    def __init__(self, model: EncoderDecoder, memory, search: BeamSearch, processors: tuple = ()):
        self.model = model
        self.processors = tuple(processors)
        self.search = search
        self.history = search.history
        rows = torch.arange(search.batch, device=memory.mask.device).repeat_interleave(search.beam)
        self.memory = memory.select(rows)  # (each sentence's memory repeated for its k rows)

    def start(self) -> BeamLoop:
        step = torch.zeros(1, dtype=torch.long, device=self.search.limits.device)
        return self.search.start(self.first_state(), step, self.search.beam)

    def advance(self, loop: BeamLoop, out: StepOutput) -> BeamLoop:
        loop, parents = self.search.advance(loop, out)
        return replace(loop, state=loop.state.select(parents))

    def all_done(self, loop: BeamLoop) -> Tensor:
        return loop.done.all()

    def results(self, loop: BeamLoop, steps: int) -> list[list[Hypothesis]]:
        return self.search.results(loop, steps)


__all__ = ["greedy_search", "beam_search", "constrained_beam_search", "run_fixed", "CHECK_EVERY"]
