"""Fine-tuning (continued training): a translation model trained on one corpus trained further on
another, typically a small in-domain one (Luong & Manning 2015; Freitag & Al-Onaizan 2016), as
OpenNMT-py's train_from with a reset optimizer and fairseq's --finetune-from-model do.

``training.init_from: DIR`` names the trained model folder to start from. The new experiment takes
its subword models (copied into its spm/: the pieces, hence the vocabulary and the embeddings, stay
those the weights were trained with; new subwords would give the weights other words) and its
weights (``training.init_checkpoint``: best, last or averaged); the optimizer, the schedule and the
step count start afresh, on the new config's data and settings. The new config's model section
must be the folder's, but for its dropouts; data.subwords must be the folder's too.
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
from attnmt.data.subwords import load_subwords, subword_paths

FREE = ("dropout", "attention_dropout")  # model fields a fine-tuning run may change: they shape no weight


def initial_config(config: Config) -> Config:
    """The config of the model folder ``training.init_from``, checked against ``config``: a
    translation model with the same model section (but its dropouts) and data.subwords."""
    folder = config.training.init_from
    if not folder.is_dir():
        raise AttnmtError(f"training.init_from: {folder} is not a folder (a trained model's experiment_dir)")
    init = model_config(folder)
    if init.task != config.task:
        raise AttnmtError(f"training.init_from: {folder} is a model of task {init.task}, this config of task "
                          f"{config.task}")
    ours, theirs = config.model.model_dump(mode="json"), init.model.model_dump(mode="json")
    differ = [f"model.{name}: {ours[name]!r} here, {theirs[name]!r} there" for name in ours
              if name not in FREE and ours[name] != theirs.get(name)]
    ours, theirs = config.data.subwords.model_dump(mode="json"), init.data.subwords.model_dump(mode="json")
    differ += [f"data.subwords.{name}: {ours[name]!r} here, {theirs[name]!r} there" for name in ours
               if ours[name] != theirs[name]]
    if differ:
        raise AttnmtError(f"training.init_from: the model of {folder} is not the one this config describes "
                          f"(copy its model section and data.subwords; only {' and '.join(FREE)} may change): "
                          + "; ".join(differ))
    return init


def copy_subwords(config: Config, log: Callable[[str], None] = print):
    """The subword models of ``training.init_from`` copied into the experiment's spm/ (what
    attnmt.translation.prepare does instead of training them), with their settings; returned loaded."""
    init = initial_config(config)
    joint = config.data.subwords.joint
    for source, target in zip(subword_paths(init.experiment_dir, joint), subword_paths(config.experiment_dir, joint)):
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    log(f"subword model(s) of {init.experiment_dir} (training.init_from)")
    return load_subwords(config.experiment_dir, joint)


def check_same_subwords(config: Config):
    """AttnmtError if the experiment's spm/ holds other subword models than ``training.init_from``'s
    (an experiment_dir used before: the weights would read other pieces). Nothing to compare once
    that folder is gone (a fine-tuning run resumed needs only its own)."""
    folder = config.training.init_from
    joint = config.data.subwords.joint
    for theirs, ours in zip(subword_paths(folder, joint), subword_paths(config.experiment_dir, joint)):
        if ours.is_file() and theirs.is_file() and not filecmp.cmp(theirs, ours, shallow=False):
            raise AttnmtError(f"{ours} is not the subword model of {folder} (training.init_from), whose weights "
                              "this experiment starts from: use another experiment_dir")


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
