"""From subword pieces to words: merge the attention matrix of a translation word by word.

Sentencepiece marks the first piece of every word with "▁" (U+2581): "▁Ein", "▁Sch", "iff", "</s>"
are the three words "Ein", "Schiff" and "</s>". A word starts at each piece that begins with "▁";
special tokens ("</s>", "<s>", "<pad>") are words of their own; the first piece always starts a word.

How weights are combined (rows are target tokens, columns source tokens, each row sums to 1):

* the pieces of one SOURCE word: their columns are SUMMED. The attention the decoder paid to a word
  is the total it paid to the word's pieces.
* the pieces of one TARGET word: their rows are AVERAGED. Each row is a probability distribution
  over the source and the mean of distributions is a distribution, so the merged rows still sum
  to 1 (summing would give rows that sum to the number of pieces).

Summing columns then averaging rows gives the same matrix as the other order.
"""

from __future__ import annotations

import numpy as np

WORD_START = "\u2581"  # "▁"
SPECIAL_TOKENS = frozenset({"</s>", "<s>", "<pad>"})


def word_spans(tokens: list[str]) -> list[tuple[int, int]]:
    """The words of a list of pieces, as half-open (start, end) index ranges covering every piece.

    >>> word_spans(["▁Ein", "▁Sch", "iff", "</s>"])
    [(0, 1), (1, 3), (3, 4)]
    """
    spans: list[tuple[int, int]] = []
    start = 0
    for i, token in enumerate(tokens):
        if i == 0:
            continue
        previous = tokens[i - 1]
        if token.startswith(WORD_START) or token in SPECIAL_TOKENS or previous in SPECIAL_TOKENS:
            spans.append((start, i))
            start = i
    if tokens:
        spans.append((start, len(tokens)))
    return spans


def join_pieces(pieces: list[str]) -> str:
    """The text of one word: its pieces concatenated, without the "▁" marks ("▁" alone stays "▁")."""
    text = "".join(pieces).replace(WORD_START, "")
    if not text and pieces:
        return WORD_START
    return text


def merge_pieces(
    source_tokens: list[str], target_tokens: list[str], attention
) -> tuple[list[str], list[str], np.ndarray]:
    """Merges subword pieces into words: returns (source_words, target_words, matrix).

    ``attention`` has one row per target piece and one column per source piece. In the merged
    matrix the column of a source word is the SUM of its pieces' columns and the row of a target
    word is the MEAN of its pieces' rows, so rows that summed to 1 still sum to 1 (see the module
    docstring). Words are the pieces joined without their "▁" marks.
    """
    matrix = np.asarray(attention, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape != (len(target_tokens), len(source_tokens)):
        raise ValueError(
            f"attention has shape {matrix.shape}, expected (len(target_tokens), "
            f"len(source_tokens)) = ({len(target_tokens)}, {len(source_tokens)})"
        )
    source_spans, target_spans = word_spans(source_tokens), word_spans(target_tokens)
    columns = (
        np.stack([matrix[:, a:b].sum(axis=1) for a, b in source_spans], axis=1)
        if source_spans
        else np.zeros((len(target_tokens), 0))
    )
    merged = (
        np.stack([columns[a:b].mean(axis=0) for a, b in target_spans], axis=0)
        if target_spans
        else np.zeros((0, columns.shape[1]))
    )
    return (
        [join_pieces(source_tokens[a:b]) for a, b in source_spans],
        [join_pieces(target_tokens[a:b]) for a, b in target_spans],
        merged,
    )
