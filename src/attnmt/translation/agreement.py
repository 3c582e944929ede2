"""Alignment by agreement (Liang et al. 2006): the alignment layers of both directions, en->fr and
fr->en, trained at the same time, each also rewarded for agreeing with the other.

Alone, each direction's layer can explain a target word by a wrong source word as well as by the
right one (a rare source word that collects the links of other rare words, a function word linked
to the wrong one of its candidates); the other direction rarely makes the same mistake. With
forward posteriors r (target words x source words, attnmt.translation.alignment_layer) and
backward posteriors r' (source words x target words), both merged from pieces to words as the
links are read (a source word gets the sum of its pieces, a target word the mean), training
minimises

    - log p(y | x) / |y|  - log p'(x | y) / |x|  + lambda * sum_j,i (r_j,i - r'_i,j)^2 / |y words|

the squared-difference form of agreement of Cheng et al. (2016) for attention, here on the
aligners' posteriors. Words rather than pieces, because the two models' subword vocabularies
need not cut a word alike.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnmt.viz.words import word_spans

NO_WORD = -1  # the word index of "</s>" and of padding


def piece_words(pieces: list[str]) -> list[int]:
    """The word index of each piece (pieces without "</s>"), words as attnmt.viz.words.word_spans cuts them.

    >>> piece_words(["▁Ein", "▁Sch", "iff"])
    [0, 1, 1]
    """
    words = [NO_WORD] * len(pieces)
    for word, (start, end) in enumerate(word_spans(pieces)):
        words[start:end] = [word] * (end - start)
    return words


def word_index_tensor(words: list[list[int]], width: int) -> Tensor:
    """(B, width): each pair's piece -> word indices, padded (and "</s>" marked) with NO_WORD."""
    index = torch.full((len(words), width), NO_WORD, dtype=torch.long)
    for row, piece_word in enumerate(words):
        index[row, : len(piece_word)] = torch.tensor(piece_word, dtype=torch.long)
    return index


def word_posteriors(alignment: Tensor, tgt_words: Tensor, src_words: Tensor) -> Tensor:
    """Piece posteriors (B,T,S) -> word posteriors (B, target words, source words): a target word the
    mean of its pieces' rows, a source word the sum of its pieces' columns; "</s>" and padding
    (NO_WORD) dropped."""

    def membership(words: Tensor) -> Tensor:  # (B, pieces, words) one-hot, NO_WORD in no column
        count = int(words.max()) + 1 if words.numel() else 0
        return torch.nn.functional.one_hot(words + 1, count + 1)[..., 1:].to(alignment.dtype)

    tgt, src = membership(tgt_words), membership(src_words)
    tgt_mean = tgt / tgt.sum(dim=1, keepdim=True).clamp(min=1)
    return tgt_mean.transpose(1, 2) @ alignment @ src


def disagreement(forward: Tensor, backward: Tensor, agree: Tensor) -> Tensor:
    """sum_j,i (r_j,i - r'_i,j)^2 over the pairs where ``agree`` (B,) is True: forward (B, Wy, Wx)
    and backward (B, Wx', Wy') word posteriors, cut to the smaller shape (the same for a pair whose
    words agree; padding is zero in both)."""
    rows, columns = min(forward.size(1), backward.size(2)), min(forward.size(2), backward.size(1))
    difference = forward[:, :rows, :columns] - backward.transpose(1, 2)[:, :rows, :columns]
    return (difference.square().sum(dim=(1, 2)) * agree).sum()
