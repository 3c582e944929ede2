"""The decomposable attention model of Parikh et al. (2016) for sentence pairs: attend, compare,
aggregate, with no recurrence at all.

A premise a = (a_1 ... a_la) and a hypothesis b = (b_1 ... b_lb), their words embedded and
projected to ``hidden_size``:

    attend      e_ij    = F(a_i)^T F(b_j)
                beta_i  = sum_j softmax_j(e_ij) b_j          the part of b aligned to a_i
                alpha_j = sum_i softmax_i(e_ij) a_i          the part of a aligned to b_j
    compare     v1_i = G([a_i; beta_i])      v2_j = G([b_j; alpha_j])
    aggregate   v1 = sum_i v1_i    v2 = sum_j v2_j    y = H([v1; v2])    (class scores)

F, G and H are two-layer feed-forward networks with ReLU. ``attend="one-to-one"`` replaces the
paper's scores, whose softmaxes tend to send every word to one word of the other sentence (F's ReLU
outputs share a large component, and the task can be learned from the aggregate sums without any
alignment), by scores that align each word with its counterpart:

    e_ij  = (cos(F(a_i) - mean_k F(a_k), F(b_j) - mean_k F(b_k)) + [a_i is b_j]) / temperature
    then ``sinkhorn_rounds`` times: e_ij -= logsumexp_j e_ij; e_ij -= logsumexp_i e_ij

Centring removes the part F gives every word of a sentence, the cosine bounds the scores, and
[a_i is b_j], 1 where the two tokens are the same word, makes an unchanged word align with its copy
(the lexical overlap of NLI models); the Sinkhorn rounds (normalising rows,
then columns, in the log domain) share each word's weight out about once, so that a word whose copy
is missing ("red") goes to the word left over in its place ("blue"). The softmaxes below then run on
these scores. Optionally (``intra_attention``) each
sentence first attends to itself, with a bias for each distance between words:

    f_ij = F_intra(a_i)^T F_intra(a_j)
    a'_i = sum_j softmax_j(f_ij + d_{i-j}) a_j,    and a_i becomes [a_i; a'_i]

``normalizer`` (the config's attention_normalizer) replaces the two softmaxes of the attend step
by sparsemax or 1.5-entmax (attnmt.seq2seq.attention.normalize; Martins & Astudillo 2016 used
sparsemax in this place): each word then aligns with a few words of the other sentence, the others
getting exactly 0. Intra-sentence attention keeps its softmax.

Every sentence ends with the end-of-sentence token, something to attend to when no word of the
other sentence matches. Softmaxes run over real (non-padding) positions only (the weights of a
padding row or column are zero), and the sums of the aggregate step over real positions only, so a
sentence scores the same alone or padded in a batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn.functional import normalize

from attnmt.core.config import PairModelConfig
from attnmt.core.speed import Dropout
from attnmt.data.subwords import PAD
from attnmt.seq2seq.attention import normalize as normalize_scores


class FeedForward(nn.Sequential):
    """F, G and H of the paper: two ReLU layers, dropout before each."""

    def __init__(self, input_size: int, hidden_size: int, dropout: float):
        super().__init__(
            Dropout(dropout),
            nn.Linear(input_size, hidden_size),
            nn.ReLU(),
            Dropout(dropout),
            nn.Linear(hidden_size, hidden_size),
            nn.ReLU(),
        )


def masked_softmax(scores: Tensor, mask: Tensor, dim: int, normalizer: str = "softmax") -> Tensor:
    """softmax(scores) along ``dim`` over the positions where ``mask`` (broadcast to scores) is True;
    or another ``normalizer``, sparsemax or entmax15 (attnmt.seq2seq.attention.normalize)."""
    scores = scores.masked_fill(~mask, float("-inf"))
    if normalizer == "softmax":
        return torch.softmax(scores, dim=dim)
    return normalize_scores(scores.transpose(dim, -1), normalizer).transpose(dim, -1)


def masked_sum(values: Tensor, mask: Tensor) -> Tensor:
    """(B,L,H) values summed over the real positions of mask (B,L) -> (B,H)."""
    return (values * mask.unsqueeze(-1)).sum(dim=1)


def centred(values: Tensor, mask: Tensor) -> Tensor:
    """(B,L,H) values less their mean over the real positions of mask (B,L)."""
    mean = masked_sum(values, mask) / mask.sum(dim=1, keepdim=True).clamp(min=1)
    return values - mean.unsqueeze(1)


def sinkhorn(scores: Tensor, real: Tensor, rounds: int) -> Tensor:
    """(B,la,lb) log-domain scores with rows, then columns, normalised ``rounds`` times over the
    positions where ``real`` is True (others stay at a large negative score: no weight)."""
    low = -1e4  # finite, unlike -inf, so that a padding row normalises to itself without NaN
    scores = scores.masked_fill(~real, low)
    for _ in range(rounds):
        scores = (scores - scores.logsumexp(dim=2, keepdim=True)).masked_fill(~real, low)
        scores = (scores - scores.logsumexp(dim=1, keepdim=True)).masked_fill(~real, low)
    return scores


@dataclass
class PairOutput:
    """Every quantity of the model for a batch of B pairs (la premise, lb hypothesis positions)."""

    logits: Tensor  # (B,C) class scores y
    scores: Tensor  # (B,la,lb) e_ij
    premise_weights: Tensor  # (B,la,lb) softmax_j(e_ij): row i, premise word i over the hypothesis
    hypothesis_weights: Tensor  # (B,la,lb) softmax_i(e_ij): column j, hypothesis word j over the premise
    compared_premise: Tensor  # (B,la,H) v1_i
    compared_hypothesis: Tensor  # (B,lb,H) v2_j
    premise_summary: Tensor  # (B,H) v1
    hypothesis_summary: Tensor  # (B,H) v2


class IntraAttention(nn.Module):
    """a'_i = sum_j softmax_j(F_intra(a_i)^T F_intra(a_j) + d_{i-j}) a_j; signed distances beyond
    ``max_distance`` share the bias of max_distance."""

    def __init__(self, size: int, max_distance: int, dropout: float):
        super().__init__()
        self.F_intra = FeedForward(size, size, dropout)
        self.max_distance = max_distance
        self.d = nn.Parameter(torch.zeros(2 * max_distance + 1))

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        projected = self.F_intra(x)
        f = projected @ projected.transpose(1, 2)  # (B,L,L)
        positions = torch.arange(x.size(1), device=x.device)
        distance = (positions[:, None] - positions[None, :]).clamp(-self.max_distance, self.max_distance)
        weights = masked_softmax(f + self.d[distance + self.max_distance], mask.unsqueeze(1), dim=2)
        return torch.cat([x, weights @ x], dim=-1)


class DecomposableAttention(nn.Module):
    """The decomposable attention model of a vocabulary and classes; its sizes and settings are
    those of PairModelConfig (``build_pair_model``), named: keyword arguments only."""

    def __init__(
        self,
        vocab_size: int,
        classes: int,
        *,
        embedding_size: int = 100,
        hidden_size: int = 200,
        intra_attention: bool = False,
        max_distance: int = 10,
        dropout: float = 0.2,
        pad_id: int = 0,
        attend: str = "dot",
        temperature: float = 0.1,
        sinkhorn_rounds: int = 5,
        normalizer: str = "softmax",
    ):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embedding_size, padding_idx=pad_id)
        self.project = nn.Linear(embedding_size, hidden_size, bias=False)
        self.intra = IntraAttention(hidden_size, max_distance, dropout) if intra_attention else None
        size = 2 * hidden_size if intra_attention else hidden_size  # of a_i and b_j
        self.F = FeedForward(size, hidden_size, dropout)
        self.G = FeedForward(2 * size, hidden_size, dropout)
        self.H = FeedForward(2 * hidden_size, hidden_size, dropout)
        self.classify = nn.Linear(hidden_size, classes)  # the last layer of H: class scores y
        self.pad_id = pad_id
        self.attend, self.temperature, self.sinkhorn_rounds = attend, temperature, sinkhorn_rounds
        self.normalizer = normalizer

    def represent(self, tokens: Tensor, mask: Tensor) -> Tensor:
        """The words of one side: embedded, projected, and with intra-sentence attention, [a_i; a'_i]."""
        x = self.project(self.embed(tokens))
        return x if self.intra is None else self.intra(x, mask)

    def forward(self, premise: Tensor, hypothesis: Tensor) -> PairOutput:
        """premise (B,la), hypothesis (B,lb): token ids padded with pad_id."""
        mask_a, mask_b = premise != self.pad_id, hypothesis != self.pad_id
        a, b = self.represent(premise, mask_a), self.represent(hypothesis, mask_b)
        # attend
        real = mask_a.unsqueeze(2) & mask_b.unsqueeze(1)  # (B,la,lb): both positions real
        same = (premise.unsqueeze(2) == hypothesis.unsqueeze(1)) & real  # [a_i is b_j]
        e = self.scores(self.F(a), self.F(b), mask_a, mask_b, real, same)  # (B,la,lb)
        # over j; padding rows zero
        premise_weights = masked_softmax(e, mask_b.unsqueeze(1), dim=2, normalizer=self.normalizer) * real
        # over i; padding columns zero
        hypothesis_weights = masked_softmax(e, mask_a.unsqueeze(2), dim=1, normalizer=self.normalizer) * real
        beta = premise_weights @ b  # (B,la,size)
        alpha = hypothesis_weights.transpose(1, 2) @ a  # (B,lb,size)
        # compare
        v1_i = self.G(torch.cat([a, beta], dim=-1))
        v2_j = self.G(torch.cat([b, alpha], dim=-1))
        # aggregate
        v1, v2 = masked_sum(v1_i, mask_a), masked_sum(v2_j, mask_b)
        y = self.classify(self.H(torch.cat([v1, v2], dim=-1)))
        return PairOutput(y, e, premise_weights, hypothesis_weights, v1_i, v2_j, v1, v2)

    def scores(self, fa: Tensor, fb: Tensor, mask_a: Tensor, mask_b: Tensor, real: Tensor, same: Tensor) -> Tensor:
        """e_ij from F(a) (B,la,H) and F(b) (B,lb,H): the paper's dot products, or one-to-one scores
        (``same``: the pairs of positions holding the same token)."""
        if self.attend == "dot":
            return fa @ fb.transpose(1, 2)
        fa = normalize(centred(fa, mask_a), dim=-1)
        fb = normalize(centred(fb, mask_b), dim=-1)
        return sinkhorn((fa @ fb.transpose(1, 2) + same) / self.temperature, real, self.sinkhorn_rounds)


def build_pair_model(config: PairModelConfig, vocab_size: int, classes: int) -> DecomposableAttention:
    """The pair model of the config's model section (task: pairs) for a vocabulary and classes."""
    return DecomposableAttention(
        vocab_size,
        classes,
        embedding_size=config.embedding_size,
        hidden_size=config.hidden_size,
        intra_attention=config.intra_attention,
        max_distance=config.max_distance,
        dropout=config.dropout,
        pad_id=PAD,
        attend=config.attend,
        temperature=config.temperature,
        sinkhorn_rounds=config.sinkhorn_rounds,
        normalizer=config.attention_normalizer,
    )
