"""Decoding: greedy and batched beam search over a batch of source sentences.

Both return, for each sentence, hypotheses with their token ids (ending in EOS when the
model produced it), score and attention matrix (one row per output token, one column
per source token). Scores are log-probabilities divided by the length penalty of
Wu et al. (2016), lp(Y) = ((5 + |Y|) / 6) ** alpha, so greedy and beam scores compare.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from attnmt.data.subwords import BOS, EOS, PAD
from attnmt.models.base import EncoderDecoder


@dataclass
class Hypothesis:
    tokens: list[int]  # output ids, EOS included when produced
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


class BeamRecorder:
    """Records the search tree of each sentence; pass one to ``beam_search(record=...)``."""

    def __init__(self, batch: int, beam: int):
        self.trees = [[BeamNode(0, None, BOS, 0.0, 0, "root")] for _ in range(batch)]
        self.row_node = torch.zeros(batch * beam, dtype=torch.long)  # tree node of each live row
        self.beam = beam

    def step(self, t: int, active: Tensor, origin: Tensor, token: Tensor, score: Tensor, finished: Tensor,
             alive: Tensor):
        k = self.beam
        row_node = torch.zeros(alive.size(0) * k, dtype=torch.long)
        for g, sentence in enumerate(active.tolist()):
            tree, rank = self.trees[sentence], 0
            for j in range(origin.size(1)):
                if score[g, j] == float("-inf"):
                    continue
                status = "finished" if finished[g, j] else "kept" if alive[g, j] else "pruned"
                parent = int(self.row_node[g * k + origin[g, j]])
                tree.append(BeamNode(len(tree), parent, int(token[g, j]), float(score[g, j]), t + 1, status))
                if status == "kept":
                    row_node[g * k + rank] = len(tree) - 1
                    rank += 1
        self.row_node = row_node

    def keep_rows(self, rows: Tensor):
        self.row_node = self.row_node[rows]


def length_penalty(length: int, alpha: float) -> float:
    return ((5.0 + length) / 6.0) ** alpha


def max_output_lengths(src_lengths: Tensor, ratio: float, offset: int) -> list[int]:
    return [max(1, int(ratio * n + offset)) for n in src_lengths.tolist()]


def _hypothesis(tokens: list[int], log_prob: float, attention: Tensor | None, alpha: float,
                src_length: int) -> Hypothesis:
    if attention is not None:
        attention = attention[: len(tokens), :src_length].clone()
    return Hypothesis(tokens, log_prob / length_penalty(len(tokens), alpha), log_prob, attention)


@torch.inference_mode()
def greedy_search(model: EncoderDecoder, src: Tensor, src_lengths: Tensor, max_lengths: list[int],
                  alpha: float = 1.0) -> list[list[Hypothesis]]:
    """At each step take the most probable token. A sentence stops at EOS or its length limit
    and leaves the batch, so later steps compute only the sentences still going."""
    batch, steps = src.size(0), max(max_lengths)
    memory = model.encode(src, src_lengths)
    state = model.init_state(memory)
    prev = torch.full((batch,), BOS, dtype=torch.long, device=src.device)
    limits = torch.tensor(max_lengths, device=src.device)
    active = torch.arange(batch, device=src.device)  # the sentence of each row
    tokens = torch.full((batch, steps), EOS, dtype=torch.long, device=src.device)
    log_probs = torch.zeros(batch, device=src.device)
    attention = None
    for t in range(steps):
        step = model.decode_step(prev, state, memory)
        state, weights = step.state, step.weights
        best, prev = step.log_probs.max(dim=-1)
        tokens[active, t] = prev
        log_probs[active] += best
        if weights is not None:
            if attention is None:
                attention = torch.zeros(batch, steps, weights.size(-1), device=src.device)
            attention[active, t] = weights
        going = (prev != EOS) & (limits[active] > t + 1)
        if not bool(going.all()):  # drop the finished sentences from the batch
            if not bool(going.any()):
                break
            rows = going.nonzero().view(-1)
            active, prev = active[rows], prev[rows]
            state, memory = state.select(rows), memory.select(rows)
    tokens = tokens.tolist()
    results = []
    for i in range(batch):
        seq = tokens[i][: _length_with_eos(tokens[i], max_lengths[i])]
        matrix = None if attention is None else attention[i]
        results.append([_hypothesis(seq, float(log_probs[i]), matrix, alpha, int(src_lengths[i]))])
    return results


def _length_with_eos(tokens: list[int], limit: int) -> int:
    return min(tokens.index(EOS) + 1 if EOS in tokens else len(tokens), limit)


@torch.inference_mode()
def beam_search(model: EncoderDecoder, src: Tensor, src_lengths: Tensor, max_lengths: list[int], beam: int = 5,
                n_best: int = 1, alpha: float = 1.0, record: BeamRecorder | None = None) -> list[list[Hypothesis]]:
    """Batched beam search: every sentence keeps ``beam`` live hypotheses as rows of one batch.

    A hypothesis that ends in EOS leaves the beam for the finished list of its sentence; a
    sentence is done when it has ``beam`` finished hypotheses or reaches its length limit,
    and its rows then leave the batch, so later steps only compute what is still open.
    With ``record``, every candidate considered is added to the sentence's search tree.
    """
    if n_best > beam:
        raise ValueError(f"n_best ({n_best}) cannot exceed the beam size ({beam})")
    batch, k = src.size(0), beam
    memory = model.encode(src, src_lengths)
    state = model.init_state(memory)
    # The k hypotheses of a sentence would start identical: the first step runs on one row per
    # sentence (width 1), and its best extensions then fill the sentence's k rows.
    width = 1
    scores = torch.zeros(batch, width, device=src.device)
    tokens = torch.full((batch, 1), BOS, dtype=torch.long, device=src.device)
    attention = torch.zeros(batch, 0, src.size(1), device=src.device) if model.has_attention else None
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    active = torch.arange(batch, device=src.device)  # sentence id of each group of k rows
    src_lengths_list = src_lengths.tolist()

    def finish(sentence: int, row: int, token: int | None, log_prob: float, weights: Tensor | None):
        seq = tokens[row, 1:].tolist() + ([token] if token is not None else [])
        rows_attention = None
        if attention is not None:
            rows_attention = attention[row] if weights is None else torch.cat([attention[row], weights[None]])
        finished[sentence].append(_hypothesis(seq, log_prob, rows_attention, alpha,
                                              src_lengths_list[sentence]))

    for t in range(max(max_lengths)):
        step = model.decode_step(tokens[:, -1], state, memory)
        log_probs, state, weights = step.log_probs, step.state, step.weights
        n = active.numel()
        top_scores, origin, next_token = _best_candidates(scores, log_probs, k)
        is_eos = next_token == EOS

        # EOS among the best k candidates: finished hypotheses.
        ends = is_eos & (top_scores > float("-inf")) & (torch.arange(2 * k, device=src.device) < k)
        for g, j in ends.nonzero().tolist():
            row = g * width + int(origin[g, j])
            finish(int(active[g]), row, EOS, float(top_scores[g, j]),
                   None if weights is None else weights[row])

        # The best k candidates that do not end in EOS stay alive.
        alive = ~is_eos & (torch.cumsum((~is_eos).long(), dim=1) <= k)
        if record is not None:
            record.step(t, active, origin, next_token, top_scores, ends, alive)
        origin = origin[alive].view(n, k)
        source_rows = (torch.arange(n, device=src.device).unsqueeze(1) * width + origin).view(-1)
        scores = top_scores[alive].view(n, k)
        tokens = torch.cat([tokens[source_rows], next_token[alive].view(-1, 1)], dim=1)
        state = state.select(source_rows)
        if attention is not None:
            attention = torch.cat([attention[source_rows], weights[source_rows].unsqueeze(1)], dim=1)
        if width < k:  # after the first step: k rows per sentence from now on
            memory, width = memory.select(torch.arange(n, device=src.device).repeat_interleave(k)), k

        # Sentences at their length limit finish with their live hypotheses.
        done = []
        for g, sentence in enumerate(active.tolist()):
            if len(finished[sentence]) < k and t + 1 >= max_lengths[sentence]:
                for j in range(k):
                    if scores[g, j] > float("-inf"):
                        finish(sentence, g * k + j, None, float(scores[g, j]), None)
            done.append(len(finished[sentence]) >= k or t + 1 >= max_lengths[sentence])
        keep = ~torch.tensor(done, device=src.device)
        if not bool(keep.any()):
            break
        if not bool(keep.all()):  # drop finished sentences from the batch
            rows = (torch.nonzero(keep).view(-1, 1) * k + torch.arange(k, device=src.device)).view(-1)
            active, scores, tokens = active[keep], scores[keep], tokens[rows]
            memory, state = memory.select(rows), state.select(rows)
            if record is not None:
                record.keep_rows(rows)
            if attention is not None:
                attention = attention[rows]

    return [sorted(hyps, key=lambda h: -h.score)[:n_best] for hyps in finished]


def _best_candidates(scores: Tensor, log_probs: Tensor, k: int) -> tuple[Tensor, Tensor, Tensor]:
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


def decode(model: EncoderDecoder, src: Tensor, src_lengths: Tensor, beam: int = 1, n_best: int = 1,
           alpha: float = 1.0, max_length_ratio: float = 1.5, max_length_offset: int = 10):
    """Greedy search (beam 1) or beam search."""
    max_lengths = max_output_lengths(src_lengths, max_length_ratio, max_length_offset)
    if beam == 1 and n_best == 1:
        return greedy_search(model, src, src_lengths, max_lengths, alpha)
    return beam_search(model, src, src_lengths, max_lengths, beam, n_best, alpha)
