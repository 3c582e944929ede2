"""What every task's quick start shares: its small model trained once, and on from where a
stopped run left off."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from attnmt.core.checkpoint import read_trainer_state
from attnmt.core.config import Config, config_from_dict, config_to_yaml
from attnmt.training.trainer import train


def train_once(folder: Path, raw_config: dict, what: str, log: Callable[[str], None], progress: bool) -> Config:
    """The quick start's model trained to the config's steps: from the start, or on from the
    checkpoint of a run that stopped short of them (Ctrl-C saves one), with the config written to
    FOLDER/config.yaml. A model trained that far already is used as it is, config.yaml untouched."""
    config = config_from_dict(raw_config, Path("."))
    last = config.experiment_dir / "last.safetensors"
    trained = read_trainer_state(last) if last.exists() else None
    steps = config.training.max_steps
    if trained is not None and (trained["step"] >= steps or trained.get("stopped_early")):
        log(f"{config.experiment_dir} is already trained ({trained['step']} steps); delete {folder} to train again")
        return config
    (folder / "config.yaml").write_text(config_to_yaml(config), encoding="utf-8")
    if trained is None:
        log(f"training {what}")
    else:
        log(f"resuming the quick start stopped at step {trained['step']} of {steps}: {what}")
    train(config, resume=trained is not None, log=log, progress=progress)
    return config
