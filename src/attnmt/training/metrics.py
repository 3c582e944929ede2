"""What training reports: the loss and speed of a window of steps, the progress bar, and the
records of metrics.jsonl (one JSON object per line, trimmed back to a checkpoint on resume)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Callable

from tqdm import tqdm

from attnmt.core.files import atomic_write_text


class MetricsWindow:
    """The summed loss and the tokens of the steps since the window (re)started: a train record's
    loss per token and speed. Restarted after each record, and after each validation, whose time
    is not training speed."""

    def __init__(self):
        self.restart()

    def restart(self):
        self.loss, self.tokens, self.start = 0.0, 0, time.perf_counter()

    def add(self, loss, tokens: int):
        """A step's summed loss (a float, or a tensor: added up where it lives, read at the record) and tokens."""
        self.loss = self.loss + loss
        self.tokens += tokens

    def record(self, lr: float) -> dict:
        speed = self.tokens / (time.perf_counter() - self.start)
        return {"loss": float(self.loss) / self.tokens, "tokens_per_s": speed, "lr": lr}


class ProgressBar:
    """One tick per step, with the loss and speed of the last record beside it; with a time
    budget the bar cannot know the number of steps, so it also shows the time left."""

    def __init__(self, total: int | None, initial: int, enabled: bool, max_minutes: float | None):
        # disable=None: on a terminal only, not in the logs of `attnmt compare` or of a pipe
        self.bar = tqdm(
            total=total, initial=initial, disable=None if enabled else True, unit="step", dynamic_ncols=True
        )
        self.max_minutes = max_minutes

    def update(self):
        self.bar.update(1)

    def show(self, record: dict, seconds: float):
        """``record``'s loss and speed, after ``seconds`` of training."""
        left = {}
        if self.max_minutes is not None:
            seconds_left = max(0, int(60 * self.max_minutes - seconds))
            left = {"left": f"{seconds_left // 60}:{seconds_left % 60:02d}"}
        self.bar.set_postfix(loss=f"{record['loss']:.3f}", tok_s=f"{record['tokens_per_s']:.0f}", **left)

    def clear(self):
        """Out of the way of a message."""
        self.bar.clear()

    def close(self):
        self.bar.close()


def trim_metrics(path: Path, step: int):
    """Keeps the records of metrics.jsonl up to ``step``, and drops a line cut off by a crash."""
    if not path.is_file():
        return
    # After the last "\n" comes nothing, or the start of a line whose writer was killed.
    complete = path.read_text(encoding="utf-8", errors="replace").split("\n")[:-1]
    atomic_write_text(path, "".join(line + "\n" for line in complete if _record_step(line) <= step))


def _record_step(line: str) -> float:
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return math.inf
    step = record.get("step") if isinstance(record, dict) else None
    return step if isinstance(step, int) else math.inf


def test_set_summary(
    reports: dict[str, dict], record: Callable[[dict], dict], line: Callable[[dict], str], log: Callable[[str], None]
) -> tuple[dict, list[dict]]:
    """The reports without their per-sentence outputs (hypotheses, predictions), and a metrics
    record (``record``) of each, logged (``line``): what every task's test_scores returns."""
    summary = {
        name: {key: value for key, value in report.items() if key not in ("hypotheses", "predictions")}
        for name, report in reports.items()
    }
    for name, report in summary.items():
        log(f"test set {name}: {line(report)}")
    return summary, [{"name": name, **record(report)} for name, report in summary.items()]
