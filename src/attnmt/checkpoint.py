"""Checkpoints in safetensors (no pickle), written atomically.

``best.safetensors`` holds the model weights; ``last.safetensors`` holds the weights, the
optimizer's tensors and the random-number state, with the rest of the trainer's state
(step, data position, scheduler, optimizer settings) as JSON in the file's metadata.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from attnmt.errors import AttnmtError


def _atomic_save(tensors: dict, path: Path, metadata: dict[str, str]):
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp), metadata=metadata)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)  # readers see the old file or the new one, never half of one


def _read(path: Path) -> tuple[dict, dict]:
    if not path.is_file():
        raise AttnmtError(f"{path}: no such checkpoint")
    try:
        tensors = load_file(str(path))
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
    except (SafetensorError, OSError, ValueError) as e:
        raise AttnmtError(f"{path}: not a readable safetensors checkpoint ({e})") from None
    return tensors, metadata


def model_tensors(model: nn.Module) -> dict:
    # Tied weights share storage, which safetensors refuses: store each tensor once, as a copy.
    return {name: t.detach().clone().contiguous() for name, t in model.state_dict().items()}


def save_model(model: nn.Module, path: Path, info: dict | None = None):
    _atomic_save(model_tensors(model), path, {"info": json.dumps(info or {})})


def load_weights(model: nn.Module, path: Path) -> dict:
    """Loads weights into ``model``; returns the info stored with them."""
    tensors, metadata = _read(path)
    weights = {k.removeprefix("model."): v for k, v in tensors.items()
               if not k.startswith(("optim.", "rng."))}
    try:
        model.load_state_dict(weights)
    except RuntimeError as e:
        raise AttnmtError(f"{path}: weights do not fit the model of the config ({e})") from None
    return json.loads(metadata.get("info", "{}"))


def save_training_state(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer,
                        trainer_state: dict):
    tensors = {f"model.{k}": v for k, v in model_tensors(model).items()}
    optim = optimizer.state_dict()
    for index, values in optim["state"].items():
        for name, value in values.items():
            tensors[f"optim.{index}.{name}"] = value.detach().clone().contiguous()
    tensors["rng.torch"] = torch.get_rng_state()
    metadata = {"info": json.dumps(trainer_state),
                "param_groups": json.dumps(optim["param_groups"])}
    _atomic_save(tensors, path, metadata)


def load_training_state(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """Restores model, optimizer and RNG from ``last.safetensors``; returns the trainer state."""
    info = load_weights(model, path)
    tensors, metadata = _read(path)
    state: dict[int, dict] = {}
    for key, value in tensors.items():
        if key.startswith("optim."):
            _, index, name = key.split(".", 2)
            state.setdefault(int(index), {})[name] = value
    optimizer.load_state_dict({"state": state, "param_groups": json.loads(metadata["param_groups"])})
    torch.set_rng_state(tensors["rng.torch"])
    return info
