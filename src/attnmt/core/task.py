"""The one seam between the shared code and the tasks: what a task provides, and the registry
that maps a config's ``task:`` to it.

A task (translation, speech, pairs) lives in its own package, attnmt/<task>/, and its task.py
defines TASK, a ``Task`` (below) made of its package's functions. The shared code (the trainer,
``attnmt.load``, evaluate, plot, info, the server and the CLI) asks the task and never switches on
its name. The registry names each task's module and imports it only when asked, so the core
imports no task, and a command loads only the task it runs.

Adding a task: a package attnmt/<name>/ with a task.py whose TASK gives every member of Task, and
one line in TASKS (docs/architecture.md).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

Config = Any  # attnmt.core.config.Config, not imported: config.py reads TASKS from here

TASKS = {  # config task: -> the module that defines its TASK
    "translation": "attnmt.translation.task",
    "speech": "attnmt.speech.task",
    "pairs": "attnmt.pairs.task",
}

Log = Callable[[str], None]


@dataclass(frozen=True)
class Task:
    """What a task provides to the shared code: its names, and the functions of its package that
    the shared code calls (each task's task.py makes its TASK of them)."""

    name: str  # its config's ``task:``
    what: str  # what its models are, in messages: "a translation model"
    inputs: str  # what its requests carry: "text", "audio" or "pairs" (the CLI and the server check it)
    # attnmt prepare: (config, log, force) -> the subword models (and the config) in the experiment folder
    prepare: Callable[[Config, Log, bool], Any]
    # (config, device, processes, log, progress) -> the attnmt.training.loop.TrainingLoop of the
    # experiment: data prepared, model built, loss, batches and validation given to the shared loop
    training_loop: Callable[..., Any]
    # (config, device, log, progress) -> after training, the best model's report on each test set of
    # the config (test-scores.json) and one metrics record per set
    test_scores: Callable[..., tuple[dict, list[dict]]]
    # (folder, checkpoint, quantize, device) -> the trained folder ready for inference (attnmt.load)
    load: Callable[[Path, str, Any, Any], Any]
    # config -> the model in one line (attnmt info)
    architecture: Callable[[Config], str]
    # (request, model) -> the writers of the figures attnmt plot draws of one input (attnmt.viz.plan)
    figure_writers: Callable[[Any, Any], list[Callable[[], Path]]]
    # whether its training can start from a trained model's weights (training.init_from: fine-tuning)
    fine_tunes: bool = False


def task_of(name: str) -> Task:
    """The task a config's ``task:`` names (config validation has checked the name)."""
    return importlib.import_module(TASKS[name]).TASK
