"""Progress bars for the long phases that would otherwise be silent: validation and test scoring
during training, evaluation, speech synthesis. (Training steps have their own bar, with the loss
and speed: attnmt.training.metrics.ProgressBar.)"""

from __future__ import annotations

from typing import Iterable

from tqdm import tqdm


def phase_bar(total: int | Iterable, description: str, unit: str = "sentence", enabled: bool = True) -> tqdm:
    """A bar on stderr, shown on a terminal only (tqdm's disable=None: not in logs or pipes) and
    wiped when done (leave=False), so that what was printed around it stays as it was. ``total``:
    the count (call ``update``), or a sized iterable that the bar yields from."""
    iterable = None if isinstance(total, int) else total
    return tqdm(
        iterable,
        total=total if iterable is None else None,
        desc=description,
        unit=unit,
        leave=False,
        dynamic_ncols=True,
        disable=None if enabled else True,
    )
