"""Decoding: greedy and batched beam search over a batch of source sentences, and sampling (greedy
search that draws each token instead of taking the most probable one).

Both return, for each sentence, hypotheses with their token ids (ending in EOS when the
model produced it), score and attention matrix (one row per output token, one column
per source token). Scores are log-probabilities divided by the length penalty of
Wu et al. (2016), lp(Y) = ((5 + |Y|) / 6) ** alpha, so greedy and beam scores compare; with a
coverage penalty beta > 0 (Wu et al. 2016), s(Y, X) = log p(Y|X) / lp(Y) + cp(X; Y), where
cp(X; Y) = beta * sum_i log(min(sum_t a_t,i, 1)) punishes source words that the output's attention
has covered less than once (see ``coverage_penalty``). Beam search ranks its finished hypotheses
by that score; which ones stay alive is still decided by their log-probabilities.

With a vocabulary shortlist (attnmt.translation.shortlist) the output layer scores the ids of
``vocabulary`` only: a step's log-probabilities then have one column per id of it, and the
searches map the columns they choose back to token ids (``vocabulary[column]``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor

from attnmt.core.config import DecodingConfig
from attnmt.core.errors import AttnmtError
from attnmt.data.subwords import BOS, EOS, PAD
from attnmt.seq2seq.base import EncoderDecoder, StepOutput
from attnmt.seq2seq import processors
from attnmt.seq2seq.processors import processed_step, started
from attnmt.seq2seq.processors import sampler as sampler  # (where sampling's callers found it)

if TYPE_CHECKING:
    from attnmt.seq2seq.prefix import Prefixes


class DecodingStopped(Exception):
    """A search or trace stopped between two decoder steps because its caller's ``stop()`` said so
    (the server's time limit): its work so far is dropped."""

    def __init__(self, steps: int):
        super().__init__(f"decoding stopped when told, after {steps} decoder step{'s' * (steps != 1)}")
        self.steps = steps


def stop_now(stop: Callable[[], bool] | None, steps: int):
    """DecodingStopped after ``steps`` decoder steps if ``stop`` (when given) says so."""
    if stop is not None and stop():
        raise DecodingStopped(steps)


@dataclass
class Hypothesis:
    tokens: list[int]  # output ids, ending in EOS (written at the length limit if not before)
    score: float  # log_prob / length penalty
    log_prob: float
    attention: Tensor | None  # (len(tokens), source length incl. EOS), None without attention


@dataclass
class BeamNode:
    """One candidate that beam search looked at: the tree of a sentence is the list of them."""

    id: int
    parent: int | None
    token: int
    log_prob: float  # of the whole prefix
    step: int
    status: str  # "root", "kept" (stays in the beam), "finished" (ended in EOS), "pruned"
    met: int | None = None  # constrained search: the constraint tokens written by then (its bank)


# One candidate of a step as the search tree records it: (live row j it extends, token, score,
# status, met). (Not attnmt.seq2seq.results.Candidate, a translation's candidate.)
TreeCandidate = tuple[int, int, float, str, "int | None"]


class BeamRecorder:
    """Records the search tree of each sentence: an observer of the eager loop (``run_eager``: each
    step's candidates, as the strategy gives them, ``tree_step``), or of the fixed-shape one
    (fast_decoding.TreeBuffers, replayed into it at the end); pass one to ``beam_search(record=...)``."""

    def __init__(self, batch: int, beam: int):
        self.trees = [[BeamNode(0, None, BOS, 0.0, 0, "root")] for _ in range(batch)]
        self.row_nodes = [[0] * beam for _ in range(batch)]  # the tree node of each live row of each sentence
        self.beam = beam

    def begin(self, memory):
        pass

    def observe(self, t: int, step: StepOutput, strategy):
        self.add(t, strategy.tree_step())

    def add(self, t: int, groups: list[tuple[int, list[TreeCandidate]]]):
        """Step t's candidates of each sentence (sentence, its candidates; j: its live row they
        extend): the "kept" ones, in order, become the sentence's live rows of step t+1."""
        for sentence, candidates in groups:
            tree, nodes, kept = self.trees[sentence], self.row_nodes[sentence], []
            for j, token, score, status, met in candidates:
                tree.append(BeamNode(len(tree), nodes[j], token, score, t + 1, status, met))
                if status == "kept":
                    kept.append(len(tree) - 1)
            self.row_nodes[sentence] = kept + [0] * (self.beam - len(kept))


def length_penalty(length: int, alpha: float) -> float:
    return ((5.0 + length) / 6.0) ** alpha


# A source word's coverage below this counts as this (a word an attention window hid: 0).
COVERAGE_FLOOR = 1e-6
NO_COVERAGE = (
    "a coverage penalty (decoding.coverage_penalty) sums the attention weights: this model "
    "has no attention (attention: none); set coverage_penalty: 0"
)


def coverage_penalty(attention: Tensor, beta: float) -> float:
    """cp(X; Y) = beta * sum_i log(min(sum_t a_t,i, 1)) (Wu et al. 2016): ``attention`` (output
    tokens, source positions) a hypothesis' weights, each column summed into how much source
    position i was attended over the whole output. A word covered at least once costs nothing;
    one the output left out (under-translation) costs beta * log(its coverage) < 0. Never above
    0, and it can only rise as the output grows (beam search's stopping rule relies on both)."""
    coverage = attention.float().sum(0).clamp(COVERAGE_FLOOR, 1.0)
    return beta * float(coverage.log().sum())


def max_output_lengths(src_lengths: Tensor, ratio: float, offset: int) -> list[int]:
    """Each sentence's length limit: its output has at most ratio * n + offset tokens, the EOS that
    ends it included (``ended_at_limit``)."""
    return [max(1, int(ratio * n + offset)) for n in src_lengths.tolist()]


def output_limits(
    src_lengths: Tensor,
    settings: DecodingConfig,
    prefixes: Prefixes | None = None,
    constraints: list | None = None,
    max_length: int | None = None,
) -> list[int]:
    """The length limit of each sentence of every search (the one place it is computed):
    ``max_output_lengths`` of the settings' max_length_ratio and max_length_offset (or
    ``max_length`` for all), and at least room for what the output must hold with
    max_length_offset more tokens: its prefix's tokens and the characters of the word it spells (a
    word's characters bound its pieces; attnmt.seq2seq.prefix), and its constraints' tokens
    (attnmt.seq2seq.constraints: a list of phrases per sentence)."""
    offset = settings.max_length_offset
    if max_length is None:
        limits = max_output_lengths(src_lengths, settings.max_length_ratio, offset)
    else:
        limits = [max_length] * src_lengths.numel()
    if constraints is not None:
        limits = [max(limit, sum(map(len, phrases)) + offset) for limit, phrases in zip(limits, constraints)]
    if prefixes is not None:
        words = prefixes.words or [""] * len(prefixes.tokens)
        limits = [max(limit, len(p) + len(word) + offset) for limit, p, word in zip(limits, prefixes.tokens, words)]
    return limits


def ended_at_limit(log_probs: Tensor, at_limit: Tensor) -> Tensor:
    """A step's log-probabilities (rows, columns) with every column but EOS's at -inf in the rows
    ``at_limit`` (rows,) bool: an output ends at its length limit by writing EOS, as fairseq's
    search ends it, so that its score counts the model's log-probability of ending there, as
    Translator.score counts it for the same text. (Cut without EOS, a hypothesis would rank above
    those that paid for their end: a model that never ends would seem the most confident.) Under
    a shortlist, EOS keeps its column (attnmt.seq2seq.shortlist)."""
    not_eos = torch.arange(log_probs.size(1), device=log_probs.device) != EOS
    return log_probs.masked_fill(at_limit.unsqueeze(1) & not_eos, float("-inf"))


def memory_lengths(memory) -> list[int]:
    """The real positions of each sentence in the encoder's output: the source length, or fewer
    when the encoder shortens its input (speech)."""
    return memory.mask.sum(1).tolist()


def hypothesis_of(
    tokens: list[int], log_prob: float, attention: Tensor | None, alpha: float, src_length: int, beta: float = 0.0
) -> Hypothesis:
    """A hypothesis of ``tokens``, cut after its first EOS, with its attention rows over the real
    positions of the encoder's output, scored with length penalty ``alpha`` and coverage penalty
    ``beta``."""
    if EOS in tokens:
        tokens = tokens[: tokens.index(EOS) + 1]
    if attention is not None:
        attention = attention[: len(tokens), :src_length].clone()
    score = log_prob / length_penalty(len(tokens), alpha)
    if beta:
        if attention is None:
            raise AttnmtError(NO_COVERAGE)
        score += coverage_penalty(attention, beta)
    return Hypothesis(tokens, score, log_prob, attention)


def token_ids(columns: Tensor, vocabulary: Tensor | None) -> Tensor:
    """The token ids of columns of a step's log-probabilities: the columns themselves, or under a
    shortlist the ids of ``vocabulary`` they stand for."""
    return columns if vocabulary is None else vocabulary[columns]


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
    observers: tuple = (),
    processors: tuple = (),
) -> list[list[Hypothesis]]:
    """At each step take the most probable token. A sentence stops at EOS or its length limit
    and leaves the batch, so later steps compute only the sentences still going. ``vocabulary``:
    the ids of a shortlist that the output layer is restricted to (see ``decode``); ``window``:
    the attention window of every step (decoding.attention_window; attnmt.seq2seq.base).
    ``pick``: the column chosen in each row of a step's log-probabilities instead of the most
    probable (processors.sampler: sampling's filters as processors, then a draw; ``choose``);
    the score stays the model's log-probability of the tokens.
    ``beta``: the coverage penalty added to each score (one hypothesis per sentence: it changes no
    output). ``stop``: as beam_search's. ``observers``, ``processors``: see ``run_eager`` (the trace; a
    prefix)."""
    memory = model.encode(src, src_lengths, window)
    greedy = Greedy(GreedySearch(memory, max_lengths, alpha, vocabulary, beta, pick))
    return checked_search(run_eager(greedy, model, memory, vocabulary, stop, observers, processors))


@dataclass
class GreedyLoop:
    """Greedy search between two steps, in either executor: the rows of the next step and what
    each sentence has written. The fixed-shape executor keeps a row for every sentence until all
    have ended; the eager one keeps those still going (``Greedy.next_batch``), so the sentence of
    each row is in ``rows`` and what belongs to a sentence is indexed by sentence, not by row."""

    step: Tensor | int  # the step t about to run: (1,) on the device (fixed shapes), or an int (eager)
    prev: Tensor  # (rows,) the token each row wrote last (BOS at first)
    state: Any  # the rows' decoder state (None in the eager loop, which holds it)
    rows: Tensor  # (rows,) the sentence of each row
    log_prob: Tensor  # (B,) each sentence's log-probability of the tokens written so far
    length: Tensor  # (B,) its tokens written so far
    ended: Tensor  # (B,) True once it wrote EOS or reached its length limit


class GreedySearch:
    """The strategy of greedy search, and of sampling with ``pick``, the one of both executors: from
    a step's log-probabilities, each row's token (the most probable, or ``pick``'s draw:
    processors.choose; EOS at the length limit: ``ended_at_limit``), written into the ``History``
    and added to its sentence's log-probability and length (``advance``), then each sentence's
    hypothesis (``results``). Each executor binds it to its loop: ``Greedy`` (the eager loop, rows
    leaving as their sentences end) and fast_decoding._Greedy (every row kept, masked)."""

    def __init__(
        self,
        memory,
        max_lengths: list[int],
        alpha: float,
        vocabulary: Tensor | None = None,
        beta: float = 0.0,
        pick: Callable[[Tensor], Tensor] | None = None,
    ):
        device = memory.mask.device
        self.batch = len(max_lengths)
        self.alpha = alpha
        self.vocabulary = vocabulary
        self.beta = beta
        self.pick = pick
        self.max_lengths = max_lengths
        self.shortest = min(max_lengths)
        self.memory = memory  # (of every sentence: its real positions, read at the end)
        self.limits = torch.tensor(max_lengths, device=device)
        self.history = History(max(max_lengths), self.batch, device)

    def start(self, state, step: Tensor | int) -> GreedyLoop:
        """The loop before the first step (``step``: 0, as the executor counts its steps), a row a
        sentence."""
        batch, device = self.batch, self.limits.device
        return GreedyLoop(
            step,
            torch.full((batch,), BOS, dtype=torch.long, device=device),
            state,
            torch.arange(batch, device=device),
            torch.zeros(batch, device=device),
            torch.zeros(batch, dtype=torch.long, device=device),
            torch.zeros(batch, dtype=torch.bool, device=device),
        )

    def advance(self, loop: GreedyLoop, out: StepOutput) -> GreedyLoop:
        """Step t's token of each row, and the loop of step t+1 (the same rows; reads no value back)."""
        t, rows = loop.step, loop.rows
        limits = self.limits[rows]
        at_limit = limits <= t + 1
        log_probs = out.log_probs
        # (an int t, the eager loop's, tells the host that no row has reached its limit yet)
        if not isinstance(t, int) or t + 1 >= self.shortest:
            log_probs = ended_at_limit(log_probs, at_limit)  # (at its length limit a sentence writes EOS)
        column, best = processors.choose(log_probs, self.pick)  # (the one choice of both executors)
        token = token_ids(column, self.vocabulary)  # (a shortlist's column -> its id)
        going = ~loop.ended[rows]  # (an ended sentence's row, kept by the fixed shapes, adds nothing)
        self.history.write(t, token, None, out.weights, columns=rows)
        return GreedyLoop(
            t + 1,
            token,
            out.state,
            rows,
            loop.log_prob.index_add(0, rows, torch.where(going, best.to(loop.log_prob.dtype), 0.0)),
            loop.length.index_add(0, rows, going.long()),
            loop.ended.index_put((rows,), ~going | (token == EOS) | at_limit),
        )

    def results(self, loop: GreedyLoop, steps: int) -> list[list[Hypothesis]]:
        """Each sentence's hypothesis after ``steps`` steps: its tokens and attention read from the
        history, cut at its length."""
        tokens = self.history.tokens[:steps].t().tolist()  # (B, steps)
        weights = self.history.weights
        attention = None if weights is None else weights[:steps].transpose(0, 1).float().cpu()
        lengths, log_probs = loop.length.tolist(), loop.log_prob.tolist()
        widths = memory_lengths(self.memory)
        return [
            [
                hypothesis_of(
                    tokens[i][:length],
                    log_probs[i],
                    None if attention is None else attention[i],
                    self.alpha,
                    widths[i],
                    self.beta,
                )
            ]
            for i, length in enumerate(lengths)
        ]


class Greedy:
    """GreedySearch in the eager loop (``run_eager``): one row per sentence still going. A sentence
    that has ended leaves the batch (``next_batch``), so later steps compute only the others:
    on a CPU, where a step's time grows with its rows, this is what makes greedy search fast."""

    def __init__(self, search: GreedySearch):
        self.search = search
        self.max_lengths = search.max_lengths
        self.loop = search.start(None, 0)  # (the decoder state is the loop's: run_eager)
        self.steps = 0

    @property
    def prev(self) -> Tensor:
        """The token each row wrote last (what an observer reads of the step just chosen)."""
        return self.loop.prev

    def advance(self, t: int, step: StepOutput, vocabulary: Tensor | None) -> Tensor:
        """Step t's token of each row; returns which rows go on (not EOS, not at the length limit:
        a model may give EOS no probability)."""
        self.loop = replace(self.search.advance(self.loop, step), state=None)
        self.steps = t + 1
        return ~self.loop.ended[self.loop.rows]

    def next_batch(self, going: Tensor, state, memory):
        """The rows of step t+1: those going (a finished sentence's row leaves the batch)."""
        if bool(going.all()):
            return state, memory
        kept = going.nonzero().view(-1)
        self.loop = replace(self.loop, prev=self.loop.prev[kept], rows=self.loop.rows[kept])
        return state.select(kept), memory.select(kept)

    def results(self) -> list[list[Hypothesis]]:
        return self.search.results(self.loop, self.steps)


class History:
    """What a search's steps wrote, to read its hypotheses back from (the one history of both
    executors): for each step t, the attention weights of its rows, and for each row of step t+1
    its token and the row of step t it extends (its parent; beam search). Hypotheses are read back
    when they finish (``read``; at the end, the fixed-shape executor's tables: ``read_back``),
    following the parents: copying every live hypothesis' tokens and weights forward at every step
    would cost O(length^2).

    Two layouts. Eager beam search's batch shrinks as sentences finish and its rows' parents are
    rows of the step before: it adds each step's tensors to lists (``add_weights``, then
    ``add_rows``). ``History(steps, rows, device)`` makes buffers for the longest output instead,
    which ``write`` fills at the step counter (a tensor: a captured graph writes there): the
    fixed-shape executor's rows, and greedy search's sentences in either executor (a row writes
    into its sentence's column); the buffer of weights is made at the first step (its weights
    give their type and width; None without attention)."""

    def __init__(self, steps: int | None = None, rows: int = 0, device: torch.device | None = None):
        self.weights: list[Tensor | None] | Tensor | None  # step t: (rows of step t, S)
        self.tokens: list[Tensor] | Tensor  # step t: the token of each row of step t+1
        self.parents: list[Tensor] | Tensor  # step t: the row of step t that each row of step t+1 extends
        if steps is None:
            self.weights, self.tokens, self.parents = [], [], []
        else:
            self.tokens = torch.zeros(steps, rows, dtype=torch.long, device=device)
            self.parents = torch.zeros(steps, rows, dtype=torch.long, device=device)
            self.weights = None

    def add_weights(self, weights: Tensor | None):
        """Eager: step t's attention weights (rows of step t, S), or None."""
        self.weights.append(weights)

    def add_rows(self, tokens: Tensor, parents: Tensor):
        """Eager: the rows of step t+1, their tokens and parents (rows of step t+1,)."""
        self.tokens.append(tokens)
        self.parents.append(parents)

    def write(
        self,
        t: Tensor | int,
        tokens: Tensor,
        parents: Tensor | None,
        weights: Tensor | None,
        columns: Tensor | None = None,
    ):
        """Into the buffers: step t's tokens and parents of the rows of step t+1 (rows,; no parents:
        greedy search) and its weights (rows, S), at ``t``: (1,), a tensor on the device, or the
        eager loop's int. ``columns``: the buffers' column of each row (greedy search's sentence
        of each row, whose rows leave the eager loop as they end); None: every column in order."""
        if weights is not None and self.weights is None:
            self.weights = weights.new_zeros(self.tokens.size(0), self.tokens.size(1), weights.size(1))
        if columns is not None:
            self.tokens[t, columns] = tokens
            if weights is not None:
                self.weights[t, columns] = weights
            return
        self.tokens.index_copy_(0, t, tokens.unsqueeze(0))
        if parents is not None:
            self.parents.index_copy_(0, t, parents.unsqueeze(0))
        if weights is not None:
            self.weights.index_copy_(0, t, weights.unsqueeze(0))

    def read(self, t: int, rows: Tensor, tokens: Tensor) -> tuple[list[list[int]], Tensor | None]:
        """The hypotheses of ``rows`` of step t, each extended by its token of ``tokens`` at step
        t: their tokens, and their attention (n, t+1, S) or None."""
        token_ids, attention = self.read_back(None, rows, tokens, t + 1)
        return token_ids.tolist(), None if attention is None else attention.float()

    def read_back(self, ends: Tensor | None, rows: Tensor, tokens: Tensor, steps: int) -> tuple[Tensor, Tensor | None]:
        """The tokens (..., steps) and attention (..., steps, S) of hypotheses (any shape ...) that
        wrote their last token ``tokens`` at step ``ends`` (None: all at the last of ``steps``),
        extending ``rows`` of that step, from each one's end back to the first step along the
        parents. Positions after a hypothesis' end hold what it does not use."""
        weights = self.weights
        if isinstance(weights, list):
            weights = None if not weights or weights[0] is None else weights
        row, token_columns, weight_columns = rows, [], []  # (from the last step back)
        for t in range(steps - 1, -1, -1):
            if ends is not None:  # (where one ends at t, it is read from there on)
                row = torch.where(ends == t, rows, row)
            if weights is not None:
                weight_columns.append(weights[t][row])
            if t > 0:
                token_columns.append(self.tokens[t - 1][row])
                row = self.parents[t - 1][row]
        attention = None if weights is None else torch.stack(weight_columns[::-1], dim=-2)
        if ends is None:
            return torch.stack(token_columns[::-1] + [tokens], dim=-1), attention
        written = torch.stack(token_columns[::-1] + [torch.zeros_like(rows)], dim=-1)
        return written.scatter_(-1, ends.unsqueeze(-1), tokens.unsqueeze(-1)), attention


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
    observers: tuple = (),
    processors: tuple = (),
) -> list[list[Hypothesis]]:
    """Batched beam search: every sentence keeps ``beam`` live hypotheses as rows of one batch.

    A hypothesis that ends in EOS leaves the beam for the finished list of its sentence. A
    sentence is done when no live hypothesis can still beat its ``n_best`` best finished ones
    (their scores only fall as they grow: see ``cannot_improve``), when it has ``beam`` finished
    hypotheses and none of the live ones would beat them were it to end now, or at its length
    limit (where its live hypotheses can only write EOS, and finish: ``ended_at_limit``). Its rows
    then leave the batch, so later steps only compute what is still open. (Stopping at ``beam``
    finished hypotheses alone, as many searches do, can return a worse result than greedy search:
    a confident model's unlikely hypotheses end early, fill the finished list, and stop the
    sentence before its likely one has ended.)
    With ``record``, every candidate considered is added to the sentence's search tree (an
    observer of the loop, as each of ``observers``; ``processors``: see ``run_eager``).
    ``vocabulary``: the ids of a shortlist that the output layer is restricted to (see ``decode``);
    ``window``: the attention window of every step (decoding.attention_window; attnmt.seq2seq.base).
    ``stop``: asked after each decoder step that leaves the search unfinished; when it says True,
    DecodingStopped is raised (a server's time limit: torch cannot interrupt a step, but the search
    need not take another).
    ``beta``: the coverage penalty of the finished hypotheses' scores (``coverage_penalty``); the
    stopping rules stay exact, since it is never above 0.
    """
    if n_best > beam:
        raise ValueError(f"n_best ({n_best}) cannot exceed the beam size ({beam})")
    memory = model.encode(src, src_lengths, window)
    beams = Beams(src.size(0), beam, n_best, alpha, max_lengths, memory_lengths(memory), src.device, beta)
    observers = observers if record is None else (*observers, record)
    return checked_search(run_eager(beams, model, memory, vocabulary, stop, observers, processors))


def run_eager(
    strategy,
    model: EncoderDecoder,
    memory,
    vocabulary: Tensor | None = None,
    stop: Callable[[], bool] | None = None,
    observers: tuple = (),
    processors: tuple = (),
) -> list[list[Hypothesis]]:
    """The eager executor's search loop, the one of every textbook search: from the encoder's
    ``memory``, each step runs the model on the rows ``strategy`` keeps (Greedy, Beams,
    constraints._ConstrainedBeams), ``processors`` restrict its log-probabilities (a prefix:
    processors.processed_step), and the strategy chooses the rows' next tokens, its history
    capturing the step's attention (``advance``: which groups go on), and the rows of the next step
    (``next_batch``: the finished ones leave the batch, the processors' states with them). Each of
    ``observers`` sees the memory (``begin(memory)``) and every step (``observe(t, step,
    strategy)``, after the choice): the trace, the beam tree (BeamRecorder).
    ``stop``: asked after each step that leaves the search unfinished; DecodingStopped when it
    says True. Returns the strategy's results (unchecked: ``checked_search``)."""
    state = started(model.init_state(memory), processors, memory, fixed=False)
    for observer in observers:
        observer.begin(memory)
    for t in range(max(strategy.max_lengths)):
        step = processed_step(model, processors, t, strategy.prev, state, memory)
        going = strategy.advance(t, step, vocabulary)
        for observer in observers:
            observer.observe(t, step, strategy)
        if not bool(going.any()):
            break
        stop_now(stop, t + 1)
        state, memory = strategy.next_batch(going, step.state, memory)
    return strategy.results()


class Beams:
    """The state of a batched beam search between two steps: the sentence of each group of rows
    (``active``), the live hypotheses' scores (n, width) and last tokens (``prev``, n*width), the
    finished hypotheses of every sentence, and the ``History`` to read hypotheses back from: the
    strategy of beam search in the eager loop (``run_eager``). Each step: ``advance`` (``extend``,
    ``going``), then ``next_batch`` (see beam_search)."""

    def __init__(
        self,
        batch: int,
        k: int,
        n_best: int,
        alpha: float,
        max_lengths: list[int],
        memory_widths: list[int],
        device: torch.device,
        beta: float = 0.0,
    ):
        self.k = k
        self.n_best = n_best
        self.alpha = alpha
        self.beta = beta
        self.max_lengths = max_lengths
        self.memory_widths = memory_widths
        self.device = device
        # The k hypotheses of a sentence would start identical: the first step runs on one row per
        # sentence (width 1), and its best extensions then fill the sentence's k rows.
        self.width = 1
        self.scores = torch.zeros(batch, self.width, device=device)
        self.prev = torch.full((batch,), BOS, dtype=torch.long, device=device)
        self.finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
        self.active = torch.arange(batch, device=device)  # sentence id of each group of k rows
        self.history = History()

    def advance(self, t: int, step: StepOutput, vocabulary: Tensor | None) -> Tensor:
        """Step t's choice (``extend``): which sentences go on (``going``)."""
        self.history.add_weights(step.weights)  # (before the choice: the hypotheses that end read it)
        sentences, self.source_rows = self.extend(t, step, vocabulary)
        return self.going(t, sentences)

    def extend(self, t: int, step: StepOutput, vocabulary: Tensor | None) -> tuple[list[int], Tensor]:
        """Step t's 2k best candidates of each sentence: those among its best k that end in EOS
        finish (at the sentence's length limit, all of its live ones), the best k that do not stay
        alive (``prev``, ``scores``). Returns the sentence of each group and, for each live row
        (n*k,), the row of batch t it extends."""
        k, device = self.k, self.device
        n = self.active.numel()
        sentences = self.active.tolist()
        choice = beam_choice(self.scores, self.log_probs_at(t, step, sentences), k, vocabulary)
        # (n, 2k): the row of batch t that each candidate extends
        source_rows = torch.arange(n, device=device).unsqueeze(1) * self.width + choice.origin
        if bool(choice.ends.any()):  # EOS among the best k candidates: finished hypotheses
            ends = choice.ends
            groups = ends.nonzero()[:, 0].tolist()
            tokens, log_probs = choice.token[:, :k][ends], choice.score[:, :k][ends].tolist()
            self._finish(t, [sentences[g] for g in groups], source_rows[:, :k][ends], tokens, log_probs)
        self.last_step = sentences, choice  # (for the tree: tree_step)
        source_rows, self.prev = (
            source_rows.gather(1, choice.alive).view(-1),
            choice.token.gather(1, choice.alive).view(-1),
        )
        self.scores = choice.score.gather(1, choice.alive)  # (n, k)
        return sentences, source_rows

    def tree_step(self) -> list[tuple[int, list[TreeCandidate]]]:
        """The last step's 2k candidates of each sentence, as the search tree adds them
        (BeamRecorder.add): finished, kept or pruned, those at -inf left out."""
        sentences, choice = self.last_step
        origin, token, score = choice.origin.tolist(), choice.token.tolist(), choice.score.tolist()
        finished = F.pad(choice.ends, (0, self.k)).tolist()
        alive = torch.zeros_like(choice.token, dtype=torch.bool).scatter(1, choice.alive, True).tolist()
        groups = []
        for g, sentence in enumerate(sentences):
            candidates = []
            for j in range(len(origin[g])):
                if score[g][j] == float("-inf"):
                    continue
                status = "finished" if finished[g][j] else "kept" if alive[g][j] else "pruned"
                candidates.append((origin[g][j], token[g][j], score[g][j], status, None))
            groups.append((sentence, candidates))
        return groups

    def log_probs_at(self, t: int, step: StepOutput, sentences: list[int]) -> Tensor:
        """Step t's log-probabilities, those of the rows of sentences at their length limit ended
        (``ended_at_limit``): there each live hypothesis finishes with EOS."""
        at_limit = [self.max_lengths[sentence] <= t + 1 for sentence in sentences]
        if not any(at_limit):
            return step.log_probs
        rows = torch.tensor(at_limit, device=self.device).repeat_interleave(self.width)
        return ended_at_limit(step.log_probs, rows)

    def going(self, t: int, sentences: list[int]) -> Tensor:
        """Which sentences go on to step t+1 (n,): not those at their length limit, nor those whose
        n best no live hypothesis can enter, nor those with k finished hypotheses that no live one
        would beat were it to end now."""
        finished, n_best, alpha, max_lengths = self.finished, self.n_best, self.alpha, self.max_lengths
        best_live = self.scores.max(dim=1).values.tolist()
        penalty_now = length_penalty(t + 1, alpha)
        done = []
        for g, sentence in enumerate(sentences):
            scores = [h.score for h in finished[sentence]]
            has_n_best = len(scores) >= n_best
            nth_best = sorted(scores, reverse=True)[n_best - 1] if has_n_best else -math.inf
            done.append(
                beam_done(
                    t + 1 >= max_lengths[sentence],
                    has_n_best,
                    nth_best,
                    best_live[g],
                    len(scores) >= self.k,
                    length_penalty(max_lengths[sentence], alpha),
                    penalty_now,
                )
            )
        return ~torch.tensor(done, device=self.device)

    def next_batch(self, keep: Tensor, state, memory):
        """The batch of step t+1: the rows of the sentences in ``keep`` (a finished sentence's rows
        leave it), their decoder state and memory. Records their tokens and parents in the
        history."""
        k, device, n, source_rows = self.k, self.device, keep.numel(), self.source_rows
        groups = torch.arange(n, device=device)
        if not bool(keep.all()):  # drop finished sentences from the batch
            groups = keep.nonzero().view(-1)
            rows = (groups.view(-1, 1) * k + torch.arange(k, device=device)).view(-1)
            self.active, self.scores, self.prev = self.active[keep], self.scores[keep], self.prev[rows]
            source_rows = source_rows[rows]
        self.history.add_rows(self.prev, source_rows)
        state = state.select(source_rows)
        if self.width < k or groups.numel() < n:
            # the memory of each sentence, for its k rows from now on
            memory = memory.for_beams(groups, self.width, k)
        self.width = k
        return state, memory

    def results(self) -> list[list[Hypothesis]]:
        """Each sentence's n best finished hypotheses, best first."""
        return [sorted(hyps, key=lambda h: -h.score)[: self.n_best] for hyps in self.finished]

    def _finish(
        self,
        t: int,
        sentences: list[int],
        rows: Tensor,
        tokens: Tensor,
        log_probs: list[float],
        into: list[list[Hypothesis]] | None = None,
    ):
        """The hypotheses of ``rows`` of batch t, extended by ``tokens``, join their sentences'
        finished ones (or their lists of ``into``)."""
        token_lists, attention = self.history.read(t, rows, tokens)
        into = self.finished if into is None else into
        for i, (sentence, log_prob) in enumerate(zip(sentences, log_probs)):
            matrix = None if attention is None else attention[i]
            into[sentence].append(
                hypothesis_of(token_lists[i], log_prob, matrix, self.alpha, self.memory_widths[sentence], self.beta)
            )


def cannot_improve(has_n_best, nth_best, best_live, penalty):
    """Whether no live hypothesis can still enter a sentence's n best (Python values of one
    sentence, or tensors of every sentence): ``has_n_best``, it has n finished hypotheses, the
    n-th best scoring ``nth_best``; ``best_live`` the best live log-probability. A live hypothesis'
    log-probability only falls as it grows; divided by the length penalty, the best score it can
    reach is its log-probability over the penalty of the longest output allowed (``penalty`` of
    the length limit; of the current length instead, whether it would beat them were it to end
    now). A coverage penalty, never above 0, leaves that bound true."""
    return has_n_best & (nth_best >= best_live / penalty)


def beam_done(at_limit, has_n_best, nth_best, best_live, k_finished, limit_penalty, penalty_now):
    """Beam search's stopping rules, the one place they are written (Python values of one
    sentence, or tensors of every sentence; see ``cannot_improve``): a sentence is done at its
    length limit (``at_limit``), when no live hypothesis can reach its n best (``limit_penalty``:
    the length penalty of its limit), or when k of its hypotheses have finished (``k_finished``)
    and no live one would beat its n best were it to end now (``penalty_now``). (Stopping at k
    finished alone can return a worse result than greedy search: see ``beam_search``.)"""
    return (
        at_limit
        | cannot_improve(has_n_best, nth_best, best_live, limit_penalty)
        | (k_finished & cannot_improve(has_n_best, nth_best, best_live, penalty_now))
    )


def checked_search(results: list[list[Hypothesis]]) -> list[list[Hypothesis]]:
    """Every sentence has a hypothesis, with a score that is a number."""
    for hypotheses in results:
        if not hypotheses or any(math.isnan(h.score) for h in hypotheses):
            raise AttnmtError(
                "the model computed scores that are not numbers (NaN): its weights are damaged or its training diverged"
            )
    return results


@dataclass
class BeamChoice:
    """A beam search step's choice in each of n sentences (``beam_choice``)."""

    score: Tensor  # (n, 2k) the sentence's 2k best candidates' log-probabilities, best first
    origin: Tensor  # (n, 2k) the row of the sentence each extends (0 .. width-1)
    token: Tensor  # (n, 2k) its token id
    ends: Tensor  # (n, k) which of the best k end in EOS: they finish
    alive: Tensor  # (n, k) the positions among the 2k of the best k that do not end in EOS: they stay


def beam_choice(scores: Tensor, log_probs: Tensor, k: int, vocabulary: Tensor | None) -> BeamChoice:
    """Beam search's choice of a step, the one of both executors (``Beams``, fast_decoding.FixedBeam;
    fairseq's Search.step): each sentence's 2k best candidates (``best_candidates``), those among
    its best k that end in EOS, which finish, and its best k that do not, which stay alive.
    ``scores`` (n, width) the live hypotheses', ``log_probs`` (n*width, columns) the step's, the
    rows at their length limit already ended (``ended_at_limit``: there all of a sentence's live
    hypotheses finish); ``vocabulary``: a shortlist's ids of the columns. Reads no value back."""
    score, origin, column = best_candidates(scores, log_probs, k)
    token = token_ids(column, vocabulary)
    is_eos = token == EOS
    ends = is_eos[:, :k] & (score[:, :k] > float("-inf"))
    # (a row has one EOS at most, and a sentence k rows at most: k of the 2k do not end)
    return BeamChoice(score, origin, token, ends, first_true(~is_eos, k))


def first_true(mask: Tensor, k: int) -> Tensor:
    """The positions of the first k True values of each row of ``mask``, in order (a stable sort
    puts them first: a shape fixed in advance, unlike a boolean mask's selection)."""
    return mask.int().sort(dim=1, descending=True, stable=True).indices[:, :k]


def best_candidates(scores: Tensor, log_probs: Tensor, k: int) -> tuple[Tensor, Tensor, Tensor]:
    """The 2k best one-token extensions of the live hypotheses of n sentences (2k: at most k of
    them end in EOS). scores (n,width): the hypotheses' scores (width 1 at the first step, then k),
    log_probs (n*width,V) -> the candidates' scores (n,2k), the row each extends (0..width-1)
    and its token.

    Only a row's own 2k best tokens can be among its sentence's 2k best, so each row is cut to
    those first: the sentence's top-k then looks at k * 2k candidates instead of k * vocabulary,
    and the scores are added to those only.
    """
    (n, width), per_row = scores.shape, min(2 * k, log_probs.size(1))
    row_log_probs, row_tokens = log_probs.topk(per_row, dim=1)  # (n*width, per_row)
    candidates = (scores.view(-1, 1) + row_log_probs).view(n, width * per_row)
    row_tokens = row_tokens.view(n, width * per_row)
    if candidates.size(1) < 2 * k:  # first step, vocabulary under 2k: pad with impossible ones
        missing = 2 * k - candidates.size(1)
        candidates = F.pad(candidates, (0, missing), value=float("-inf"))
        row_tokens = F.pad(row_tokens, (0, missing), value=PAD)
    top_scores, top_ids = candidates.topk(2 * k, dim=1)
    origin = (top_ids // per_row).clamp_(max=width - 1)  # (padding: any row of the sentence)
    return top_scores, origin, row_tokens.gather(1, top_ids)
