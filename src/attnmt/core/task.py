"""The one seam between the shared code and the tasks: what a task provides, and the registry
that maps a config's ``task:`` to it.

A task (translation, speech, pairs) lives in its own package, attnmt/<task>/, and its task.py
defines TASK, an object with the members of ``Task`` below. The shared code (the trainer,
``attnmt.load``, evaluate, plot, info, the server and the CLI) asks the task and never switches on
its name. The registry names each task's module and imports it only when asked, so the core
imports no task, and a command loads only the task it runs.

Adding a task: a package attnmt/<name>/ with a task.py whose TASK provides these members, one line
in TASKS, and the name in the config's ``task`` field (docs/architecture.md).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

if TYPE_CHECKING:  # for the annotations only
    import torch

Config = Any  # attnmt.core.config.Config, not imported: config.py reads TASKS from here

TASKS = {  # config task: -> the module that defines its TASK
    "translation": "attnmt.translation.task",
    "speech": "attnmt.speech.task",
    "pairs": "attnmt.pairs.task",
}

Log = Callable[[str], None]


class Task(Protocol):
    """What a task provides. ``name`` is its config's ``task:``; ``what`` says in a message what
    its models are ("a translation model"); ``inputs`` what its requests carry ("text", "audio",
    "pairs"), which the server and the CLI check before any work."""

    name: str
    what: str
    inputs: str

    def prepare(self, config: Config, log: Log, force: bool) -> None:
        """``attnmt prepare``: the subword models and the encoded (or featurized) corpus."""

    def training_loop(self, config: Config, device: torch.device, processes, log: Log, progress: bool):
        """The attnmt.training.loop.TrainingLoop of an experiment: data prepared, model built,
        loss, batches and validation given to the shared loop."""

    def test_scores(self, config: Config, device: torch.device, log: Log,
                    progress: bool) -> tuple[dict, list[dict]]:
        """After training: the best model's report on each test set of the config (for
        test-scores.json) and one metrics record per set."""

    def load(self, folder: Path, checkpoint: str, quantize: str | None, device) -> Any:
        """A trained folder ready for inference (what ``attnmt.load`` returns for this task)."""

    def architecture(self, config: Config) -> str:
        """The model in one line, for ``attnmt info``."""

    def figure_writers(self, request, model) -> list[Callable[[], Path]]:
        """``attnmt plot`` of one input: the writers of the requested figures (attnmt.viz.plan)."""


def task_of(name: str) -> Task:
    """The task a config's ``task:`` names (config validation has checked the name)."""
    return importlib.import_module(TASKS[name]).TASK


