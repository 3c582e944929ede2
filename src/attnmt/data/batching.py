"""Batches of similar length under a size budget, in a seeded, reproducible order.

Sorting the whole corpus by length would make every epoch the same; shuffling alone
would pad a lot. So each epoch shuffles, cuts the corpus into pools of many batches,
sorts each pool by length, cuts it into batches, and shuffles the batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import torch
from torch import Tensor

from attnmt.core import speed
from attnmt.data.subwords import BOS, EOS, PAD


@dataclass
class Batch:
    src: Tensor  # (B,S) source ids, padded with PAD
    src_lengths: Tensor  # (B,)
    tgt_in: Tensor | None = None  # (B,T) BOS y_1 ... y_n
    tgt_out: Tensor | None = None  # (B,T) y_1 ... y_n EOS
    indices: list[int] | None = None  # positions of these examples in the corpus
    # Counted on the CPU before the batch moves to a GPU, where counting would wait for the GPU.
    counted_target_tokens: int | None = None
    # Guided alignment: (B,T,S) the reference attention of each target token (attnmt.translation.guided_alignment)
    alignment: Tensor | None = None

    @property
    def target_tokens(self) -> int:
        if self.counted_target_tokens is not None:
            return self.counted_target_tokens
        return int((self.tgt_out != PAD).sum())

    def to(self, device: torch.device | str) -> Batch:
        device = torch.device(device)
        if device.type == "cpu":
            return self
        move = lambda t: None if t is None else t.to(device, non_blocking=True)  # noqa: E731
        counted = None if self.tgt_out is None else self.target_tokens
        return Batch(
            move(self.src),
            move(self.src_lengths),
            move(self.tgt_in),
            move(self.tgt_out),
            self.indices,
            counted,
            move(self.alignment),
        )


def pad(sequences: list[list[int]], multiple: int = 1) -> tuple[Tensor, Tensor]:
    """(B, width) ids padded with PAD, width the longest length rounded up to ``multiple``; lengths."""
    lengths = torch.tensor([len(s) for s in sequences], device="cpu")  # batches are made on the CPU, then moved
    width = -(-int(lengths.max()) // multiple) * multiple
    out = torch.full((len(sequences), width), PAD, dtype=torch.long, device="cpu")
    for i, s in enumerate(sequences):
        out[i, : len(s)] = torch.tensor(s, dtype=torch.long, device="cpu")
    return out, lengths


def make_batch(src: list[list[int]], tgt: list[list[int]] | None = None, indices: list[int] | None = None) -> Batch:
    """Source sequences end with EOS; target sequences get BOS (input) and EOS (output)."""
    return _batch(src, tgt, indices, source_width_multiple=1)


def training_batch(src: list[list[int]], tgt: list[list[int]], indices: list[int] | None = None) -> Batch:
    """make_batch, with the source width rounded up for few matrix shapes (attnmt.core.speed; the
    padding is masked). Not the target: its padding would add decoder steps."""
    return _batch(src, tgt, indices, speed.source_width_multiple())


def _batch(src, tgt, indices, source_width_multiple: int) -> Batch:
    src_ids, src_lengths = pad([s + [EOS] for s in src], source_width_multiple)
    if tgt is None:
        return Batch(src_ids, src_lengths, indices=indices)
    return Batch(src_ids, src_lengths, *target_tensors(tgt), indices)


def target_tensors(tgt: list[list[int]]) -> tuple[Tensor, Tensor]:
    """The decoder's inputs (BOS y_1 ... y_n) and outputs (y_1 ... y_n EOS), padded."""
    return pad([[BOS] + t for t in tgt])[0], pad([t + [EOS] for t in tgt])[0]


def split_by_budget(order: list[int], sizes: list[int], batch_size: int, batch_tokens: int | None) -> list[list[int]]:
    """Consecutive runs of ``order``: at most batch_size sentences, or, with a token budget,
    at most batch_tokens padded tokens (longest member times count)."""
    batches, current, longest = [], [], 0
    for i in order:
        new_longest = max(longest, sizes[i])
        full = (len(current) + 1) * new_longest > batch_tokens if batch_tokens else len(current) == batch_size
        if current and full:
            batches.append(current)
            current, new_longest = [], sizes[i]
        current.append(i)
        longest = new_longest
    if current:
        batches.append(current)
    return batches


def epoch_batches(
    sizes: list[int], batch_size: int, batch_tokens: int | None, pool_batches: int, seed: int, epoch: int
) -> list[list[int]]:
    """The batches of one epoch, as lists of example indices; a function of (seed, epoch) only,
    so resuming at batch k of epoch e replays exactly the same order."""
    generator = torch.Generator().manual_seed(seed * 100_003 + epoch)
    order = torch.randperm(len(sizes), generator=generator, device="cpu").tolist()
    pool = pool_batches * (batch_size if batch_tokens is None else max(1, batch_tokens // max(sizes)))
    batches = []
    for start in range(0, len(order), pool):
        chunk = sorted(order[start : start + pool], key=lambda i: sizes[i])
        batches += split_by_budget(chunk, sizes, batch_size, batch_tokens)
    shuffled = torch.randperm(len(batches), generator=generator, device="cpu").tolist()
    return [batches[i] for i in shuffled]


def inference_batches(lengths: list[int], batch_size: int) -> list[list[int]]:
    """Indices sorted by length (less padding) and cut into batches; callers restore the order."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def forced_batches(
    src_ids: list[list[int]], tgt_ids: list[list[int]], batch_size: int, device: torch.device | str
) -> Iterator[tuple[list[int], Batch]]:
    """Pairs of a source and a known target (forced decoding: alignment, scoring) as batches of
    similar lengths on ``device``, each with the positions of its pairs in the input."""
    lengths = [len(s) + len(t) for s, t in zip(src_ids, tgt_ids)]
    for indices in inference_batches(lengths, batch_size):
        yield indices, make_batch([src_ids[i] for i in indices], [tgt_ids[i] for i in indices]).to(device)
