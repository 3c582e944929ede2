"""The textbook beam searches, kept as the tests' oracle: batched beam search and its constrained banks
as attnmt wrote them before one strategy served both executors (issue 51). Finished hypotheses go
into Python lists as they finish, read back from a history of one list entry per step; the banks
are Python dictionaries and stable sorts over each hypothesis' ``Progress``. They run in attnmt's
eager loop (``decoding.run_eager``) and share only its choice of a step (``decoding.beam_choice``)
and its stopping rules (``decoding.beam_done``): the bookkeeping, the tables, the history and the
banks of src/ are held equal to these, in both executors (tests/test_fast_decoding.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from attnmt.data.subwords import BOS, EOS, PAD
from attnmt.seq2seq.base import StepOutput
from attnmt.seq2seq.decoding import (
    Hypothesis,
    TreeCandidate,
    beam_choice,
    beam_done,
    checked_search,
    ended_at_limit,
    hypothesis_of,
    length_penalty,
    memory_lengths,
    run_eager,
)
from attnmt.seq2seq.constraints import Phrases, check_constraints

NEG_INF = float("-inf")


@torch.inference_mode()
def beam_search(
    model,
    src,
    src_lengths,
    max_lengths,
    beam=5,
    n_best=1,
    alpha=1.0,
    vocabulary=None,
    window=None,
    beta=0.0,
    *,
    record=None,
    stop=None,
    observers=(),
    processors=(),
):
    """decoding.beam_search's arguments, the textbook bookkeeping (``Beams``)."""
    if n_best > beam:
        raise ValueError(f"n_best ({n_best}) cannot exceed the beam size ({beam})")
    memory = model.encode(src, src_lengths, window)
    beams = Beams(src.size(0), beam, n_best, alpha, max_lengths, memory_lengths(memory), src.device, beta)
    observers = observers if record is None else (*observers, record)
    return checked_search(run_eager(beams, model, memory, vocabulary, stop, observers, processors))


@torch.inference_mode()
def constrained_beam_search(
    model,
    src,
    src_lengths,
    max_lengths,
    constraints,
    beam=5,
    n_best=1,
    alpha=1.0,
    window=None,
    beta=0.0,
    *,
    record=None,
    stop=None,
    observers=(),
    processors=(),
):
    """constraints.constrained_beam_search's arguments, the textbook banks (``_ConstrainedBeams``)."""
    check_constraints(constraints, beam, n_best)
    memory = model.encode(src, src_lengths, window)
    beams = _ConstrainedBeams(
        src.size(0), beam, n_best, alpha, max_lengths, memory_lengths(memory), src.device, beta, constraints
    )
    observers = observers if record is None else (*observers, record)
    return checked_search(run_eager(beams, model, memory, None, stop, observers, processors))


class ListHistory:
    """What the steps wrote, a list entry a step: the rows' attention weights of step t, and the
    token and parent (row of step t) of each row of step t+1; hypotheses read back along the
    parents as they finish."""

    def __init__(self):
        self.weights: list[Tensor | None] = []
        self.tokens: list[Tensor] = []
        self.parents: list[Tensor] = []

    def add_weights(self, weights: Tensor | None):
        self.weights.append(weights)

    def add_rows(self, tokens: Tensor, parents: Tensor):
        self.tokens.append(tokens)
        self.parents.append(parents)

    def read(self, t: int, rows: Tensor, tokens: Tensor) -> tuple[list[list[int]], Tensor | None]:
        """The hypotheses of ``rows`` of step t, each extended by its token of ``tokens``: their
        tokens, and their attention (n, t+1, S) or None."""
        has_weights = bool(self.weights) and self.weights[0] is not None
        row, token_columns, weight_columns = rows, [tokens], []
        for s in range(t, -1, -1):
            if has_weights:
                weight_columns.append(self.weights[s][row])
            if s > 0:
                token_columns.append(self.tokens[s - 1][row])
                row = self.parents[s - 1][row]
        attention = torch.stack(weight_columns[::-1], dim=-2).float() if has_weights else None
        return torch.stack(token_columns[::-1], dim=-1).tolist(), attention


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
        self.history = ListHistory()

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


@dataclass(frozen=True)
class Progress:
    """How far a hypothesis has met its sentence's constraints: the phrases ``done``, and the one
    it is writing with how many of its tokens are written (None: inside none)."""

    done: frozenset[int] = frozenset()
    inside: tuple[int, int] | None = None

    def count(self, phrases: Phrases) -> int:
        """The constraint tokens met: the bank of the hypothesis."""
        return sum(len(phrases[c]) for c in self.done) + (self.inside[1] if self.inside else 0)

    def complete(self, phrases: Phrases) -> bool:
        return len(self.done) == len(phrases)

    def after(self, token: int, phrases: Phrases) -> Progress:
        """The progress once ``token`` is written."""
        if self.inside is not None:
            c, written = self.inside
            if phrases[c][written] == token:
                return self._advanced(c, written + 1, phrases)
        for c, phrase in enumerate(phrases):  # (leaving a phrase: its tokens count no more)
            if c not in self.done and phrase[0] == token:
                return Progress(self.done, None)._advanced(c, 1, phrases)
        return Progress(self.done, None)

    def _advanced(self, c: int, written: int, phrases: Phrases) -> Progress:
        if written == len(phrases[c]):
            return Progress(self.done | {c}, None)
        return Progress(self.done, (c, written))

    def next_tokens(self, phrases: Phrases) -> list[int]:
        """The tokens that would advance it."""
        tokens = {phrase[0] for c, phrase in enumerate(phrases) if c not in self.done}
        if self.inside is not None:
            tokens.add(phrases[self.inside[0]][self.inside[1]])
        return sorted(tokens)


class _ConstrainedBeams(Beams):
    """decoding's beam state with each live row's Progress, its selection by banks; the finished
    hypotheses that met every constraint in ``finished`` (they alone can stop a sentence), those
    the length limit ended before in ``unmet``."""

    def __init__(self, batch, k, n_best, alpha, max_lengths, memory_widths, device, beta, constraints):
        super().__init__(batch, k, n_best, alpha, max_lengths, memory_widths, device, beta)
        self.phrases = constraints
        self.progress = [Progress() for _ in range(batch)]  # of each live row
        self.unmet: list[list[Hypothesis]] = [[] for _ in range(batch)]

    def extend(self, t: int, step: StepOutput, vocabulary: None) -> tuple[list[int], Tensor]:
        """Each sentence's k live rows chosen by banks, and its finished hypotheses (see the module).
        Returns the sentence of each group and, for each live row (n*k,), the row of batch t it extends."""
        sentences, width = self.active.tolist(), self.width
        log_probs = self.log_probs_at(t, step, sentences).float()
        candidates = self._candidates(log_probs, [s for s in sentences for _ in range(width)])
        chosen, ends, unmet, self.last_step = [], [], [], []
        for g, sentence in enumerate(sentences):
            phrases, at_limit = self.phrases[sentence], self.max_lengths[sentence] <= t + 1
            live, finishing, cut, considered = self._choose(
                candidates[g * width : (g + 1) * width], g * width, phrases, at_limit
            )
            chosen.append(live)
            ends += [(sentence, row, score) for row, score in finishing]
            unmet += [(sentence, row, score) for row, score, _ in cut]
            self.last_step.append((sentence, live, finishing, cut, considered, g * width))  # (tree_step)
        for ending, into in ((ends, None), (unmet, self.unmet)):
            if ending:
                rows = torch.tensor([row for _, row, _ in ending], device=self.device)
                self._finish(
                    t, [s for s, _, _ in ending], rows, torch.full_like(rows, EOS), [s for _, _, s in ending], into
                )
        rows = [row for live in chosen for row, _, _, _ in live]
        self.prev = torch.tensor([token for live in chosen for _, token, _, _ in live], device=self.device)
        self.scores = torch.tensor([[score for _, _, score, _ in live] for live in chosen], device=self.device)
        self.progress = [progress for live in chosen for _, _, _, progress in live]
        return sentences, torch.tensor(rows, dtype=torch.long, device=self.device)

    def _candidates(self, log_probs: Tensor, sentences: list[int]) -> list[dict[int, float]]:
        """For each row of the batch (of ``sentences``), its candidate tokens and their log-probabilities:
        its k + 1 best (k besides EOS), EOS, and the tokens that advance its constraints."""
        rows = log_probs.size(0)
        wanted = [self.progress[r].next_tokens(self.phrases[sentences[r]]) for r in range(rows)]
        flat_rows = [r for r, tokens in enumerate(wanted) for _ in tokens]
        flat_tokens = [t for tokens in wanted for t in tokens]
        best, best_tokens = log_probs.topk(min(self.k + 1, log_probs.size(1)), dim=1)
        forced = log_probs[
            torch.tensor(flat_rows, dtype=torch.long, device=log_probs.device),
            torch.tensor(flat_tokens, dtype=torch.long, device=log_probs.device),
        ]
        best, best_tokens, forced, ends = (x.tolist() for x in (best, best_tokens, forced, log_probs[:, EOS]))
        candidates = [dict(zip(best_tokens[r], best[r])) | {EOS: ends[r]} for r in range(rows)]
        for r, token, log_prob in zip(flat_rows, flat_tokens, forced):
            candidates[r][token] = log_prob
        return candidates

    def _choose(self, candidates: list[dict[int, float]], first_row: int, phrases: Phrases, at_limit: bool):
        """A sentence's k live rows as (row of batch t, token, score, progress), by banks, the
        (row, score) of its hypotheses that end now, those that the length limit ends before they
        met every constraint (row, score, progress: at the limit each hypothesis can only end), and
        every candidate (row, token, score, progress)."""
        scores = self.scores.view(-1)[first_row : first_row + len(candidates)].tolist()
        banks: dict[int, list] = {}
        cut = []
        for j, tokens in enumerate(candidates):
            progress = self.progress[first_row + j]
            for token, log_prob in tokens.items():
                score = scores[j] + log_prob
                if score == NEG_INF:
                    continue
                if token == EOS:
                    if progress.complete(phrases):
                        banks.setdefault(-1, []).append((first_row + j, token, score, progress))
                    elif at_limit:
                        cut.append((first_row + j, score, progress))
                    continue
                after = progress.after(token, phrases)
                banks.setdefault(after.count(phrases), []).append((first_row + j, token, score, after))
        full = sum(map(len, phrases))
        ending = sorted(banks.pop(-1, []), key=lambda c: -c[2])
        best_full = sorted(banks.get(full, []) + ending, key=lambda c: -c[2])[: self.k]
        finishing = [(row, score) for row, token, score, _ in best_full if token == EOS]
        considered = [c for bank in banks.values() for c in bank] + ending
        return _by_banks(banks, self.k, first_row), finishing, cut, considered

    def tree_step(self) -> list[tuple[int, list[TreeCandidate]]]:
        """The last step's candidates of each sentence, as the search tree adds them (``_recorded``)."""
        return [(sentence, self._recorded(*chosen, self.phrases[sentence])) for sentence, *chosen in self.last_step]

    def _recorded(
        self, live: list, finishing: list, cut: list, considered: list, first_row: int, phrases: Phrases
    ) -> list[TreeCandidate]:
        """What the search tree shows of a sentence's step (attnmt.seq2seq.decoding.BeamRecorder): its
        live rows, kept; the hypotheses that end, finished (those the length limit ended too, with
        fewer constraint tokens met); the k best candidates left out, pruned; each with the
        constraint tokens it has met."""
        taken = {(row, token) for row, token, _, _ in live} | {(row, EOS) for row, _ in finishing}
        left = sorted((c for c in considered if (c[0], c[1]) not in taken), key=lambda c: -c[2])[: self.k]
        return (
            [
                (row - first_row, token, score, "kept", p.count(phrases))
                for row, token, score, p in live
                if score != NEG_INF
            ]
            + [(row - first_row, EOS, score, "finished", sum(map(len, phrases))) for row, score in finishing]
            + [(row - first_row, EOS, score, "finished", p.count(phrases)) for row, score, p in cut]
            + [(row - first_row, token, score, "pruned", p.count(phrases)) for row, token, score, p in left]
        )

    def next_batch(self, keep: Tensor, state, memory):
        if not bool(keep.all()):
            self.progress = [
                self.progress[g * self.k + j] for g in keep.nonzero().view(-1).tolist() for j in range(self.k)
            ]
        return super().next_batch(keep, state, memory)

    def results(self) -> list[list[Hypothesis]]:
        """Each sentence's n best, those that met every constraint first."""
        return [
            (sorted(met, key=lambda h: -h.score) + sorted(unmet, key=lambda h: -h.score))[: self.n_best]
            for met, unmet in zip(self.finished, self.unmet)
        ]


def _by_banks(banks: dict[int, list], k: int, first_row: int) -> list:
    """k candidates (row, token, score, progress): the best left of each bank in turn, the banks of
    most progress first (Post & Vilar 2018's allocation, each bank lending what it cannot fill);
    fewer candidates than k are padded with impossible copies of the first (score -inf)."""
    queues = [sorted(banks[count], key=lambda c: -c[2]) for count in sorted(banks, reverse=True)]
    chosen, depth = [], 0
    while len(chosen) < k and any(depth < len(q) for q in queues):
        chosen += [q[depth] for q in queues if depth < len(q)][: k - len(chosen)]
        depth += 1
    if not chosen:
        return [(first_row, PAD, NEG_INF, Progress())] * k  # (impossible: never extended nor read back)
    return chosen + [(*chosen[0][:2], NEG_INF, chosen[0][3])] * (k - len(chosen))
