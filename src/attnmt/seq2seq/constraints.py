"""Lexically constrained decoding: outputs that contain given words or phrases (a term that must be
translated so, a name to keep), by the dynamic beam allocation of Post & Vilar (2018), as Sockeye's
and fairseq's constrained decoding.

A hypothesis' progress is how many constraint tokens it has written: each phrase whole, in order,
counts once done, and the tokens of the one it is writing count until it leaves it (then they are
lost). At each step a sentence's candidates are the k best extensions of each of its hypotheses,
its end (EOS) and, for each hypothesis, the tokens that would advance it: the next of the phrase
it is inside, the first of every phrase not yet done. The beam's k places go to the candidates by
*banks* of equal progress: the best candidate left of each bank in turn, most progress first, so
that a hypothesis that wrote a constraint stays even when likelier ones that did not fill the
beam (a plain beam would drop a forced token whose probability is low, and with it the term).
A hypothesis may end only once it has met every constraint: its EOS then finishes it when it is
among the k best candidates of the bank of those. At the length limit every live hypothesis ends
(it can only write EOS there, as in every search: attnmt.seq2seq.decoding.ended_at_limit), the
ones that met every constraint or not; those that did always rank first.

Scores are the model's: log-probability over the length penalty (+ coverage penalty), nothing
for the constraints, so a constrained output scores as ``Translator.score`` would score it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from attnmt.core.errors import AttnmtError
from attnmt.data.subwords import EOS, PAD, UNK, valid_text
from attnmt.seq2seq.base import EncoderDecoder, StepOutput
from attnmt.seq2seq.decoding import (
    BeamRecorder,
    Beams,
    Hypothesis,
    TreeCandidate,
    checked_search,
    memory_lengths,
    run_eager,
)

NEG_INF = float("-inf")

Phrases = list[tuple[int, ...]]  # one sentence's constraints, each a phrase of token ids


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


def phrases_of(subwords, texts: list[str], constraints: list[list[str]]) -> list[Phrases] | None:
    """Each text's constraints (a list of strings, maybe empty) as phrases of the target ``subwords``'
    pieces, each encoded as a translation would be; None where no text has one. AttnmtError for a
    list of the wrong length, an empty phrase, or one with a character the pieces cannot write."""
    if isinstance(constraints, str) or len(constraints) != len(texts):
        raise AttnmtError(f"constraints: give a list of phrases for each of the {len(texts)} texts ([]: none)")
    phrases = []
    for i, strings in enumerate(constraints):
        if isinstance(strings, str):
            raise AttnmtError(f"constraints of text {i + 1} (counting from 1): a list of phrases, not a string")
        ids = subwords.encode([valid_text(string) for string in strings])
        for string, pieces in zip(strings, ids):
            if not pieces or UNK in pieces:
                problem = "is empty" if not pieces else "has a character that the model's target pieces cannot write"
                raise AttnmtError(f"constraint {string!r} of text {i + 1} (counting from 1) {problem}")
        phrases.append([tuple(p) for p in ids])
    return phrases if any(phrases) else None


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
    observers: tuple = (),
    processors: tuple = (),
) -> list[list[Hypothesis]]:
    """decoding.beam_search whose outputs contain each sentence's ``constraints`` (token phrases;
    [] for none), by dynamic beam allocation (see the module). The full output layer: no shortlist.
    ``record``: each step's live rows, ends and the k best candidates left out join the search tree,
    each with the constraint tokens it has met (its bank); ``observers``, ``processors``: see
    decoding.run_eager."""
    check_constraints(constraints, beam, n_best)
    memory = model.encode(src, src_lengths, window)
    beams = _ConstrainedBeams(
        src.size(0), beam, n_best, alpha, max_lengths, memory_lengths(memory), src.device, beta, constraints
    )
    observers = observers if record is None else (*observers, record)
    return checked_search(run_eager(beams, model, memory, None, stop, observers, processors))


def check_constraints(constraints: list[Phrases], beam: int, n_best: int):
    """ValueError for an n_best above the beam, or a phrase that is empty or holds PAD or EOS
    (the checks of both executors' constrained searches)."""
    if n_best > beam:
        raise ValueError(f"n_best ({n_best}) cannot exceed the beam size ({beam})")
    if any(not phrase or PAD in phrase or EOS in phrase for phrases in constraints for phrase in phrases):
        raise ValueError("a constraint is a phrase of one or more tokens, none of them padding or EOS")


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
