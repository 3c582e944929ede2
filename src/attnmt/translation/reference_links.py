"""Reference word links as a training signal: a Pharaoh file of one line per corpus line, the
reference attention they make (each target position uniform over the source positions linked to
it), and the cross-entropy of a model's weights with it. Guided alignment trains the attention
with them (attnmt.translation.guided_alignment), train-aligner its alignment layers
(attnmt.translation.aligner)."""

from __future__ import annotations

from typing import Iterator

import torch
from torch import Tensor

from attnmt.core.errors import AttnmtError
from attnmt.data.corpus import stream_lines
from attnmt.seq2seq.links import Link
from attnmt.translation.align import parse_pharaoh


def alignment_loss(weights: Tensor, reference: Tensor) -> Tensor:
    """- sum_t sum_j q_t,j log a_t,j over the rows of ``reference`` that hold links.

    weights (B,T,S) the model's attention (rows sum to 1); reference (B,T',S') with T' <= T and
    S' <= S (the model may pad), rows that sum to 1 or 0 (no link)."""
    rows, columns = reference.shape[1], reference.shape[2]
    a = weights[:, :rows, :columns].float()
    # where q is 0 the term is 0, whatever a is: a masked-out position (a = 0) must not give 0 * -inf
    log_a = torch.where(reference > 0, torch.log(a.clamp_min(1e-9)), torch.zeros_like(a))
    return -(reference * log_a).sum()


def reference_attention(links: list[list[Link]], src_width: int, tgt_width: int) -> Tensor:
    """(B, tgt_width, src_width): row t of pair b uniform over the source pieces linked to target
    piece t, zero where it has none."""
    reference = torch.zeros(len(links), tgt_width, src_width)
    for b, pair_links in enumerate(links):
        for s, t in pair_links:
            reference[b, t, s] = 1.0
    counts = reference.sum(dim=2, keepdim=True)
    return reference / counts.clamp_min(1.0)


def read_link_file(
    path, lines: int, one_based: bool, corpus: str = "data.train", field: str = "training.guided_alignment.links"
) -> list[list[Link]]:
    """The links of every line of a Pharaoh file that must have ``lines`` lines (one per line of
    ``corpus``, which ``field`` names it for)."""
    return list(stream_link_file(path, lines, one_based, corpus, field))


def stream_link_file(
    path, lines: int, one_based: bool, corpus: str = "data.train", field: str = "training.guided_alignment.links"
) -> Iterator[list[Link]]:
    """`read_link_file`'s links one line at a time (the file read as it goes); the error on the
    number of lines comes when the file ends."""
    count = 0
    for count, line in enumerate(stream_lines(path), start=1):
        yield sorted(parse_pharaoh(line, one_based, allow_possible=False, where=f"{path}: line {count}")[0])
    if count != lines:
        raise AttnmtError(
            f"{path}: {count} lines of alignment links, but {corpus} has {lines} lines: "
            f"{field} needs one line per line of the training corpus"
        )
