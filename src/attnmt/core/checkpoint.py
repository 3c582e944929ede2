"""Checkpoints in safetensors (no pickle), written atomically, with a checksum checked on load.

``best.safetensors`` holds the model weights; ``last.safetensors`` holds the weights, the
optimizer's tensors and the random-number state (the CPU generator's, and the GPU's when the model
is on one), with the rest of the trainer's state (step, data position, scheduler, optimizer
settings) as JSON in the file's metadata. Tensors are copied to the CPU before they are hashed and
written, wherever the model lives.

The metadata also holds ``sha256``: a SHA-256 over the other metadata and every tensor (name,
dtype, shape, bytes). A truncated file fails to parse; a file whose bytes changed after it was
written (bit rot, a bad copy, an edit) fails the checksum. Either way loading stops with an
AttnmtError naming the file. The checksum guards integrity, not authenticity: whoever can write
the file can recompute it. Files written before checksums existed (no ``sha256``) still load.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save
from torch import nn

from attnmt.core.devices import host_copy, model_device, to_numpy
from attnmt.core.errors import AttnmtError
from attnmt.core.files import atomic_write

CHECKSUM = "sha256"


def checksum(tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> str:
    """SHA-256 over the metadata (without the checksum itself) and the tensors, in name order
    (tensors on any device: their bytes are read on the CPU)."""
    digest = hashlib.sha256()
    digest.update(json.dumps({k: v for k, v in metadata.items() if k != CHECKSUM}, sort_keys=True).encode())
    for name in sorted(tensors):
        tensor = tensors[name].contiguous()
        digest.update(json.dumps([name, str(tensor.dtype), list(tensor.shape)]).encode())
        digest.update(to_numpy(tensor.reshape(-1).view(torch.uint8)))  # the raw bytes (on the CPU: no copy)
    return digest.hexdigest()


def _atomic_save(tensors: dict, path: Path, metadata: dict[str, str]):
    tensors = {name: tensor if tensor.device.type == "cpu" else host_copy(tensor) for name, tensor in tensors.items()}
    metadata = {**metadata, CHECKSUM: checksum(tensors, metadata)}
    atomic_write(path, save(tensors, metadata=metadata))


def read_checkpoint(path: Path) -> tuple[dict, dict]:
    """The tensors and metadata of a checkpoint whose checksum matches; AttnmtError otherwise."""
    path = Path(path)
    if not path.is_file():
        raise AttnmtError(f"{path}: no such checkpoint")
    try:
        tensors = load_file(str(path))
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
    except (SafetensorError, OSError, ValueError) as e:
        raise AttnmtError(
            f"{path}: not a readable safetensors checkpoint: truncated, corrupt or another kind of file ({e})"
        ) from None
    stored = metadata.get(CHECKSUM)
    if stored is not None and stored != checksum(tensors, metadata):
        raise AttnmtError(
            f"{path}: checksum mismatch: the file was damaged or modified after it was written "
            "(retrain, or copy it again from its source)"
        )
    return tensors, metadata


def _json_field(path: Path, metadata: dict, key: str, default: str | None = None):
    if key not in metadata and default is None:
        raise AttnmtError(f"{path}: not a training checkpoint (no '{key}' in its metadata)")
    try:
        return json.loads(metadata.get(key, default))
    except json.JSONDecodeError as e:
        raise AttnmtError(f"{path}: metadata '{key}' is not valid JSON ({e})") from None


def model_tensors(model: nn.Module) -> dict:
    # Tied weights share storage, which safetensors refuses: store each tensor once, as a copy
    # (on the CPU, whatever the model's device).
    return {name: host_copy(t) for name, t in model.state_dict().items()}


def save_model(model: nn.Module, path: Path, info: dict | None = None):
    _atomic_save(model_tensors(model), path, {"info": json.dumps(info or {})})


def _model_weights(tensors: dict) -> dict:
    """A checkpoint's model weights, named as the model's state_dict names them (a training
    checkpoint's optimizer and random state left out)."""
    return {k.removeprefix("model."): v for k, v in tensors.items() if not k.startswith(("optim.", "rng."))}


def _load_model(model: nn.Module, path: Path, tensors: dict, metadata: dict) -> dict:
    weights = _model_weights(tensors)
    for name, tensor in weights.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise AttnmtError(
                f"{path}: weight '{name}' holds values that are not finite numbers (NaN or "
                "infinity): the training run diverged, or the file was altered; use another checkpoint"
            )
    try:
        model.load_state_dict(weights)
    except RuntimeError as e:
        raise AttnmtError(f"{path}: weights do not fit the model of the config ({e})") from None
    return _json_field(path, metadata, "info", "{}")


def tensor_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """The name and shape of every tensor of a checkpoint, from its header alone (nothing loaded)."""
    if not Path(path).is_file():
        raise AttnmtError(f"{path}: no such checkpoint")
    try:
        with safe_open(str(path), framework="pt") as f:
            return {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
    except (SafetensorError, OSError, ValueError) as e:
        raise AttnmtError(
            f"{path}: not a readable safetensors checkpoint: truncated, corrupt or another kind of file ({e})"
        ) from None


def check_shapes(model: nn.Module, path: Path):
    """AttnmtError unless the checkpoint holds a tensor of the right shape for every weight of
    ``model`` (which may live on the meta device: this allocates nothing)."""
    stored = {name.removeprefix("model."): shape for name, shape in tensor_shapes(path).items()}
    for name, tensor in model.state_dict().items():
        if stored.get(name) != tuple(tensor.shape):
            found = "is missing" if name not in stored else f"has shape {list(stored[name])}"
            raise AttnmtError(
                f"{path}: the config asks for weight '{name}' of shape {list(tensor.shape)}, but the "
                f"checkpoint {found}: config.yaml and the weights do not belong together"
            )


def load_weights(model: nn.Module, path: Path) -> dict:
    """Loads weights into ``model``; returns the info stored with them."""
    return _load_model(model, path, *read_checkpoint(path))


def save_training_state(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer, trainer_state: dict):
    tensors = {f"model.{k}": v for k, v in model_tensors(model).items()}
    optim = optimizer.state_dict()
    for index, values in optim["state"].items():
        for name, value in values.items():
            tensors[f"optim.{index}.{name}"] = host_copy(value)
    tensors["rng.torch"] = torch.get_rng_state()
    device = model_device(model)
    if device.type == "cuda":  # dropout on a GPU draws from that GPU's generator
        tensors["rng.cuda"] = torch.cuda.get_rng_state(device)
    metadata = {"info": json.dumps(trainer_state), "param_groups": json.dumps(optim["param_groups"])}
    _atomic_save(tensors, path, metadata)


def load_training_state(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """Restores model, optimizer and RNG from ``last.safetensors``; returns the trainer state.
    The GPU generator is restored when the checkpoint holds one and the model is on a GPU; a
    checkpoint of a GPU run resumed on a CPU (or the reverse) continues with the CPU's generator
    restored only, so its dropout masks differ from the uninterrupted run's."""
    tensors, metadata = read_checkpoint(path)
    info = _load_model(model, path, tensors, metadata)
    if "rng.torch" not in tensors:
        raise AttnmtError(f"{path}: not a training checkpoint (no random-number state); resume needs last.safetensors")
    param_groups = _json_field(path, metadata, "param_groups")
    try:
        state: dict[int, dict] = {}
        for key, value in tensors.items():
            if key.startswith("optim."):
                _, index, name = key.split(".", 2)
                state.setdefault(int(index), {})[name] = value
        optimizer.load_state_dict({"state": state, "param_groups": param_groups})
    except (ValueError, KeyError, TypeError) as e:
        raise AttnmtError(f"{path}: optimizer state does not fit the model of the config ({e})") from None
    torch.set_rng_state(tensors["rng.torch"])
    device = model_device(model)
    if "rng.cuda" in tensors and device.type == "cuda":
        torch.cuda.set_rng_state(tensors["rng.cuda"], device)
    return info


def read_info(path: Path) -> dict:
    """The info stored with a checkpoint's tensors (save_model's ``info``; a training checkpoint's
    trainer state), read from its header alone."""
    try:
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
    except (SafetensorError, OSError, ValueError) as e:
        raise AttnmtError(f"{path}: not a readable safetensors checkpoint ({e})") from None
    return _json_field(Path(path), metadata, "info")


def read_trainer_state(path: Path) -> dict:
    """The trainer state (step, seconds, sentences, ...) of a training checkpoint, without its tensors."""
    info = read_info(path)
    if "trainer" not in info:
        raise AttnmtError(f"{path}: not a training checkpoint (no trainer state)")
    return info["trainer"]


def average_weights(paths: list[Path]) -> dict[str, torch.Tensor]:
    """The element-wise mean of the model weights of several checkpoints of one model (Vaswani et
    al. 2017 average the last five): each floating-point tensor summed in float64 and stored in its
    own dtype; any other tensor (a count, a mask) taken from the last checkpoint. The checkpoints
    must hold the same tensors, of the same shapes."""
    if not paths:
        raise AttnmtError("no checkpoints to average")
    first = _model_weights(read_checkpoint(paths[0])[0])
    sums = {name: tensor.double() for name, tensor in first.items() if tensor.is_floating_point()}
    last = first
    for path in paths[1:]:
        last = _model_weights(read_checkpoint(path)[0])
        if last.keys() != first.keys():
            differ = ", ".join(sorted(last.keys() ^ first.keys())[:3])
            raise AttnmtError(
                f"{path}: its weights are not those of {paths[0]} ({differ}): only checkpoints "
                "of one model can be averaged"
            )
        for name, tensor in last.items():
            if tensor.shape != first[name].shape:
                raise AttnmtError(
                    f"{path}: weight '{name}' has shape {list(tensor.shape)}, in {paths[0]} "
                    f"{list(first[name].shape)}: only checkpoints of one model can be averaged"
                )
            if name in sums:
                sums[name] += tensor.double()
    return {
        name: (sums[name] / len(paths)).to(tensor.dtype) if name in sums else tensor for name, tensor in last.items()
    }


def save_weights(tensors: dict[str, torch.Tensor], path: Path, info: dict | None = None):
    """Model weights (name -> tensor, as a model's state_dict names them) as save_model writes them."""
    _atomic_save({name: host_copy(t) for name, t in tensors.items()}, path, {"info": json.dumps(info or {})})
