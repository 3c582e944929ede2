"""What every task's scores share: inputs checked to be parallel, and the length buckets of the
by-length tables (BLEU by source length, CER and WER by utterance length)."""

from __future__ import annotations

from typing import Sequence

from attnmt.core.errors import AttnmtError


def check_parallel(**named: Sequence[str]) -> int:
    """Check that the named lists are non-empty and equally long; return the length."""
    counts = {name: len(items) for name, items in named.items()}
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{n} {name}" for name, n in counts.items())
        raise AttnmtError(f"cannot score: line counts differ ({listed})")
    n = next(iter(counts.values()))
    if n == 0:
        raise AttnmtError("cannot score: no sentences given")
    return n


def length_buckets(width: int, max_low: int) -> list[tuple[int, int | None]]:
    """[0, w), [w, 2w), ... up to max_low, then the open bucket [max_low, inf)."""
    if width <= 0:
        raise AttnmtError(f"bucket width must be positive, got {width}")
    if max_low < 0:
        raise AttnmtError(f"max_low must be non-negative, got {max_low}")
    edges: list[tuple[int, int | None]] = [(low, min(low + width, max_low)) for low in range(0, max_low, width)]
    edges.append((max_low, None))
    return edges


def bucket_label(low: int, high: int | None) -> str:
    if high is None:
        return f"{low}+"
    return f"{low}-{high - 1}"  # high is exclusive
