"""Progress bars for the long phases that would otherwise be silent: validation and test scoring
during training, evaluation, speech synthesis. (Training steps have their own bar, with the loss
and speed: attnmt.training.metrics.ProgressBar.)"""

from __future__ import annotations

from tqdm import tqdm


def phase_bar(total: int, description: str, unit: str = "sentence", enabled: bool = True) -> tqdm:
    """A bar on stderr, shown on a terminal only (tqdm's disable=None: not in logs or pipes) and
    wiped when done (leave=False), so that what was printed around it stays as it was."""
    return tqdm(total=total, desc=description, unit=unit, leave=False, dynamic_ncols=True,
                disable=None if enabled else True)
