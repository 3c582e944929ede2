"""An alignment layer on a frozen translation model: which source piece wrote each target piece.

The translation model's attention looks at the source *before* it knows the word it will write
(E4 of docs/experiments.md: 61-67 % AER). The alignment layer answers after: it is trained, with
the translation model frozen, to explain each target piece y_t as written by one source piece,
and its posterior over those pieces, which has seen y_t, is the alignment:

    prior       a_t,i      = softmax_i( (W_q s_t) . (W_k h_i) / sqrt(d) + beta log alpha_t,i
                                        + D[bucket((i + 1/2) / m - (t + 1/2) / n)] )
    lexicon     p(y | x_i) = softmax( W_o tanh(E[x_i]) )
    output      p(y_t | y_<t, x) = sum_i a_t,i p(y_t | x_i)
    alignment   r_t,i      = a_t,i p(y_t | x_i) / p(y_t | y_<t, x)

and, with a NULL word (``null_prior`` p0 > 0, as in the IBM models), a word may be explained by
no source word: the source pieces' prior is scaled by 1 - p0, and

    NULL        a_t,0 = p0,   p(y | NULL) = softmax( W_o tanh(e_0) )
    output      p(y_t | y_<t, x) = p0 p(y_t | NULL) + sum_i a_t,i p(y_t | x_i)

so that a row of r sums to 1 - r_t,0: a word mostly explained by NULL gets no link above a
threshold (and less weight in a symmetrization by the mean).

With ``jump_width`` w > 0, an HMM's jump term: a first pass gives r without it, then the prior adds

    jump        log sum_j q_t-1,j exp( J[clip(i - j, -w, w)] )

q_t-1 that first pass's alignment of the previous target piece (the first piece jumps from a place
before the source), J learnt; the second pass's r is the alignment. With ``lookahead`` too, the
place the next target piece went, as an HMM's backward pass tells it (the last word jumps to "</s>"):

    lookahead   log sum_j q_t+1,j exp( K[clip(j - i, -w, w)] )

K learnt. The jump term is the HMM's forward message, the lookahead its backward message, each
read from the first pass rather than summed over every path: when a source sentence has two
"the", the word after a target "le" tells which of them wrote it.

s_t is the frozen decoder's state that predicts y_t, h_i the frozen encoder's state of source
piece i, alpha_t,i the frozen model's own attention at that step (the prior starts from where the
model looked: 2 points of AER on E4), D a learnt bias for each distance from the diagonal (m source
and n target pieces, "</s>" not counted; the distance cut into ``diagonal_buckets`` equal buckets
over [-1, 1]; none with 0 buckets), as fast_align's diagonal tension, learnt rather than fixed: a
word tends to be written near the place of its source word, which tells apart two candidates of
the same function word and keeps rare words from collecting links far away. E the layer's own
embedding of the source piece x_i. The
lexicon sees only the piece itself, not its context: to explain y_t the posterior must point at a
piece that translates it. beta is learnt (0.5 on E4).
Training maximises the output's likelihood of the training text (attnmt.translation.aligner).

Where it comes from: Zenkel et al. (2019, 2020) train an alignment layer on a frozen Transformer
that predicts the target word from attention over the source *embeddings*; Shift-Att/Shift-AET
(Chen et al. 2020) read the alignment where the target word is known. The prior-times-lexicon
mixture is the form of the neural HMM / IBM models (Wang et al. 2018; Alkhouli et al. 2018). This
layer is attnmt's combination of those ideas, not a reimplementation of one paper.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnmt.data.batching import Batch
from attnmt.data.subwords import EOS, PAD


class AlignmentLayer(nn.Module):
    def __init__(
        self,
        state_size: int,
        memory_size: int,
        src_vocab_size: int,
        tgt_vocab_size: int,
        size: int,
        diagonal_buckets: int = 0,
        null_prior: float = 0.0,
        jump_width: int = 0,
        lookahead: bool = False,
    ):
        super().__init__()
        self.size = size
        self.W_q = nn.Linear(state_size, size)
        self.W_k = nn.Linear(memory_size, size)
        self.E = nn.Embedding(src_vocab_size, size, padding_idx=PAD)
        self.W_o = nn.Linear(size, tgt_vocab_size)
        self.beta = nn.Parameter(torch.ones(()))
        self.D = nn.Parameter(torch.zeros(diagonal_buckets)) if diagonal_buckets else None
        self.e_0 = nn.Parameter(torch.zeros(size)) if null_prior else None  # the NULL word's embedding
        self.J = nn.Parameter(torch.zeros(2 * jump_width + 1)) if jump_width else None  # jumps -w..w
        if lookahead and not jump_width:
            raise ValueError("the lookahead reads the jumps of width jump_width: it needs jump_width > 0")
        self.K = nn.Parameter(torch.zeros(2 * jump_width + 1)) if lookahead else None  # to the next: -w..w
        if null_prior:
            self.register_buffer("p0", torch.tensor(float(null_prior)))  # saved with the weights
        else:
            self.p0 = None

    def forward(
        self,
        states: Tensor,
        memory: Tensor,
        mask: Tensor,
        attention: Tensor,
        src: Tensor,
        targets: Tensor,
        uniform_prior: bool = False,
    ) -> tuple[Tensor, Tensor]:
        """states (B,T,state) s_t, memory (B,S,memory) h_i, mask (B,S) True at real source
        pieces, attention (B,T,S) alpha_t,i, src (B,S) the pieces' ids, targets (B,T) y_t ->
        log p(y_t | y_<t, x) (B,T) and the
        alignment r (B,T,S), each row a distribution over the source pieces that may explain y_t
        (explaining_pieces).
        ``uniform_prior``: a_t,i = 1/|x| (IBM model 1), the first steps of training."""
        scores = self.W_q(states) @ self.W_k(memory).transpose(1, 2) / math.sqrt(self.size)
        scores = scores + self.beta * attention.clamp(min=1e-6).log()  # (a weight of 0 is not -inf: a small prior)
        if self.D is not None:
            scores = scores + self.D[diagonal_distance_buckets(mask, targets, len(self.D))]
        if uniform_prior:
            scores = torch.zeros_like(scores)
        log_lexicon = self.W_o(torch.tanh(self.E(src))).log_softmax(dim=-1)  # (B,S,V)
        wanted = targets.clamp(min=0)[:, None, :].expand(-1, src.size(1), -1)  # (B,S,T)
        log_lexicon_of_y = log_lexicon.gather(2, wanted).transpose(1, 2)  # (B,T,S): log p(y_t | x_i)
        log_output, alignment = self._explain(scores, log_lexicon_of_y, mask, targets)
        if self.J is not None and not uniform_prior:  # again, knowing where each previous piece went
            scores = scores + self.jump_scores(alignment.detach(), mask)
            log_output, alignment = self._explain(scores, log_lexicon_of_y, mask, targets)
        return log_output, alignment

    def _explain(
        self, scores: Tensor, log_lexicon_of_y: Tensor, mask: Tensor, targets: Tensor
    ) -> tuple[Tensor, Tensor]:
        """The prior's scores (B,T,S) and log p(y_t | x_i) (B,T,S) -> log p(y_t | y_<t, x) and r."""
        allowed = explaining_pieces(mask, targets)
        log_prior = scores.masked_fill(~allowed, float("-inf")).log_softmax(dim=-1)  # (B,T,S)
        log_joint = log_prior + log_lexicon_of_y
        if self.p0 is None:
            log_output = log_joint.logsumexp(dim=-1)
        else:  # "</s>" is still explained by "</s>" alone
            word = targets != EOS
            log_joint = log_joint + torch.where(word, torch.log1p(-self.p0), 0.0)[..., None]
            log_lexicon_null = self.W_o(torch.tanh(self.e_0)).log_softmax(dim=-1)  # (V,)
            log_null = (self.p0.log() + log_lexicon_null[targets.clamp(min=0)]).masked_fill(~word, float("-inf"))
            log_output = torch.logaddexp(log_joint.logsumexp(dim=-1), log_null)
        return log_output, (log_joint - log_output[..., None]).exp()

    def jump_scores(self, alignment: Tensor, mask: Tensor) -> Tensor:
        """(B,T,S): log sum_j q_t-1,j exp(J[i - j]), q_t-1 the first pass's alignment of the previous
        target piece over the source words ("</s>" and NULL left out, renormalised), or for the first
        piece a virtual place before the first source piece; jumps beyond the width share the last J.
        With the lookahead K, plus log sum_j q_t+1,j exp(K[j - i]), q_t+1 the first pass's alignment of
        the next target piece over the source pieces ("</s>" included: where the last word's next,
        "</s>", goes)."""
        words = mask.clone()
        words[torch.arange(mask.size(0), device=mask.device), mask.sum(dim=1) - 1] = False  # not "</s>"
        previous = F.pad(_renormalised(alignment, words)[:, :-1], (1, 0, 1, 0))  # (B,T,S+1): q_t-1 over -1, 0, ..
        previous[:, 0, 0] = 1.0  # the first piece jumps from place -1
        places = torch.arange(-1, mask.size(1), device=mask.device)  # j, from the virtual -1
        here = torch.arange(mask.size(1), device=mask.device)  # i
        scores = (previous @ self._jumps(self.J, here[None, :] - places[:, None])).clamp(min=1e-30).log()
        if self.K is None:
            return scores
        following = F.pad(_renormalised(alignment, mask)[:, 1:], (0, 0, 0, 1))  # (B,T,S): q_t+1 (none after the last)
        lookahead = following @ self._jumps(self.K, here[:, None] - here[None, :])  # (S_j, S_i): exp K[j - i]
        return scores + lookahead.clamp(min=1e-30).log()  # (a row with no next: the same for every i)

    @staticmethod
    def _jumps(weights: Tensor, jump: Tensor) -> Tensor:
        """exp weights[jump], the jumps clipped to the width of ``weights`` (-w..w)."""
        width = (len(weights) - 1) // 2
        return weights[jump.clamp(-width, width) + width].exp()


def _renormalised(alignment: Tensor, allowed: Tensor) -> Tensor:
    """(B,T,S): each row of ``alignment`` over the ``allowed`` (B,S) places only, summing to 1 (or 0)."""
    q = alignment * allowed[:, None, :]
    return q / q.sum(dim=-1, keepdim=True).clamp(min=1e-9)


def diagonal_distance_buckets(mask: Tensor, targets: Tensor, buckets: int) -> Tensor:
    """(B,T,S): the bucket of each (t, i)'s distance from the diagonal, (i + 1/2) / m - (t + 1/2) / n
    with m source and n target pieces ("</s>" not counted; at least 1), cut into ``buckets`` equal
    buckets over [-1, 1]."""
    m = (mask.sum(dim=1) - 1).clamp(min=1).to(torch.float32)  # (B,)
    n = ((targets != PAD).sum(dim=1) - 1).clamp(min=1).to(torch.float32)
    i = torch.arange(mask.size(1), device=mask.device, dtype=torch.float32)
    t = torch.arange(targets.size(1), device=mask.device, dtype=torch.float32)
    distance = (i[None, None, :] + 0.5) / m[:, None, None] - (t[None, :, None] + 0.5) / n[:, None, None]
    return ((distance.clamp(-1, 1) + 1) / 2 * (buckets - 1)).round().long()


def explaining_pieces(mask: Tensor, targets: Tensor) -> Tensor:
    """(B,T,S): the source pieces that may explain each target piece. "</s>" explains "</s>" and
    the words explain the words: else the source "</s>", in every sentence, learns to emit any
    word (a catch-all like the NULL word of the IBM models) and the words it takes get no link.
    A source of "</s>" alone explains everything."""
    source_eos = torch.zeros_like(mask)
    source_eos[torch.arange(mask.size(0), device=mask.device), mask.sum(dim=1) - 1] = True  # (B,S)
    allowed = mask[:, None, :] & (source_eos[:, None, :] == (targets == EOS)[:, :, None])
    return allowed | (mask[:, None, :] & ~allowed.any(dim=-1, keepdim=True))


def layer_for(
    translation_model: nn.Module,
    src_vocab_size: int,
    tgt_vocab_size: int,
    size: int,
    diagonal_buckets: int = 0,
    null_prior: float = 0.0,
    jump_width: int = 0,
    lookahead: bool = False,
) -> AlignmentLayer:
    """An untrained alignment layer of ``size`` that fits the states of ``translation_model``."""
    config = translation_model.config
    if config.type == "transformer":
        state_size = memory_size = config.d_model
    else:
        state_size, memory_size = config.decoder_hidden, translation_model.encoder.output_size
    return AlignmentLayer(
        state_size,
        memory_size,
        src_vocab_size,
        tgt_vocab_size,
        size,
        diagonal_buckets,
        null_prior,
        jump_width,
        lookahead,
    )


@torch.no_grad()
def frozen_features(translation_model: nn.Module, batch: Batch) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """What the alignment layer reads of the frozen model: the decoder states s_t (B,T,state),
    the encoder states h_i (B,S,memory), the source mask (B,S) and the model's attention alpha
    (B,T,S: a Transformer's last layer, heads averaged; uniform for a model without attention)."""
    memory = translation_model.encode(batch.src, batch.src_lengths)
    states, attention = translation_model.decoder_outputs_of(memory, batch.tgt_in)
    if attention is None:
        attention = torch.ones(states.shape[:2] + memory.mask.shape[1:], device=states.device)
    return states.float(), memory.states.float(), memory.mask, attention.float()
