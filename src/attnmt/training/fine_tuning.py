"""Fine-tuning (continued training): a model trained on one corpus trained further on another,
typically a small in-domain one (Luong & Manning 2015; Freitag & Al-Onaizan 2016), as OpenNMT-py's
train_from with a reset optimizer and fairseq's --finetune-from-model do; for the tasks whose
Task.fine_tunes (translation, speech).

``training.init_from: DIR`` names the trained model folder to start from. The new experiment takes
its subword models (copied into its spm/: the pieces, hence the vocabulary and the embeddings, stay
those the weights were trained with; new subwords would give the weights other words) and its
weights (``training.init_checkpoint``: best, last or averaged; a speech model's global feature
statistics with them); the optimizer, the schedule and the step count start afresh, on the new
config's data and settings. The new config's model section must be the folder's, but for its
dropouts; data.subwords and the speech section (but spec_augment and max_seconds) too.
"""

from __future__ import annotations

import filecmp
import shutil
from pathlib import Path
from typing import Callable

from torch import nn

from attnmt.core.checkpoint import check_shapes, load_weights
from attnmt.core.config import Config
from attnmt.core.errors import AttnmtError
from attnmt.core.folders import model_config, weights_path

SPM = "spm"  # a model folder's subword models
FREE = ("dropout", "attention_dropout")  # model fields a fine-tuning run may change: they shape no weight
FREE_SPEECH = ("spec_augment", "max_seconds")  # the speech section's: what training sees, not what it computes


def initial_config(config: Config) -> Config:
    """The config of the model folder ``training.init_from``, checked against ``config``: a model of
    the same task with the same model section (but its dropouts), data.subwords and speech section
    (but spec_augment and max_seconds)."""
    folder = config.training.init_from
    if not folder.is_dir():
        raise AttnmtError(f"training.init_from: {folder} is not a folder (a trained model's experiment_dir)")
    init = model_config(folder)
    if init.task != config.task:
        raise AttnmtError(
            f"training.init_from: {folder} is a model of task {init.task}, this config of task {config.task}"
        )
    differ = (
        _differences("model", config.model, init.model, FREE)
        + _differences("data.subwords", config.data.subwords, init.data.subwords, ())
        + _differences("speech", config.speech, init.speech, FREE_SPEECH)
    )
    if differ:
        raise AttnmtError(
            f"training.init_from: the model of {folder} is not the one this config describes "
            f"(copy its model section, data.subwords and any speech section; only "
            f"{', '.join(FREE + FREE_SPEECH)} may change): " + "; ".join(differ)
        )
    return init


def _differences(section: str, ours, theirs, free: tuple[str, ...]) -> list[str]:
    """'section.field: ours here, theirs there' for each field of two config sections that differs
    (of a field that is a section, such as model.attention: its type if that differs, else each of
    its fields that does)."""
    ours, theirs = ({} if s is None else s.model_dump(mode="json") for s in (ours, theirs))
    found = []
    for name in sorted(set(ours) | set(theirs)):
        here, there = ours.get(name), theirs.get(name)
        if name in free or here == there:
            continue
        if isinstance(here, dict) and isinstance(there, dict):
            if here.get("type") == there.get("type"):
                found += [f"{section}.{name}.{line}" for line in _differences_of(here, there)]
                continue
            here, there, name = here.get("type"), there.get("type"), f"{name}.type"
        found.append(f"{section}.{name}: {here!r} here, {there!r} there")
    return found


def _differences_of(ours: dict, theirs: dict) -> list[str]:
    return [
        f"{name}: {ours.get(name)!r} here, {theirs.get(name)!r} there"
        for name in sorted(set(ours) | set(theirs))
        if ours.get(name) != theirs.get(name)
    ]


def copy_subwords(config: Config, log: Callable[[str], None] = print):
    """The subword models of ``training.init_from`` (spm/*.model) copied into the experiment's spm/:
    what a task's prepare does instead of training them."""
    init = initial_config(config)
    (config.experiment_dir / SPM).mkdir(parents=True, exist_ok=True)
    for source in sorted((init.experiment_dir / SPM).glob("*.model")):
        shutil.copyfile(source, config.experiment_dir / SPM / source.name)
    log(f"subword model(s) of {init.experiment_dir} (training.init_from)")


def check_same_subwords(config: Config):
    """AttnmtError if the experiment's spm/ holds other subword models than ``training.init_from``'s
    (an experiment_dir used before: the weights would read other pieces). Nothing to compare once
    that folder is gone (a fine-tuning run resumed needs only its own)."""
    folder = config.training.init_from
    for ours in sorted((config.experiment_dir / SPM).glob("*.model")):
        theirs = folder / SPM / ours.name
        if theirs.is_file() and not filecmp.cmp(theirs, ours, shallow=False):
            raise AttnmtError(
                f"{ours} is not the subword model of {folder} (training.init_from), whose weights "
                "this experiment starts from: use another experiment_dir"
            )


def initialize(model: nn.Module, config: Config) -> Path | None:
    """``model`` given the weights of ``training.init_from`` (checked against its config first);
    returns the file they came from. None for an experiment that has trained already (a resumed run
    reads its own checkpoint, and needs the folder it started from no more)."""
    if (config.experiment_dir / "last.safetensors").is_file():
        return None
    initial_config(config)
    weights = weights_path(config.training.init_from, config.training.init_checkpoint)
    check_shapes(model, weights)
    load_weights(model, weights)
    return weights
