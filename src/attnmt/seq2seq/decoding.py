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


def with_recorder(observers: tuple, record: BeamRecorder | None) -> tuple:
    """The eager loop's observers: ``observers`` and, where given, the ``record`` of a beam search."""
    return observers if record is None else (*observers, record)


def records_tree(observers: tuple) -> bool:
    """Whether a beam search's strategy keeps its tree's buffers (TreeBuffers): a BeamRecorder
    watches it, given as ``record`` or among the observers."""
    return any(isinstance(observer, BeamRecorder) for observer in observers)


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
        self.history.write(t, token, None, out.weights, rows)
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
    """What a search's steps wrote, to read its hypotheses back from at the end (the one history of
    both executors): for each step t, the attention weights of its rows, and for each row of step
    t+1 its token and the row of step t it extends (its parent; beam search), in buffers made for
    the longest output. Each row writes at its slot: greedy search's sentence, beam search's
    sentence * k + j, so that a row that leaves the eager loop leaves what it wrote in place.
    Hypotheses are read back following the parents (``read_back``): copying every live
    hypothesis' tokens and weights forward at every step would cost O(length^2). The buffer of
    weights is made at the first step (its weights give their type and width; None without
    attention)."""

    def __init__(self, steps: int, slots: int, device: torch.device):
        self.tokens = torch.zeros(steps, slots, dtype=torch.long, device=device)  # step t: of each row of step t+1
        self.parents = torch.zeros(steps, slots, dtype=torch.long, device=device)  # its parent's slot at step t
        self.weights: Tensor | None = None  # step t: (slots, S)

    def write(
        self,
        t: Tensor | int,
        tokens: Tensor,
        parents: Tensor | None,
        weights: Tensor | None,
        slots: Tensor,
        weight_slots: Tensor | None = None,
    ):
        """Step t's tokens and parents (their slots; None: greedy search) of the rows of step t+1,
        at ``slots``, and its weights (rows, S) at ``weight_slots`` (None: ``slots``): ``t`` (1,), a
        tensor on the device (a captured graph writes at its step counter), or the eager loop's int."""
        if weights is not None and self.weights is None:
            self.weights = weights.new_zeros(self.tokens.size(0), self.tokens.size(1), weights.size(1))
        self.tokens[t, slots] = tokens
        if parents is not None:
            self.parents[t, slots] = parents
        if weights is not None:
            self.weights[t, slots if weight_slots is None else weight_slots] = weights

    def read_back(self, ends: Tensor | None, rows: Tensor, tokens: Tensor, steps: int) -> tuple[Tensor, Tensor | None]:
        """The tokens (..., steps) and attention (..., steps, S) of hypotheses (any shape ...) that
        wrote their last token ``tokens`` at step ``ends`` (None: all at the last of ``steps``),
        extending the slots ``rows`` of that step, from each one's end back to the first step along the
        parents. Positions after a hypothesis' end hold what it does not use."""
        weights = self.weights
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
    memory = model.encode(src, src_lengths, window)
    observers = with_recorder(observers, record)
    search = BeamSearch(memory, max_lengths, beam, n_best, alpha, vocabulary, beta, record=records_tree(observers))
    return checked_search(run_eager(Beam(search), model, memory, vocabulary, stop, observers, processors))


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
    ``memory``, each step runs the model on the rows ``strategy`` keeps (Greedy, Beam:
    the eager bindings of GreedySearch and BeamSearch), ``processors`` restrict its log-probabilities (a prefix:
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


@dataclass
class Finished:
    """The n best finished hypotheses of each sentence so far, best first (equal scores: the
    first to finish first), and how many have finished in all. Empty slots score -inf."""

    count: Tensor  # (B,) hypotheses finished so far, all of them
    score: Tensor  # (B,n) float64: log_prob / length penalty (+ coverage penalty), as hypothesis_of computes it
    log_prob: Tensor  # (B,n) float64
    end: Tensor  # (B,n) the step at which it ended: it has end + 1 tokens
    row: Tensor  # (B,n) the history's slot of that step it extends
    token: Tensor  # (B,n) its last token

    SLOTS = ("score", "log_prob", "end", "row", "token")


@dataclass
class BeamLoop:
    """Beam search between two steps, in either executor. The rows of a step come in groups, one
    group a sentence still searched (``groups``: its sentence), each group ``width`` rows (1 at the
    first step: a sentence's k hypotheses would start identical; then k). The fixed-shape executor
    keeps every sentence's group to the end, a done one masked; the eager one drops a sentence's
    group once it is done (``Beam.next_batch``). What belongs to a sentence (its table of finished
    hypotheses, whether it is done) is indexed by sentence, and the history by slot, sentence * k
    + j, so that it holds whichever rows leave."""

    step: Tensor | int  # the step t about to run: (1,) on the device (fixed shapes), or an int (eager)
    prev: Tensor  # (rows,) the last token of each live hypothesis (BOS at first)
    state: Any  # the rows' decoder state (None in the eager loop, which holds it)
    groups: Tensor  # (n,) the sentence of each group of rows
    scores: Tensor  # (n, width) the live hypotheses' log-probabilities
    done: Tensor  # (B,) the sentence's search is over
    finished: Finished  # (B, n_best) each sentence's best finished hypotheses
    # (rows, S) each live row's attention summed over its steps (with a coverage penalty only)
    coverage: Tensor | None


class BeamSearch:
    """The strategy of beam search, the one of both executors: a step's choice (``beam_choice``: the
    EOS among each sentence's k best candidates finish, its k best others stay alive), the table
    of each sentence's n best finished hypotheses (``Finished``), the stopping rules
    (``beam_done``), the coverage penalty (each row's attention summed as it goes), the history the
    hypotheses are read back from at the end (``results``) and, with ``record``, the search tree
    (``TreeBuffers``). It reads no value back, so a captured graph runs it. Each executor binds it
    to its loop: ``Beam`` (the eager loop: a done sentence's rows leave the batch) and
    fast_decoding._Beam (every sentence's k rows to the end, masked)."""

    def __init__(
        self,
        memory,
        max_lengths: list[int],
        beam: int,
        n_best: int,
        alpha: float,
        vocabulary: Tensor | None = None,
        beta: float = 0.0,
        record: bool = False,
    ):
        if n_best > beam:
            raise ValueError(f"n_best ({n_best}) cannot exceed the beam size ({beam})")
        device, steps = memory.mask.device, max(max_lengths)
        self.batch = len(max_lengths)
        self.beam = beam
        self.n_best = n_best
        self.alpha = alpha
        self.vocabulary = vocabulary
        self.beta = beta
        self.max_lengths = max_lengths
        self.shortest = min(max_lengths)
        self.masks = memory.mask  # (B, S) each sentence's real positions (the coverage penalty's, the attention's)
        self.limits = torch.tensor(max_lengths, device=device)
        # The length penalties as hypothesis_of computes them (in Python, in float64): of t + 1
        # tokens at index t, and of each sentence's longest output.
        self.penalties = torch.tensor(
            [length_penalty(n, alpha) for n in range(1, steps + 1)], dtype=torch.float64, device=device
        )
        self.limit_penalties = torch.tensor(
            [length_penalty(n, alpha) for n in max_lengths], dtype=torch.float64, device=device
        )
        self.history = History(steps, self.batch * beam, device)
        self.tree = TreeBuffers(steps, self.batch, 2 * beam, device) if record else None

    def start(self, state, step: Tensor | int, rows_per_group: int) -> BeamLoop:
        """The loop before the first step (``step``: 0, as the executor counts its steps), every
        sentence's group of ``rows_per_group`` rows (the first step extends only its first)."""
        batch, device = self.batch, self.limits.device
        rows = batch * rows_per_group
        return BeamLoop(
            step,
            torch.full((rows,), BOS, dtype=torch.long, device=device),
            state,
            torch.arange(batch, device=device),
            torch.zeros(batch, 1, device=device),
            torch.zeros(batch, dtype=torch.bool, device=device),
            self.no_finished(),
            torch.zeros(rows, self.masks.size(1), device=device) if self.beta else None,
        )

    def no_finished(self) -> Finished:
        """An empty table of finished hypotheses."""
        batch, device = self.batch, self.limits.device
        empty = torch.zeros(batch, self.n_best, dtype=torch.long, device=device)
        no_scores = torch.full((batch, self.n_best), float("-inf"), dtype=torch.float64, device=device)
        return Finished(
            torch.zeros(batch, dtype=torch.long, device=device),
            no_scores,
            no_scores.clone(),
            empty,
            empty.clone(),
            empty.clone(),
        )

    def advance(self, loop: BeamLoop, out: StepOutput) -> tuple[BeamLoop, Tensor]:
        """Step t's choice, and the loop of step t+1, its state still the step's rows: with it the
        row of step t that each row of step t+1 extends (n*k,), which the executor moves the
        state's rows to. (Reads no value back.)"""
        k, t, groups = self.beam, loop.step, loop.groups
        n, width = loop.scores.shape  # rows extended per group: 1 at the first step, then k
        rows = self.rows_of(out.log_probs, n)
        log_probs = self.log_probs_at(t, out.log_probs, groups, width)
        choice = beam_choice(loop.scores, log_probs, k, self.vocabulary)
        candidates, origin, token, alive = choice.score, choice.origin, choice.token, choice.alive
        first_row, first_slot = self.first_rows(n, rows), groups.unsqueeze(1) * k
        coverage, penalty = self.coverage(loop.coverage, out.weights, first_row + origin, groups)
        still_open = ~loop.done[groups].unsqueeze(1)
        ended = choice.ends & still_open
        finished = self.with_finished(
            loop.finished,
            groups,
            t,
            ended,
            candidates[:, :k],
            (first_slot + origin)[:, :k],
            token[:, :k],
            None if penalty is None else penalty[:, :k],
        )
        scores, prev, chosen = (x.gather(1, alive) for x in (candidates, token, origin))
        if self.tree is not None:
            self.tree.write(t, groups, still_open, origin, token, candidates, ended, alive)
        self.history.write(
            t, prev.flatten(), (first_slot + chosen).flatten(), out.weights, *self.history_slots(groups, rows)
        )
        parents = (first_row + chosen).flatten()
        done = loop.done.index_put((groups,), loop.done[groups] | self.sentences_done(finished, groups, scores, t))
        next_loop = BeamLoop(
            t + 1,
            prev.flatten(),
            out.state,
            groups,
            scores,
            done,
            finished,
            None if coverage is None else coverage[parents],
        )
        return next_loop, parents

    def rows_of(self, log_probs: Tensor, groups: int) -> int:
        """The rows a group computed at the step (its width in the eager loop; k on fixed shapes)."""
        return log_probs.size(0) // groups

    def first_rows(self, groups: int, rows: int) -> Tensor:
        """(n, 1) the first row of each group in the step's batch."""
        return torch.arange(groups, device=self.limits.device).unsqueeze(1) * rows

    def history_slots(self, groups: Tensor, rows: int) -> tuple[Tensor, Tensor]:
        """The history's slots of the rows of step t+1 (k a group) and of step t (``rows`` a group)."""
        k, device = self.beam, groups.device
        first = groups.unsqueeze(1) * k
        return (first + torch.arange(k, device=device)).flatten(), (first + torch.arange(rows, device=device)).flatten()

    def log_probs_at(self, t: Tensor | int, log_probs: Tensor, groups: Tensor, width: int) -> Tensor:
        """Step t's log-probabilities of the rows extended (each group's first ``width``), those of
        sentences at their length limit ended (``ended_at_limit``): there each live hypothesis
        finishes with EOS."""
        n = groups.numel()
        if log_probs.size(0) != n * width:  # (the first step on fixed shapes: k rows a group, 1 extended)
            log_probs = log_probs.view(n, -1, log_probs.size(1))[:, :width].flatten(0, 1)
        # (an int t, the eager loop's, tells the host that no sentence has reached its limit yet)
        if isinstance(t, int) and t + 1 < self.shortest:
            return log_probs
        return ended_at_limit(log_probs, (self.limits[groups] <= t + 1).repeat_interleave(width))

    def penalty_at(self, t: Tensor | int) -> Tensor:
        """(1,) the length penalty of t + 1 tokens."""
        return self.penalties[t : t + 1] if isinstance(t, int) else self.penalties.index_select(0, t)

    def coverage(
        self, coverage: Tensor | None, weights: Tensor | None, parent: Tensor, groups: Tensor
    ) -> tuple[Tensor | None, Tensor | None]:
        """Each row's coverage with step t's attention ``weights`` added, and the coverage penalty
        (n, 2k) of the candidates that extend the rows ``parent`` (coverage_penalty over each
        sentence's real positions); None and None without a coverage penalty."""
        if coverage is None:
            return None, None
        if weights is None:
            raise AttnmtError(NO_COVERAGE)
        coverage = coverage + weights.float()
        mask = self.masks[groups].repeat_interleave(coverage.size(0) // groups.numel(), dim=0)
        logs = coverage.clamp(COVERAGE_FLOOR, 1.0).log().masked_fill(~mask, 0.0)
        return coverage, self.beta * logs.sum(1).double()[parent]

    def with_finished(
        self,
        finished: Finished,
        groups: Tensor,
        t: Tensor | int,
        finishes: Tensor,
        log_prob: Tensor,
        row: Tensor,
        token: Tensor,
        coverage_penalty: Tensor | None,
    ) -> Finished:
        """``finished`` and the hypotheses of the ``groups``' sentences that finish at step t (each
        argument (n, k): which finish, their log-probabilities, slots extended, last tokens and
        coverage penalties): the n best, ordered as a stable sort of the lists of each sentence's
        finished hypotheses in the order they finished orders them (older ones first among equal
        scores)."""
        penalty = self.penalty_at(t)  # (they have t + 1 tokens)
        log_prob = log_prob.double()
        score = log_prob / penalty if coverage_penalty is None else log_prob / penalty + coverage_penalty
        new = {
            "score": torch.where(finishes, score, float("-inf")),
            "log_prob": log_prob,
            "end": t.expand_as(row) if isinstance(t, Tensor) else torch.full_like(row, t),
            "row": row,
            "token": token,
        }
        merged = {name: torch.cat([getattr(finished, name)[groups], new[name]], dim=1) for name in Finished.SLOTS}
        best = merged["score"].sort(dim=1, descending=True, stable=True).indices[:, : self.n_best]
        return Finished(
            finished.count.index_add(0, groups, finishes.sum(1)),
            **{name: getattr(finished, name).index_copy(0, groups, merged[name].gather(1, best)) for name in merged},
        )

    def sentences_done(self, finished: Finished, groups: Tensor, scores: Tensor, t: Tensor | int) -> Tensor:
        """beam_done, the stopping rules of beam_search, for the ``groups``' sentences at once."""
        count = finished.count[groups]
        return beam_done(
            self.limits[groups] <= t + 1,
            count >= self.n_best,
            finished.score[groups, self.n_best - 1],
            scores.max(dim=1).values.double(),
            count >= self.beam,
            self.limit_penalties[groups],
            self.penalty_at(t),
        )

    def kept(self, loop: BeamLoop, groups: Tensor, rows: Tensor) -> BeamLoop:
        """The loop of the ``groups`` (their positions) only, whose ``rows`` they are: the eager
        loop's, as done sentences leave."""
        coverage = None if loop.coverage is None else loop.coverage[rows]
        return replace(
            loop, prev=loop.prev[rows], groups=loop.groups[groups], scores=loop.scores[groups], coverage=coverage
        )

    def results(self, loop: BeamLoop, steps: int) -> list[list[Hypothesis]]:
        return self.hypotheses(loop.finished, steps)

    def hypotheses(self, finished: Finished, steps: int) -> list[list[Hypothesis]]:
        """The hypotheses of a table of finished ones after ``steps`` steps, each sentence's best
        first, read back along the parents (History.read_back)."""
        tokens, attention = self.history.read_back(finished.end, finished.row, finished.token, steps)
        tokens, ends, log_probs = tokens.tolist(), finished.end.tolist(), finished.log_prob.tolist()
        counts = finished.count.tolist()
        attention = None if attention is None else attention.float().cpu()
        widths = self.masks.sum(1).tolist()
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


class Beam:
    """BeamSearch (or constraints.ConstrainedBeamSearch) in the eager loop (``run_eager``): a group
    of rows per sentence still searched. A sentence that is done leaves the batch (``next_batch``),
    so later steps compute only the others, as GreedySearch's rows leave in ``Greedy``."""

    def __init__(self, search: BeamSearch):
        self.search = search
        self.max_lengths = search.max_lengths
        self.rows = 1  # (rows a group computes: one at the first step, then k)
        self.loop = search.start(None, 0, self.rows)  # (the decoder state is the loop's: run_eager)
        self.steps = 0

    @property
    def prev(self) -> Tensor:
        return self.loop.prev

    def advance(self, t: int, step: StepOutput, vocabulary: Tensor | None) -> Tensor:
        """Step t's choice; returns which groups go on (their sentences not done)."""
        loop, self.parents = self.search.advance(self.loop, step)
        self.loop = replace(loop, state=None)
        self.steps = t + 1
        return ~self.loop.done[self.loop.groups]

    def tree_step(self) -> list[tuple[int, list[TreeCandidate]]]:
        """The last step's candidates of each sentence searched, as the search tree adds them
        (BeamRecorder.add), from the strategy's TreeBuffers."""
        return self.search.tree.candidates(self.steps - 1, self.loop.groups.tolist())

    def next_batch(self, going: Tensor, state, memory):
        """The rows of step t+1: the groups ``going`` (a done sentence's rows leave the batch),
        their decoder state and memory."""
        k, groups, parents = self.search.beam, None, self.parents
        if not bool(going.all()):
            groups = going.nonzero().view(-1)
            rows = (groups.view(-1, 1) * k + torch.arange(k, device=groups.device)).view(-1)
            self.loop, parents = self.search.kept(self.loop, groups, rows), parents[rows]
        state = state.select(parents)
        if self.rows < k or groups is not None:  # (the memory of each sentence, for its k rows from now on)
            memory = memory.for_beams(
                torch.arange(going.numel(), device=going.device) if groups is None else groups, self.rows, k
            )
        self.rows = k
        return state, memory

    def results(self) -> list[list[Hypothesis]]:
        return self.search.results(self.loop, self.steps)


class TreeBuffers:
    """The search tree of a beam search, written by its strategy as tensors (nothing read back):
    each step's candidates of every sentence (the row of the sentence each extends, token, score)
    and their status (``KEPT``, ``FINISHED``, ``PRUNED``; 0 where the sentence was done or the slot
    empty), at the step counter and the sentence; ``candidates`` gives a step's as a BeamRecorder
    adds them (an observer of the eager loop), ``replay`` every step's at the end (fixed shapes)."""

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

    def write(self, t: Tensor | int, groups: Tensor, open_: Tensor, origin, token, score, ended, alive):
        """Beam search's step t's candidates (n, 2k) of the ``groups``' sentences: ``ended`` (n, k)
        those that finish, ``alive`` (n, k) the positions of those that stay; ``open_`` (n, 1) the
        sentences still searched."""
        kept = torch.zeros_like(token, dtype=torch.bool).scatter(1, alive, True)
        finished = F.pad(ended, (0, token.size(1) - ended.size(1)))
        status = torch.full_like(token, self.PRUNED)
        status = torch.where(kept, self.KEPT, status)
        status = torch.where(finished, self.FINISHED, status)
        status = status.masked_fill(~open_ | (score == float("-inf")), 0)
        self.write_slots(t, groups, origin, token, score, status)

    def write_slots(self, t: Tensor | int, groups: Tensor, origin, token, score, status, met=None):
        """Step t's candidates (n, slots) of the ``groups``' sentences in the order the recorder
        adds them, with their status (0: none) and, with ``met``, the constraint tokens each has met."""
        values = [(self.origin, origin), (self.token, token), (self.score, score), (self.status, status)]
        if self.met is not None:
            values.append((self.met, met))
        at = (t, groups) if isinstance(t, Tensor) else (torch.tensor([t], device=groups.device), groups)
        for buffer, value in values:
            buffer.index_put_(at, value.to(buffer.dtype))

    def candidates(self, t: int, sentences: list[int]) -> list[tuple[int, list[TreeCandidate]]]:
        """Step t's candidates of ``sentences``, as BeamRecorder.add takes them."""
        index = torch.tensor(sentences, device=self.status.device)
        columns = [
            None if b is None else b[t, index].tolist()
            for b in (self.origin, self.token, self.score, self.status, self.met)
        ]
        return [
            (sentence, self._of(*(None if c is None else c[i] for c in columns)))
            for i, sentence in enumerate(sentences)
        ]

    def replay(self, record: BeamRecorder, steps: int):
        """Adds the candidates of the first ``steps`` steps of every sentence to ``record``, step by step."""
        columns = [
            None if b is None else b[:steps].cpu().tolist()
            for b in (self.origin, self.token, self.score, self.status, self.met)
        ]
        for t in range(steps):
            record.add(
                t,
                [(b, self._of(*(None if c is None else c[t][b] for c in columns))) for b in range(len(columns[3][t]))],
            )

    def _of(self, origin: list, token: list, score: list, status: list, met: list | None) -> list[TreeCandidate]:
        """One sentence's candidates of a step, those of a status (0: none) only."""
        return [
            (origin[j], token[j], score[j], self.STATUS[s], None if met is None else met[j])
            for j, s in enumerate(status)
            if s
        ]


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
    """Beam search's choice of a step, the one of both executors (``BeamSearch.advance``;
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
