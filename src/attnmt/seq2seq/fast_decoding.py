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
  - beam: the 2k best candidates of each sentence; those ending in EOS among the best k (at the
    sentence's length limit all of its live ones; decoding.beam_choice, the eager executor's
    choice) join a fixed-size
    table of its n best finished hypotheses (score, log-probability, end step, row, last token),
    kept in the order Python's stable sort gives decoding's lists; the k best candidates that do
    not end in EOS stay alive; the stopping rules of decoding.beam_search are tensor comparisons.
    With a coverage penalty each row carries its coverage (its attention summed so far), which
    scores the candidates that finish (decoding.coverage_penalty).
  - tokens, back-pointers (the row of step t that each row of step t+1 extends) and attention
    weights go into buffers preallocated for the longest output, written at the step counter,
    itself a tensor on the device.
  - a beam search that records its tree (beam_tree) writes each step's 2k candidates of every
    sentence and their status into buffers too (``TreeBuffers``), added to the recorder at the end.
  - constrained beam search (the banks of attnmt.seq2seq.constraints) is a FixedBeam too, in
    attnmt.seq2seq.fast_constraints.
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

from dataclasses import dataclass, fields, is_dataclass, replace
from typing import Any, Callable

import torch
from torch import Tensor

from attnmt.core.errors import AttnmtError
from attnmt.data.subwords import BOS
from attnmt.seq2seq.base import EncoderDecoder, StepOutput
from attnmt.seq2seq.processors import processed_step, started
from attnmt.seq2seq.capture import captured, side_stream
from attnmt.seq2seq.decoding import (
    COVERAGE_FLOOR,
    NO_COVERAGE,
    BeamRecorder,
    GreedyLoop,
    GreedySearch,
    History,
    Hypothesis,
    beam_choice,
    beam_done,
    checked_search,
    ended_at_limit,
    hypothesis_of,
    length_penalty,
    memory_lengths,
    stop_now,
)

CHECK_EVERY = 8  # steps between two "are all sentences done?", each a host synchronisation
WARMUP_STEPS = 2  # eager steps before a capture; two, to see whether the state keeps its shape

NEG_INF = float("-inf")


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
    hypotheses' scores, from each live row's attention summed as it goes (``FixedBeam._coverage``).
    ``record``: decoding.beam_search's search tree, the same, from every step's candidates kept in
    buffers on the device (``TreeBuffers``, inside a captured step too) and added to the
    recorder at the end. ``stop``: asked where the loop asks whether all are done (every
    CHECK_EVERY steps), DecodingStopped when it says True. ``processors``: as greedy_search's."""
    if n_best > beam:
        raise ValueError(f"n_best ({n_best}) cannot exceed the beam size ({beam})")
    memory = model.encode(src, src_lengths, window)
    search = FixedBeam(model, memory, max_lengths, beam, n_best, alpha, vocabulary, beta, record, processors)
    loop, steps = run_fixed(search, max(max_lengths), graphs_on(graphs, src.device), stop)
    if record is not None:
        search.tree.replay(record, steps)
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


@dataclass
class Finished:
    """The n best finished hypotheses of each sentence so far, best first (equal scores: the
    first to finish first), and how many have finished in all. Empty slots score -inf."""

    count: Tensor  # (B,) hypotheses finished so far, all of them
    score: Tensor  # (B,n) float64: log_prob / length penalty, computed as decoding computes it
    log_prob: Tensor  # (B,n) float64
    end: Tensor  # (B,n) the step at which it ended: it has end + 1 tokens
    row: Tensor  # (B,n) the row of that step it extends
    token: Tensor  # (B,n) its last token

    SLOTS = ("score", "log_prob", "end", "row", "token")


@dataclass
class BeamLoop:
    step: Tensor  # (1,) the step t about to run
    prev: Tensor  # (B*k,) the last token of each live hypothesis (BOS at first)
    state: Any  # the model's decoder state, (B*k) rows
    scores: Tensor  # (B,k) the live hypotheses' log-probabilities ((B,1) before the first step)
    done: Tensor  # (B,) the sentence's search is over
    finished: Finished
    # (B*k,S) each live row's attention summed over its steps (with a coverage penalty only)
    coverage: Tensor | None


class FixedBeam(_FixedStrategy):
    """Beam search on k rows per sentence (those of sentence b are rows b*k ... b*k + k-1, its
    memory repeated k times)."""

    def __init__(
        self,
        model: EncoderDecoder,
        memory,
        max_lengths: list[int],
        beam: int,
        n_best: int,
        alpha: float,
        vocabulary: Tensor | None = None,
        beta: float = 0.0,
        record: BeamRecorder | bool | None = None,  # (a recorder, or True: the tree kept in TreeBuffers)
        processors: tuple = (),
    ):
        batch, device, steps = _batch_size(memory), memory.states.device, max(max_lengths)
        self.model = model
        self.processors = tuple(processors)
        self.beam = beam
        self.n_best = n_best
        self.alpha = alpha
        self.batch = batch
        self.vocabulary = vocabulary
        self.beta = beta
        # each sentence's memory repeated for its k rows
        self.memory = memory.select(torch.arange(batch, device=device).repeat_interleave(beam))
        self.first_row = torch.arange(batch, device=device).unsqueeze(1) * beam  # (B,1)
        self.limits = torch.tensor(max_lengths, device=device)
        # The length penalties as decoding computes them (in Python, in float64): of t + 1 tokens
        # at index t, and of each sentence's longest output.
        self.penalties = torch.tensor(
            [length_penalty(n, alpha) for n in range(1, steps + 1)], dtype=torch.float64, device=device
        )
        self.limit_penalties = torch.tensor(
            [length_penalty(n, alpha) for n in max_lengths], dtype=torch.float64, device=device
        )
        self.history = History(steps, batch * beam, device)
        self.tree = TreeBuffers(steps, batch, 2 * beam, device) if record else None

    def start(self) -> BeamLoop:
        (batch, k), device = (self.batch, self.beam), self.limits.device
        # The k hypotheses of a sentence would start identical: the first step extends its first
        # row only (scores of width 1, as in decoding), and its best extensions fill the k rows.
        scores = torch.zeros(batch, 1, device=device)
        return BeamLoop(
            torch.zeros(1, dtype=torch.long, device=device),
            torch.full((batch * k,), BOS, dtype=torch.long, device=device),
            self.first_state(),
            scores,
            torch.zeros(batch, dtype=torch.bool, device=device),
            self.no_finished(),
            torch.zeros(self.memory.mask.shape, device=device) if self.beta else None,
        )

    def no_finished(self) -> Finished:
        """An empty table of finished hypotheses."""
        batch, device = self.batch, self.limits.device
        empty = torch.zeros(batch, self.n_best, dtype=torch.long, device=device)
        no_scores = torch.full((batch, self.n_best), NEG_INF, dtype=torch.float64, device=device)
        return Finished(
            torch.zeros(batch, dtype=torch.long, device=device),
            no_scores,
            no_scores.clone(),
            empty,
            empty.clone(),
            empty.clone(),
        )

    def advance(self, loop: BeamLoop, out: StepOutput) -> BeamLoop:
        k, t, still_open = self.beam, loop.step, ~loop.done.unsqueeze(1)
        width = loop.scores.size(1)  # rows extended per sentence: 1 at the first step, then k
        log_probs = out.log_probs.view(self.batch, k, -1)[:, :width].flatten(0, 1)
        # At its length limit a sentence's live hypotheses can only write EOS: they all finish.
        log_probs = ended_at_limit(log_probs, (self.limits <= t + 1).repeat_interleave(width))
        # the 2k best candidates of each sentence (B,2k), best first: the EOS among the best k
        # finish, the best k others stay alive (the eager executor's choice, decoding.beam_choice)
        choice = beam_choice(loop.scores, log_probs, k, self.vocabulary)
        candidates, origin, token, alive = choice.score, choice.origin, choice.token, choice.alive
        parent = self.first_row + origin  # the row of this step each candidate extends
        coverage, penalty = self._coverage(loop.coverage, out.weights, parent)
        ended = choice.ends & still_open
        scores, prev, parent_alive = (x.gather(1, alive) for x in (candidates, token, parent))
        finished = self._with_finished(
            loop.finished,
            t,
            loop.finished.count + ended.sum(1),
            ended,
            candidates[:, :k],
            parent[:, :k],
            token[:, :k],
            None if penalty is None else penalty[:, :k],
        )

        if self.tree is not None:
            self.tree.write(t, still_open, origin, token, candidates, ended, alive)
        rows = parent_alive.flatten()
        self.history.write(t, prev.flatten(), rows, out.weights)
        return BeamLoop(
            t + 1,
            prev.flatten(),
            out.state.select(rows),
            scores,
            loop.done | self._done(finished, scores, t),
            finished,
            None if coverage is None else coverage[rows],
        )

    def _coverage(
        self, coverage: Tensor | None, weights: Tensor | None, parent: Tensor
    ) -> tuple[Tensor | None, Tensor | None]:
        """Each row's coverage with step t's attention ``weights`` added, and the coverage penalty
        (B,2k) of the candidates that extend the rows ``parent`` (decoding.coverage_penalty over
        each sentence's real positions); None and None without a coverage penalty."""
        if coverage is None:
            return None, None
        if weights is None:
            raise AttnmtError(NO_COVERAGE)
        coverage = coverage + weights.float()
        logs = coverage.clamp(COVERAGE_FLOOR, 1.0).log().masked_fill(~self.memory.mask, 0.0)
        return coverage, self.beta * logs.sum(1).double()[parent]

    def _with_finished(
        self,
        finished: Finished,
        t: Tensor,
        count: Tensor,
        finishes: Tensor,
        log_prob: Tensor,
        row: Tensor,
        token: Tensor,
        coverage_penalty: Tensor | None,
    ) -> Finished:
        """``finished`` and the hypotheses that finish at step t (each argument (B,k): which
        finish, their log-probabilities, rows, last tokens and coverage penalties): the n best,
        ordered as decoding's stable sort of its lists orders them (older ones first among equal
        scores)."""
        penalty = self.penalties.index_select(0, t)  # they have t + 1 tokens
        log_prob = log_prob.double()
        score = log_prob / penalty if coverage_penalty is None else log_prob / penalty + coverage_penalty
        new = {
            "score": torch.where(finishes, score, NEG_INF),
            "log_prob": log_prob,
            "end": t.expand_as(row),
            "row": row,
            "token": token,
        }
        merged = {name: torch.cat([getattr(finished, name), new[name]], dim=1) for name in Finished.SLOTS}
        best = merged["score"].sort(dim=1, descending=True, stable=True).indices[:, : self.n_best]
        return Finished(count, **{name: values.gather(1, best) for name, values in merged.items()})

    def _done(self, finished: Finished, scores: Tensor, t: Tensor) -> Tensor:
        """decoding.beam_done, the stopping rules of decoding.beam_search, for every sentence at
        once."""
        return beam_done(
            self.limits <= t + 1,
            finished.count >= self.n_best,
            finished.score[:, self.n_best - 1],
            scores.max(dim=1).values.double(),
            finished.count >= self.beam,
            self.limit_penalties,
            self.penalties.index_select(0, t),
        )

    def all_done(self, loop: BeamLoop) -> Tensor:
        return loop.done.all()

    def results(self, loop: BeamLoop, steps: int) -> list[list[Hypothesis]]:
        return self.hypotheses(loop.finished, steps)

    def hypotheses(self, finished: Finished, steps: int) -> list[list[Hypothesis]]:
        """The hypotheses of a table of finished ones, each sentence's best first."""
        # (read back along the parents: decoding.History.read_back)
        tokens, attention = self.history.read_back(finished.end, finished.row, finished.token, steps)
        tokens, ends, log_probs = tokens.tolist(), finished.end.tolist(), finished.log_prob.tolist()
        counts = finished.count.tolist()
        attention = None if attention is None else attention.float().cpu()
        widths = memory_lengths(self.memory)[:: self.beam]
        return [
            [
                hypothesis_of(
                    tokens[b][j][: ends[b][j] + 1],
                    log_probs[b][j],
                    None if attention is None else attention[b, j],
                    self.alpha,
                    widths[b],
                    self.beta,
                )
                for j in range(min(counts[b], self.n_best))
            ]
            for b in range(self.batch)
        ]


class TreeBuffers:
    """The search tree of a fixed-shape beam search, as an observer that reads nothing back: each
    step's 2k candidates of every sentence (the row of the sentence each extends, token, score)
    and their status (``KEPT``, ``FINISHED``, ``PRUNED``; 0 where the sentence was done), written
    at the step counter; ``replay`` adds them to a decoding.BeamRecorder as decoding's search
    adds its own."""

    KEPT, FINISHED, PRUNED = 1, 2, 3
    STATUS = {KEPT: "kept", FINISHED: "finished", PRUNED: "pruned"}

    def __init__(
        self,
        steps: int,
        batch: int,
        slots: int,
        device: torch.device,
        score_dtype: torch.dtype = torch.float32,
        met: bool = False,
    ):
        shape = (steps, batch, slots)
        self.origin = torch.zeros(shape, dtype=torch.long, device=device)
        self.token = torch.zeros(shape, dtype=torch.long, device=device)
        self.score = torch.zeros(shape, dtype=score_dtype, device=device)
        self.status = torch.zeros(shape, dtype=torch.long, device=device)
        # the constraint tokens each candidate has met (constrained search; None: no such count)
        self.met = torch.zeros(shape, dtype=torch.long, device=device) if met else None

    def write(self, t: Tensor, open_: Tensor, origin, token, score, ended, alive):
        """Beam search's step t's candidates (B,2k): ``ended`` (B,k) those that finish, ``alive``
        (B,k) the positions of those that stay; ``open_`` (B,1) the sentences still searched."""
        kept = torch.zeros_like(token, dtype=torch.bool).scatter(1, alive, True)
        finished = torch.nn.functional.pad(ended, (0, token.size(1) - ended.size(1)))
        status = torch.full_like(token, self.PRUNED)
        status = torch.where(kept, self.KEPT, status)
        status = torch.where(finished, self.FINISHED, status)
        status = status.masked_fill(~open_ | (score == NEG_INF), 0)
        self.write_slots(t, origin, token, score, status)

    def write_slots(self, t: Tensor, origin, token, score, status, met=None):
        """Step t's candidates (B,slots) in the order the recorder adds them, with their status
        (0: none) and, with ``met``, the constraint tokens each has met."""
        values = [(self.origin, origin), (self.token, token), (self.score, score), (self.status, status)]
        if self.met is not None:
            values.append((self.met, met))
        for buffer, value in values:
            buffer.index_copy_(0, t, value.to(buffer.dtype).unsqueeze(0))

    def replay(self, record: BeamRecorder, steps: int):
        """Adds the candidates of the first ``steps`` steps to ``record``, step by step."""
        origin = self.origin[:steps].cpu().tolist()
        token = self.token[:steps].cpu().tolist()
        score = self.score[:steps].cpu().tolist()
        status = self.status[:steps].cpu().tolist()
        met = None if self.met is None else self.met[:steps].cpu().tolist()
        for t in range(steps):
            groups = []
            for b in range(len(status[t])):
                candidates = []
                for j, candidate_status in enumerate(status[t][b]):
                    if candidate_status:  # (0: the sentence was done, or no candidate)
                        status_name = self.STATUS[candidate_status]
                        count = None if met is None else met[t][b][j]
                        candidates.append((origin[t][b][j], token[t][b][j], score[t][b][j], status_name, count))
                groups.append((b, candidates))
            record.add(t, groups)


__all__ = [
    "greedy_search",
    "beam_search",
    "run_fixed",
    "FixedBeam",
    "BeamLoop",
    "Finished",
    "TreeBuffers",
    "CHECK_EVERY",
]
