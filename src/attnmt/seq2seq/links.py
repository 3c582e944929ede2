"""Word links read from an attention matrix: each output word linked to the source words it
attended to (argmax or a threshold), with the subword pieces merged into whitespace-separated
words and "</s>" left out. The one place that turns soft attention into hard links: translation's
alignments (attnmt.translation.align) and every Translation's ``alignment`` use it."""

from __future__ import annotations

import numpy as np

from attnmt.viz.words import merge_pieces

EOS_PIECE = "</s>"


Link = tuple[int, int]  # (source word index i, target word index j), 0-based


def without_eos(pieces: list[str]) -> list[str]:
    return pieces[:-1] if pieces and pieces[-1] == EOS_PIECE else pieces


def word_matrix(matrix: np.ndarray, src_pieces: list[str], tgt_pieces: list[str]) -> np.ndarray:
    """Piece attention (len(tgt_pieces), len(src_pieces)) -> word attention (target words, source words).

    The "</s>" row and column are dropped, then pieces are merged as in the figures
    (attnmt.viz.words.merge_pieces): a source word gets the sum of the weights of its pieces,
    a target word the mean over its pieces.
    """
    matrix = np.asarray(matrix)
    if matrix.shape != (len(tgt_pieces), len(src_pieces)):
        raise ValueError(
            f"attention matrix of shape {matrix.shape} does not match "
            f"{len(tgt_pieces)} target and {len(src_pieces)} source pieces"
        )
    src, tgt = without_eos(src_pieces), without_eos(tgt_pieces)
    return merge_pieces(src, tgt, matrix[: len(tgt), : len(src)])[2]


def drop_eos(matrix: np.ndarray, src_pieces: list[str], tgt_pieces: list[str]) -> np.ndarray:
    """The piece matrix without the "</s>" row and column (for alignments between pieces)."""
    return np.asarray(matrix)[: len(without_eos(tgt_pieces)), : len(without_eos(src_pieces))]


def alignments_from_attention(matrix_words: np.ndarray, method: str = "argmax", threshold: float = 0.5) -> list[Link]:
    """Links (i, j), i a source index (column), j a target index (row), both 0-based, sorted.

    "argmax": every target word links to the source word it attends to most.
    "threshold": every (i, j) whose weight is at least ``threshold`` (none, one or several per target word).
    """
    matrix = np.asarray(matrix_words)
    if matrix.ndim != 2:
        raise ValueError(f"expected a 2-d matrix (target x source), got shape {matrix.shape}")
    if method == "argmax":
        if matrix.shape[1] == 0:
            return []
        return sorted((int(i), j) for j, i in enumerate(matrix.argmax(axis=1)))
    if method == "threshold":
        if not 0 < threshold <= 1:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        rows, cols = np.nonzero(matrix >= threshold)
        return sorted((int(i), int(j)) for j, i in zip(rows, cols))
    raise ValueError(f"unknown alignment method {method!r}; expected 'argmax' or 'threshold'")


def shifted_by_one(matrix: np.ndarray) -> np.ndarray:
    """The piece attention with row t taken from step t + 1: the weights computed right after
    target piece t was read, which with some variants align better with it than those that
    predicted it. The "</s>" row (dropped later) keeps its own weights."""
    matrix = np.asarray(matrix)
    return np.concatenate([matrix[1:], matrix[-1:]]) if len(matrix) else matrix


def output_links(
    matrix: np.ndarray,
    src_pieces: list[str],
    tgt_pieces: list[str],
    method: str = "argmax",
    threshold: float = 0.5,
    words: bool = True,
    shift: bool = False,
) -> list[Link]:
    """The links of one translation's attention (rows: its output pieces, columns: its source
    pieces, "</s>" included or not; it is left out): word links (i source word, j output word, the
    words that the pieces make, which are the whitespace-separated words of the texts), or with
    ``words=False`` piece links; ``shift``: see shifted_by_one."""
    matrix = shifted_by_one(matrix) if shift else np.asarray(matrix)
    merged = word_matrix(matrix, src_pieces, tgt_pieces) if words else drop_eos(matrix, src_pieces, tgt_pieces)
    return alignments_from_attention(merged, method, threshold)
