"""An alignment layer on a frozen translation model: which source piece wrote each target piece.

The translation model's attention looks at the source *before* it knows the word it will write
(E4 of docs/experiments.md: 61-67 % AER). The alignment layer answers after: it is trained, with
the translation model frozen, to explain each target piece y_t as written by one source piece,
and its posterior over those pieces, which has seen y_t, is the alignment:

    prior       a_t,i      = softmax_i( (W_q s_t) . (W_k h_i) / sqrt(d) + beta log alpha_t,i )
    lexicon     p(y | x_i) = softmax( W_o tanh(E[x_i]) )
    output      p(y_t | y_<t, x) = sum_i a_t,i p(y_t | x_i)
    alignment   r_t,i      = a_t,i p(y_t | x_i) / p(y_t | y_<t, x)

s_t is the frozen decoder's state that predicts y_t, h_i the frozen encoder's state of source
piece i, alpha_t,i the frozen model's own attention at that step (the prior starts from where the
model looked: 2 points of AER on E4), E the layer's own embedding of the source piece x_i. The
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

import numpy as np
import torch
from torch import Tensor, nn

from attnmt.core.devices import model_device, to_numpy
from attnmt.data.batching import Batch, inference_batches, make_batch
from attnmt.data.subwords import EOS, PAD


class AlignmentLayer(nn.Module):
    def __init__(self, state_size: int, memory_size: int, src_vocab_size: int, tgt_vocab_size: int, size: int):
        super().__init__()
        self.size = size
        self.W_q = nn.Linear(state_size, size)
        self.W_k = nn.Linear(memory_size, size)
        self.E = nn.Embedding(src_vocab_size, size, padding_idx=PAD)
        self.W_o = nn.Linear(size, tgt_vocab_size)
        self.beta = nn.Parameter(torch.ones(()))

    def forward(self, states: Tensor, memory: Tensor, mask: Tensor, attention: Tensor, src: Tensor,
                targets: Tensor, uniform_prior: bool = False) -> tuple[Tensor, Tensor]:
        """states (B,T,state) s_t, memory (B,S,memory) h_i, mask (B,S) True at real source
        pieces, attention (B,T,S) alpha_t,i, src (B,S) the pieces' ids, targets (B,T) y_t ->
        log p(y_t | y_<t, x) (B,T) and the
        alignment r (B,T,S), each row a distribution over the source pieces that may explain y_t
        (explaining_pieces).
        ``uniform_prior``: a_t,i = 1/|x| (IBM model 1), the first steps of training."""
        scores = self.W_q(states) @ self.W_k(memory).transpose(1, 2) / math.sqrt(self.size)
        scores = scores + self.beta * attention.clamp(min=1e-6).log()  # (a weight of 0 is not -inf: a small prior)
        if uniform_prior:
            scores = torch.zeros_like(scores)
        allowed = explaining_pieces(mask, targets)
        log_prior = scores.masked_fill(~allowed, float("-inf")).log_softmax(dim=-1)  # (B,T,S)
        log_lexicon = self.W_o(torch.tanh(self.E(src))).log_softmax(dim=-1)  # (B,S,V)
        wanted = targets.clamp(min=0)[:, None, :].expand(-1, src.size(1), -1)  # (B,S,T)
        log_lexicon_of_y = log_lexicon.gather(2, wanted).transpose(1, 2)  # (B,T,S): log p(y_t | x_i)
        log_joint = log_prior + log_lexicon_of_y
        log_output = log_joint.logsumexp(dim=-1)
        return log_output, (log_joint - log_output[..., None]).exp()

    def loss(self, translation_model: nn.Module, batch: Batch, uniform_prior: bool = False) -> Tensor:
        """-log p of the batch's real target pieces, summed."""
        log_output, _ = self(*frozen_features(translation_model, batch), batch.src, batch.tgt_out, uniform_prior)
        return -log_output[batch.tgt_out != PAD].sum()


def explaining_pieces(mask: Tensor, targets: Tensor) -> Tensor:
    """(B,T,S): the source pieces that may explain each target piece. "</s>" explains "</s>" and
    the words explain the words: else the source "</s>", in every sentence, learns to emit any
    word (a catch-all like the NULL word of the IBM models) and the words it takes get no link.
    A source of "</s>" alone explains everything."""
    source_eos = torch.zeros_like(mask)
    source_eos[torch.arange(mask.size(0), device=mask.device), mask.sum(dim=1) - 1] = True  # (B,S)
    allowed = mask[:, None, :] & (source_eos[:, None, :] == (targets == EOS)[:, :, None])
    return allowed | (mask[:, None, :] & ~allowed.any(dim=-1, keepdim=True))


def layer_for(translation_model: nn.Module, src_vocab_size: int, tgt_vocab_size: int, size: int) -> AlignmentLayer:
    """An untrained alignment layer of ``size`` that fits the states of ``translation_model``."""
    config = translation_model.config
    if config.type == "transformer":
        state_size = memory_size = config.d_model
    else:
        state_size, memory_size = config.decoder_hidden, translation_model.encoder.output_size
    return AlignmentLayer(state_size, memory_size, src_vocab_size, tgt_vocab_size, size)


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


def posteriors(layer: AlignmentLayer, translator, sources: list[str], targets: list[str],
               batch_size: int = 32) -> list[np.ndarray]:
    """The alignment r of every pair, as force_attention gives the attention: per pair an array
    (target pieces + EOS) x (source pieces + EOS) whose rows sum to 1, in input order."""
    src_ids = translator.src_subwords.encode(list(sources))
    tgt_ids = translator.tgt_subwords.encode(list(targets))
    results: list[np.ndarray | None] = [None] * len(sources)
    model, device = translator.model, model_device(translator.model)
    lengths = [len(s) + len(t) for s, t in zip(src_ids, tgt_ids)]
    layer.eval()
    for indices in inference_batches(lengths, batch_size):
        batch = make_batch([src_ids[i] for i in indices], [tgt_ids[i] for i in indices]).to(device)
        with torch.no_grad():
            _, alignment = layer(*frozen_features(model, batch), batch.src, batch.tgt_out)
        alignment = to_numpy(alignment)
        for row, i in enumerate(indices):
            results[i] = alignment[row, : len(tgt_ids[i]) + 1, : len(src_ids[i]) + 1].copy()
    return results
