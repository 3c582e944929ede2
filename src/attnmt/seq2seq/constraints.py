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

As tensors, so that one strategy (``ConstrainedBeamSearch``: decoding.BeamSearch's groups of rows,
tables of finished hypotheses, stopping rules, coverage penalty and history, with each row's
progress) runs in both executors and a step reads no value back (a CUDA graph replays it):
  - a sentence's phrases are a table (B, P, L) of token ids padded with -1 (P its most phrases, L
    the longest phrase), and a hypothesis' progress three tensors a row: the phrases done (rows, P;
    a sentence's missing phrases count as done), the phrase it is inside (-1: none) and how many of
    its tokens are written;
  - every row has the same slots of candidates, in one order: its k + 1 best tokens, then the
    tokens that would advance it (the first of each phrase not done and the next of the one it is
    inside: sorted, each once, those already among the best left out), and apart, its EOS. The
    progress after each slot's token, and its bank (the constraint tokens met), are computed for
    all slots at once;
  - a sort becomes ranks: a candidate's rank in its bank is the number of candidates of the bank
    before it (a higher score, or the same and earlier in that order), and the k live rows are the
    candidates ordered by (rank, most progress first), the first k: the round of each bank in turn.
    An EOS finishes when fewer than k candidates of the bank of those that met every constraint
    come before it; at the length limit one that did not meet them all joins the table of those
    (``unmet``), ranked after the others.
The pairwise comparisons take (B, N, N) booleans for N = k (k + P + 2) candidates a sentence:
small next to a decoder step for the beams and constraints of translation (beam 16 and the
server's 16 phrases: N = 544, 0.3 M a sentence).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace

import torch
import torch.nn.functional as F
from torch import Tensor

from attnmt.core.errors import AttnmtError
from attnmt.data.subwords import EOS, PAD, UNK, valid_text
from attnmt.seq2seq.base import EncoderDecoder, StepOutput
from attnmt.seq2seq.decoding import (
    Beam,
    BeamLoop,
    BeamRecorder,
    BeamSearch,
    Finished,
    Hypothesis,
    TreeBuffers,
    checked_search,
    records_tree,
    run_eager,
    with_recorder,
)

NEG_INF = float("-inf")

Phrases = list[tuple[int, ...]]  # one sentence's constraints, each a phrase of token ids


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
    [] for none), by dynamic beam allocation (see the module), in the eager loop (a done
    sentence's rows leave the batch; fast_decoding.constrained_beam_search: the fixed-shape one).
    The full output layer: no shortlist. ``record``: each step's live rows, ends and the k best
    candidates left out join the search tree, each with the constraint tokens it has met (its
    bank); ``observers``, ``processors``: see decoding.run_eager."""
    memory = model.encode(src, src_lengths, window)
    observers = with_recorder(observers, record)
    search = ConstrainedBeamSearch(memory, max_lengths, constraints, beam, n_best, alpha, beta, records_tree(observers))
    return checked_search(run_eager(Beam(search), model, memory, None, stop, observers, processors))


def check_constraints(constraints: list[Phrases], beam: int, n_best: int):
    """ValueError for an n_best above the beam, or a phrase that is empty or holds PAD or EOS
    (the checks of both executors' constrained searches)."""
    if n_best > beam:
        raise ValueError(f"n_best ({n_best}) cannot exceed the beam size ({beam})")
    if any(not phrase or PAD in phrase or EOS in phrase for phrases in constraints for phrase in phrases):
        raise ValueError("a constraint is a phrase of one or more tokens, none of them padding or EOS")


@dataclass
class _ConstrainedLoop(BeamLoop):
    unmet: Finished  # the n best that the length limit ended before they met every constraint
    phrases_done: Tensor  # (rows, P) bool: the phrases each live row has written whole
    inside: Tensor  # (rows,) the phrase it is writing (-1: none)
    written: Tensor  # (rows,) how many of that phrase's tokens it has written


@dataclass
class _Candidates:
    """A step's candidates of each sentence: N = w * C of its banks (each row's slots but EOS, in the
    eager search's order: row, then slot) and its w rows' EOS."""

    score: Tensor  # (B, N) float64: the hypothesis' log-probability with the token's
    member: Tensor  # (B, N) a candidate of a bank: a token in the slot, a score above -inf
    bank: Tensor  # (B, N) the constraint tokens it would have met
    token: Tensor  # (B, N)
    eos: Tensor  # (B, w) each row's score with EOS
    ending: Tensor  # (B, w) an EOS of a row that met every constraint (the bank of those)
    cut: Tensor  # (B, w) an EOS that the length limit writes before the row met them all
    row_met: Tensor  # (B, w) the constraint tokens each row has met

    def same_bank(self) -> Tensor:
        """[b, i, j]: j is a candidate of i's bank."""
        return self.member.unsqueeze(1) & (self.bank.unsqueeze(2) == self.bank.unsqueeze(1))


class ConstrainedBeamSearch(BeamSearch):
    """Beam search by banks (see the module): decoding.BeamSearch's groups of rows, tables,
    stopping rules and read-back, each live row with its progress through its sentence's phrases;
    the finished hypotheses that met every constraint in the loop's ``finished`` (they alone can
    stop a sentence), those the length limit ended before in ``unmet``."""

    def __init__(
        self,
        memory,
        max_lengths: list[int],
        constraints: list[Phrases],
        beam: int,
        n_best: int,
        alpha: float,
        beta: float = 0.0,
        record: bool = False,
    ):
        check_constraints(constraints, beam, n_best)
        super().__init__(memory, max_lengths, beam, n_best, alpha, None, beta)
        device = self.limits.device
        most = max(1, max(map(len, constraints)))
        longest = max([1] + [len(phrase) for phrases in constraints for phrase in phrases])
        tokens = [
            [list(phrase) + [-1] * (longest - len(phrase)) for phrase in phrases]
            + [[-1] * longest] * (most - len(phrases))
            for phrases in constraints
        ]
        lengths = [[len(phrase) for phrase in phrases] + [0] * (most - len(phrases)) for phrases in constraints]
        self.all_phrase_tokens = torch.tensor(tokens, dtype=torch.long, device=device)  # (B, P, L), -1 padded
        self.all_phrase_lengths = torch.tensor(lengths, dtype=torch.long, device=device)  # (B, P), 0: no phrase
        self.banks = max(sum(map(len, phrases)) for phrases in constraints) + 1  # (bank counts: 0 .. full)
        # a hypothesis' slots: its k + 1 best tokens and, for P phrases, P + 1 that advance it
        self.candidate_slots = beam + 1 + most + 1
        # in the tree, a step's slots of a sentence: kept (k), finished (k), ended unmet (k), pruned (k)
        steps = len(self.penalties)
        self.tree = TreeBuffers(steps, self.batch, 4 * beam, device, torch.float64, True) if record else None

    def start(self, state, step: Tensor | int, rows_per_group: int) -> _ConstrainedLoop:
        base = super().start(state, step, rows_per_group)
        rows, device = self.batch * rows_per_group, self.limits.device
        return _ConstrainedLoop(
            *(getattr(base, f.name) for f in fields(base)),
            self.no_finished(),
            (self.all_phrase_lengths == 0).repeat_interleave(rows_per_group, dim=0),
            torch.full((rows,), -1, dtype=torch.long, device=device),
            torch.zeros(rows, dtype=torch.long, device=device),
        )

    def advance(self, loop: _ConstrainedLoop, out: StepOutput) -> tuple[_ConstrainedLoop, Tensor]:
        k, t, groups, device = self.beam, loop.step, loop.groups, self.limits.device
        (n, width), still_open = loop.scores.shape, ~loop.done[groups]  # rows extended per group: 1 at first, then k
        rows_computed = self.rows_of(out.log_probs, n)
        # the groups' sentences' phrases (B, P, L), their lengths (B, P) and constraint tokens (B,)
        self.phrase_tokens, self.phrase_lengths = self.all_phrase_tokens[groups], self.all_phrase_lengths[groups]
        self.full = self.phrase_lengths.sum(1)
        log_probs = self.log_probs_at(t, out.log_probs, groups, width).float().view(n, width, -1)
        extended = torch.arange(width, device=device)
        rows = self.first_rows(n, rows_computed) + extended  # (n, w): the rows extended in the step's batch
        slots = groups.unsqueeze(1) * k + extended  # (n, w): and their slots in the history
        step, after = self._candidates(loop, log_probs, rows_computed, (self.limits[groups] <= t + 1) & still_open)

        # By banks: the best left of each bank in turn (rank in its bank, then most progress first).
        candidates = step.score.size(1)
        rank = (_before(step.score) & step.same_bank()).sum(2)
        key = torch.where(step.member, rank * self.banks + (self.banks - 1 - step.bank), candidates * self.banks)
        chosen = key.sort(dim=1, stable=True).indices[:, :k]  # (n, k)
        valid = torch.arange(k, device=device) < step.member.sum(1, keepdim=True)
        some = valid[:, :1]
        # (fewer than k: copies of the first, impossible; none: a PAD on the first row)
        pick = torch.where(valid, chosen, chosen[:, :1])
        live_score = torch.where(valid, step.score.gather(1, pick), NEG_INF)
        live_token = torch.where(some, step.token.gather(1, pick), PAD)
        live_row = torch.where(some, pick // self.candidate_slots, 0)
        progress = [x.reshape(n, candidates, -1).gather(1, pick.unsqueeze(2).expand(-1, -1, x.size(-1))) for x in after]
        initial = [
            (self.phrase_lengths == 0).unsqueeze(1),
            torch.full_like(progress[1], -1),
            torch.zeros_like(progress[2]),
        ]
        progress = [torch.where(some.unsqueeze(2), p, empty) for p, empty in zip(progress, initial)]

        # The EOS that finish: among the k best of the full bank and the ending ones (the bank first).
        full_bank = step.member & (step.bank == self.full.unsqueeze(1))
        ahead = (full_bank.unsqueeze(1) & (step.score.unsqueeze(1) >= step.eos.unsqueeze(2))).sum(2)
        ahead = ahead + (_before(step.eos) & step.ending.unsqueeze(1)).sum(2)
        finishing = step.ending & (ahead < k) & still_open.unsqueeze(1)
        coverage, penalty = self.coverage(loop.coverage, out.weights, rows, groups)
        eos_tokens = torch.full_like(slots, EOS)
        finished, unmet = (
            self.with_finished(table, groups, t, ends, step.eos, slots, eos_tokens, penalty)
            for table, ends in ((loop.finished, finishing), (loop.unmet, step.cut))
        )

        if self.tree is not None:
            self._record(t, groups, still_open, step, chosen, valid, finishing)
        parents = (self.first_rows(n, rows_computed) + live_row).flatten()
        live_token = live_token.flatten()
        live_score = live_score.float()
        history_parents = (groups.unsqueeze(1) * k + live_row).flatten()
        self.history.write(t, live_token, history_parents, out.weights, *self.history_slots(groups, rows_computed))
        done = loop.done.index_put((groups,), loop.done[groups] | self.sentences_done(finished, groups, live_score, t))
        next_loop = _ConstrainedLoop(
            t + 1,
            live_token,
            out.state,
            groups,
            live_score,
            done,
            finished,
            None if coverage is None else coverage[parents],
            unmet,
            progress[0].flatten(0, 1),
            progress[1].flatten(),
            progress[2].flatten(),
        )
        return next_loop, parents

    def kept(self, loop: _ConstrainedLoop, groups: Tensor, rows: Tensor) -> _ConstrainedLoop:
        kept = super().kept(loop, groups, rows)
        return replace(kept, phrases_done=loop.phrases_done[rows], inside=loop.inside[rows], written=loop.written[rows])

    def _candidates(self, loop: _ConstrainedLoop, log_probs: Tensor, rows: int, cut_now: Tensor):
        """Step t's candidates of each group's sentence (``_Candidates``), and the progress (done,
        inside, written) each would have, (n, N, P) and (n, N, 1). ``log_probs`` (n, w, V) those of
        the rows extended, of ``rows`` a group computed; ``cut_now`` (n,) the sentences still
        searched at their length limit."""
        batch, width, _ = log_probs.shape
        done = loop.phrases_done.view(batch, rows, -1)[:, :width]
        inside, written = (x.view(batch, rows)[:, :width] for x in (loop.inside, loop.written))
        scores = loop.scores.double()
        next_in = self._next_inside(inside, written)
        token, slot_ok = self._slots(log_probs, done, next_in)
        score = scores.unsqueeze(2) + log_probs.gather(2, token).double()  # (as Python adds them)
        after_done, after_inside, after_written, met = self._after(token, done, inside, written, next_in)
        eos = scores + log_probs[..., EOS].double()
        complete = done.all(2)
        n = width * self.candidate_slots
        step = _Candidates(
            score.reshape(batch, n),
            (slot_ok & (score != NEG_INF)).reshape(batch, n),
            met.reshape(batch, n),
            token.reshape(batch, n),
            eos,
            (eos != NEG_INF) & complete,
            (eos != NEG_INF) & ~complete & cut_now.unsqueeze(1),
            (done * self.phrase_lengths.unsqueeze(1)).sum(2) + torch.where(inside >= 0, written, 0),
        )
        return step, (after_done, after_inside.unsqueeze(-1), after_written.unsqueeze(-1))

    def _next_inside(self, inside: Tensor, written: Tensor) -> Tensor:
        """The next token of the phrase each row is inside (B, w), -1 where it is inside none."""
        width, longest = inside.size(1), self.phrase_tokens.size(2)
        phrase = self.phrase_tokens.unsqueeze(1).expand(-1, width, -1, -1)  # (B, w, P, L)
        phrase = phrase.gather(2, inside.clamp(min=0)[..., None, None].expand(-1, -1, 1, longest)).squeeze(2)
        following = phrase.gather(2, written.clamp(max=longest - 1).unsqueeze(2)).squeeze(2)
        return torch.where(inside >= 0, following, -1)

    def _slots(self, log_probs: Tensor, done: Tensor, next_in: Tensor) -> tuple[Tensor, Tensor]:
        """Each row's candidate tokens but EOS (B, w, C) in the order of the eager search's
        dictionary, and which slots hold one: its k + 1 best, then the tokens that advance it."""
        k = self.beam
        batch, width, vocabulary = log_probs.shape
        # (as the eager search takes them: a row's ties in the order topk gives a batch of rows)
        best = log_probs.flatten(0, 1).topk(min(k + 1, vocabulary), dim=1).indices.view(batch, width, -1)
        best_ok = best != EOS
        if best.size(2) < k + 1:  # (a vocabulary under k + 1: empty slots)
            missing = k + 1 - best.size(2)
            best, best_ok = F.pad(best, (0, missing), value=PAD), F.pad(best_ok, (0, missing), value=False)
        firsts = torch.where(done, -1, self.phrase_tokens[:, :, 0].unsqueeze(1))  # (B, w, P)
        forced = torch.cat([firsts, next_in.unsqueeze(2)], dim=2).sort(dim=2).values
        fresh = forced >= 0
        fresh[..., 1:] &= forced[..., 1:] != forced[..., :-1]  # (each token once)
        fresh &= ~(forced.unsqueeze(3) == best.unsqueeze(2)).any(3)  # (and not again)
        return torch.cat([best, forced.clamp(min=0)], dim=2), torch.cat([best_ok, fresh], dim=2)

    def _after(self, token: Tensor, done: Tensor, inside: Tensor, written: Tensor, next_in: Tensor):
        """Progress.after for every candidate (B, w, C): the phrases done (B, w, C, P), the one
        inside and its tokens written, and the constraint tokens met (its bank)."""
        phrases = self.phrase_tokens.size(1)
        lengths = self.phrase_lengths.unsqueeze(1)  # (B, 1, P)
        goes_on = (inside >= 0).unsqueeze(2) & (token == next_in.unsqueeze(2))
        starts = (token.unsqueeze(3) == self.phrase_tokens[:, None, None, :, 0]) & ~done.unsqueeze(2)
        ids = torch.arange(phrases, device=token.device)
        first = torch.where(starts, ids, phrases).min(3).values  # (the first phrase it starts)
        phrase = torch.where(goes_on, inside.unsqueeze(2), torch.where(first < phrases, first, -1))
        count = torch.where(goes_on, written.unsqueeze(2) + 1, (first < phrases).long())
        length = lengths.expand(-1, token.size(1), -1).gather(2, phrase.clamp(min=0))
        whole = (phrase >= 0) & (count == length)
        after_done = done.unsqueeze(2) | ((ids == phrase.unsqueeze(3)) & whole.unsqueeze(3))
        after_inside = torch.where(whole, -1, phrase)
        after_written = torch.where(after_inside >= 0, count, 0)
        met = (after_done * lengths.unsqueeze(2)).sum(3) + after_written
        return after_done, after_inside, after_written, met

    def _record(
        self,
        t: Tensor | int,
        groups: Tensor,
        still_open: Tensor,
        step: _Candidates,
        chosen: Tensor,
        valid: Tensor,
        finishing,
    ):
        """Step t's slots of the search tree of the ``groups``' sentences, in this order:
        the live rows (kept), the EOS that finish (finished, every constraint met), those the length
        limit ends (finished, fewer met), and the k best candidates left (pruned)."""
        score, member, token, met, eos = step.score, step.member, step.token, step.bank, step.eos  # (met: its bank)
        ending, cut, row_met = step.ending, step.cut, step.row_met
        (batch, n), k, width = score.shape, self.beam, eos.size(1)
        device, rows = score.device, torch.arange(width, device=score.device).expand(batch, -1)
        open_ = still_open.unsqueeze(1)
        full = self.full.unsqueeze(1).expand(-1, width)
        kept = [
            chosen // self.candidate_slots,
            token.gather(1, chosen),
            score.gather(1, chosen),
            valid,
            met.gather(1, chosen),
        ]
        order = torch.where(finishing, eos, NEG_INF).sort(dim=1, descending=True, stable=True).indices
        ended = [x.gather(1, order) for x in (rows, torch.full_like(rows, EOS), eos, finishing, full)]
        unmet = [rows, torch.full_like(rows, EOS), eos, cut, row_met]
        # what is left: the bank candidates (banks in the order they first appear) and the ending EOS
        taken = torch.zeros_like(member).scatter(1, chosen, valid)
        index = torch.arange(n, device=device)
        first = torch.where(step.same_bank() & member.unsqueeze(2), index, n).min(2).values
        seen = torch.cat([first * n + index, n * n + rows], dim=1)
        considered = torch.cat([member & ~taken, ending & ~finishing], dim=1)
        all_scores = torch.cat([score, eos], dim=1)
        ahead = considered.unsqueeze(1) & (
            (all_scores.unsqueeze(1) > all_scores.unsqueeze(2))
            | ((all_scores.unsqueeze(1) == all_scores.unsqueeze(2)) & (seen.unsqueeze(1) < seen.unsqueeze(2)))
        )
        rank = torch.where(considered, ahead.sum(2), k)
        left = torch.full((batch, k + 1), n + width, dtype=torch.long, device=device)
        left = left.scatter(1, rank.clamp(max=k), torch.arange(n + width, device=device).expand(batch, -1))[:, :k]
        has = left < n + width
        left = left.clamp(max=n + width - 1)
        origin = torch.cat(
            [torch.div(index, self.candidate_slots, rounding_mode="floor").expand(batch, -1), rows], dim=1
        )
        tokens = torch.cat([token, torch.full_like(rows, EOS)], dim=1)
        counts = torch.cat([met, full], dim=1)
        pruned = [x.gather(1, left) for x in (origin, tokens, all_scores)] + [has, counts.gather(1, left)]
        slots = [_padded(part, k) for part in (kept, ended, unmet)] + [pruned]
        origin, token, score, status, met = (torch.cat(column, dim=1) for column in zip(*slots))
        status = torch.cat(
            [torch.full_like(kept[0], TreeBuffers.KEPT)]
            + [torch.full((batch, 2 * k), TreeBuffers.FINISHED, dtype=torch.long, device=device)]
            + [torch.full_like(kept[0], TreeBuffers.PRUNED)],
            dim=1,
        ).masked_fill(~(status & open_), 0)
        self.tree.write_slots(t, groups, origin, token, score, status, met)

    def results(self, loop: _ConstrainedLoop, steps: int) -> list[list[Hypothesis]]:
        """Each sentence's n best, those that met every constraint first."""
        met, unmet = self.hypotheses(loop.finished, steps), self.hypotheses(loop.unmet, steps)
        return [(a + b)[: self.n_best] for a, b in zip(met, unmet)]


def _before(score: Tensor) -> Tensor:
    """[b, i, j]: candidate j comes before candidate i in a stable sort by descending score."""
    n = score.size(1)
    earlier = torch.arange(n, device=score.device).unsqueeze(0) < torch.arange(n, device=score.device).unsqueeze(1)
    theirs, ours = score.unsqueeze(1), score.unsqueeze(2)
    return (theirs > ours) | ((theirs == ours) & earlier)


def _padded(columns: list[Tensor], k: int) -> list[Tensor]:
    """Tree columns (B, w) padded to (B, k) (the first step's w is 1): the padding's status False."""
    return [F.pad(c, (0, k - c.size(1)), value=False if c.dtype == torch.bool else 0) for c in columns]
