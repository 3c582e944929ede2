"""Batches of similar length under a size budget, in a seeded, reproducible order.

Sorting the whole corpus by length would make every epoch the same; shuffling alone
would pad a lot. So each epoch shuffles, cuts the corpus into pools of many batches,
sorts each pool by length, cuts it into batches, and shuffles the batches. The examples are known
by their sizes alone (a numpy array: the prepared store's lengths, attnmt.data.store), and an
epoch's batches are numpy arrays too, so that a corpus of many millions of pairs costs a few bytes
a pair.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch
from torch import Tensor

from attnmt.core import speed
from attnmt.core.devices import to_numpy
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


def batch_starts(sizes: np.ndarray, batch_size: int, batch_tokens: int | None) -> np.ndarray:
    """Where each batch starts in a run of examples of ``sizes`` cut in order into consecutive
    batches: at most batch_size sentences, or, with a token budget, at most batch_tokens padded
    tokens (longest member times count; an example over the budget goes alone)."""
    if not batch_tokens:
        return np.arange(0, len(sizes), batch_size)
    starts, start = [], 0
    while start < len(sizes):
        starts.append(start)
        # the longest member is at least the first: no more than batch_tokens // sizes[start] fit
        window = sizes[start : start + max(1, batch_tokens // int(sizes[start]))].astype(np.int64)
        over = np.arange(1, len(window) + 1) * np.maximum.accumulate(window) > batch_tokens
        over[0] = False  # (the first member goes in, whatever its size)
        start += int(over.argmax()) if over.any() else len(window)
    return np.array(starts, dtype=np.int64)


class EpochBatches(Sequence):
    """The batches of an epoch: ``batches[k]`` the example indices of the k-th (a list). Held as
    numpy arrays (the examples in pool order, where each run of them starts, the runs' shuffled
    order), 4 bytes an example, not as lists of lists of Python ints (about 40)."""

    def __init__(self, order: np.ndarray, starts: np.ndarray, shuffled: np.ndarray):
        self.order, self.starts, self.shuffled = order, starts, shuffled

    def __len__(self) -> int:
        return len(self.shuffled)

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[j] for j in range(*k.indices(len(self)))]
        run = int(self.shuffled[k])
        return self.order[self.starts[run] : self.starts[run + 1]].tolist()

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)


def epoch_batches(
    sizes: Sequence[int] | np.ndarray,
    batch_size: int,
    batch_tokens: int | None,
    pool_batches: int,
    seed: int,
    epoch: int,
) -> EpochBatches:
    """The batches of one epoch, as lists of example indices; a function of (seed, epoch) only,
    so resuming at batch k of epoch e replays exactly the same order. A seeded permutation of the
    examples is cut into pools of pool_batches batches, each pool sorted by size (stably) and cut
    into batches, and the batches are shuffled."""
    sizes = np.asarray(sizes)
    generator = torch.Generator().manual_seed(seed * 100_003 + epoch)
    # (int32 draws the same permutation as int64, in half the memory)
    dtype = torch.int32 if len(sizes) < 1 << 31 else torch.int64
    order = to_numpy(torch.randperm(len(sizes), generator=generator, dtype=dtype, device="cpu"))
    pool = pool_batches * (batch_size if batch_tokens is None else max(1, batch_tokens // int(sizes.max())))
    starts = [np.zeros(0, np.int64)]
    for start in range(0, len(order), pool):
        chunk = order[start : start + pool]
        chunk[:] = chunk[np.argsort(sizes[chunk], kind="stable")]
        starts.append(start + batch_starts(sizes[chunk], batch_size, batch_tokens))
    starts = np.concatenate(starts + [np.array([len(order)])])
    shuffled = to_numpy(torch.randperm(len(starts) - 1, generator=generator, device="cpu"))
    return EpochBatches(order, starts, shuffled)


def longest_batch(sizes: Sequence[int] | np.ndarray, batch_size: int, batch_tokens: int | None) -> list[int]:
    """The largest batch an epoch can hold: its longest examples (by size), as many as a batch
    takes of that size. Every batch's tensors are at most as wide and as tall as this one's (with a
    token budget, fewer rows of longer examples cost more: attention grows with the product of the
    lengths). Found a million examples at a time, in memory that does not grow with the corpus."""
    sizes = np.asarray(sizes)
    if not len(sizes):
        return []
    count = batch_size if batch_tokens is None else max(1, batch_tokens // int(sizes.max()))
    count = min(count, len(sizes))
    best = np.zeros(0, np.int64)
    for start in range(0, len(sizes), 1 << 20):
        chunk = sizes[start : start + (1 << 20)]
        top = np.argpartition(chunk, len(chunk) - min(count, len(chunk)))[-count:] + start
        candidates = np.concatenate([best, top])
        best = candidates[np.argsort(-sizes[candidates].astype(np.int64), kind="stable")[:count]]
    return sorted(best.tolist())


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
