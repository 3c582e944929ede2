"""Trained model folders: their config, their weights, the device a model runs on, and the rule
that a folder from someone else never makes attnmt read a file outside it (docs/security.md).
Every task loads its folders through these."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch
from torch.overrides import TorchFunctionMode

from attnmt.core.checkpoint import average_weights, check_shapes, load_weights, save_weights
from attnmt.core.config import Config, load_config
from attnmt.core import speed
from attnmt.core.errors import AttnmtError
from attnmt.core.task import task_of


def inside_folder(folder: Path, path: Path) -> Path:
    """``path`` if, with symbolic links followed, it lies inside ``folder`` and is a regular file
    (or is not there yet): a model folder from someone else must not make attnmt read files
    elsewhere (see docs/security.md), nor a FIFO, which waits for a writer, or a device, which may
    never end. Every file a model folder names is read through this check, before it is opened."""
    path = Path(path)
    try:
        target = path.resolve()
    except (OSError, RuntimeError) as error:  # a loop of symbolic links (RuntimeError before Python 3.13)
        raise AttnmtError(f"{path}: cannot follow its symbolic links ({error})") from None
    if not target.is_relative_to(Path(folder).resolve()):
        raise AttnmtError(
            f"{path} leads outside the model folder {folder} (to {target}); "
            "a model folder must hold its own files: copy the file into it"
        )
    if target.exists() and not target.is_file():
        kind = "a folder" if target.is_dir() else "not a regular file (a FIFO, device or socket)"
        raise AttnmtError(f"{path} is {kind}, where the model folder {folder} should hold a file")
    return path


def model_config(folder: Path) -> Config:
    """The config of a trained model folder, its experiment_dir the folder (which may have moved)."""
    config_path = inside_folder(folder, folder / "config.yaml")
    trained = _model_folders_in(folder)
    if trained and not any((folder / name).is_file() for name in WEIGHTS):
        # A quick start's folder (data, config.yaml and the model in model/) given for its model
        names = " or ".join(str(sub) for sub in trained)
        raise AttnmtError(f"{folder}: not a model folder (no weights); did you mean {names}?")
    if not config_path.is_file():
        raise AttnmtError(f"{folder}: not a model folder (no config.yaml)")
    config = load_config(config_path, saved=True)
    config.experiment_dir = folder
    return config


WEIGHTS = ("best.safetensors", "last.safetensors")


def _model_folders_in(folder: Path) -> list[Path]:
    """The subfolders of ``folder`` that hold a trained model (config.yaml and weights)."""
    if not folder.is_dir():
        return []
    return sorted(
        sub
        for sub in folder.iterdir()
        if sub.is_dir() and (sub / "config.yaml").is_file() and any((sub / name).is_file() for name in WEIGHTS)
    )


CHECKPOINTS = ("best", "last", "averaged")  # averaged: written by `attnmt average` (average_checkpoints)


def weights_path(folder: Path, checkpoint: str) -> Path:
    """The weights of ``checkpoint`` ("best", "last" or "averaged") in a model folder; best is last
    if there is no best."""
    if checkpoint not in CHECKPOINTS:
        raise ValueError(f"checkpoint must be one of {', '.join(CHECKPOINTS)}, got {checkpoint!r}")
    weights = folder / f"{checkpoint}.safetensors"
    if checkpoint == "best" and not weights.exists():
        weights = folder / "last.safetensors"
    if checkpoint == "averaged" and not weights.exists():
        raise AttnmtError(
            f"{weights}: no averaged weights in {folder}; `attnmt average {folder}` writes them "
            "from the checkpoints that training.keep_checkpoints keeps"
        )
    return inside_folder(folder, weights)


# ---------------------------------------------------------------- kept checkpoints, and their average

KEPT = "checkpoints"  # the folder of training.keep_checkpoints: step-0001000.safetensors, ...


def kept_checkpoint_path(folder: Path, step: int) -> Path:
    return folder / KEPT / f"step-{step:07d}.safetensors"


def kept_checkpoints(folder: Path) -> dict[int, Path]:
    """The checkpoints that training kept (training.keep_checkpoints): step -> file, in step order."""
    found = {}
    for path in (folder / KEPT).glob("step-*.safetensors"):
        step = path.name.removeprefix("step-").removesuffix(".safetensors")
        if step.isdigit():
            found[int(step)] = path
    return dict(sorted(found.items()))


def average_checkpoints(folder: Path, last: int | None = None) -> tuple[Path, list[int]]:
    """Writes FOLDER/averaged.safetensors, the mean of the weights of the ``last`` checkpoints that
    training kept (default: all of them); returns the file and the steps averaged."""
    kept = kept_checkpoints(folder)
    if len(kept) < 2:
        raise AttnmtError(
            f"{folder}: {len(kept)} kept checkpoint(s) in {folder / KEPT}, and averaging needs two or "
            "more: train with training.keep_checkpoints: N (e.g. 5)"
        )
    if last is not None and last > len(kept):
        raise AttnmtError(
            f"--last {last}: {folder / KEPT} holds {len(kept)} checkpoints (steps {', '.join(map(str, kept))})"
        )
    steps = list(kept)[-last:] if last else list(kept)
    averaged = folder / "averaged.safetensors"
    weights = average_weights([inside_folder(folder, kept[step]) for step in steps])  # (no link leads out)
    save_weights(weights, inside_folder(folder, averaged), {"averaged_steps": steps, "step": steps[-1]})
    return averaged, steps


class _NoRandomInit(TorchFunctionMode):
    """Within the block (this thread only), initialising a tensor (torch.nn.init's functions, a
    tensor's normal_ and uniform_) leaves it as it is: the weights of a model about to be loaded, all
    of them (check_shapes), are drawn for nothing. On the meta device normal_ imports torch._dynamo
    (1-2 s of every model load and of `attnmt translate`'s start-up); on a CPU the draws took 0.08 s
    of every command. (A mode is off while it handles a call, so an init function that calls
    uniform_ itself, as kaiming_uniform_ does, must be caught whole.)"""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__module__", None) == "torch.nn.init" or func in (
            torch.Tensor.normal_,
            torch.Tensor.uniform_,
        ):
            return args[0] if args else kwargs["tensor"]
        return func(*args, **(kwargs or {}))


def load_model(build: Callable[[], torch.nn.Module], weights: Path, device: torch.device) -> torch.nn.Module:
    """The model ``build()`` makes, with the weights of the file, on ``device``, in eval mode, its
    products those of inference (attnmt.core.speed.for_inference)."""
    with torch.device("meta"), _NoRandomInit():  # the shapes the config asks for, checked before allocating
        check_shapes(build(), weights)
    with _NoRandomInit():  # every weight is loaded below (check_shapes)
        model = build()
    load_weights(model, weights)
    return speed.for_inference(model.to(device).eval())


def inference_device(name: str | torch.device) -> torch.device:
    """The device ``name``, or AttnmtError if it is not a device or not on this machine."""
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError) as e:
        raise AttnmtError(f"device {name!r} is not a device torch knows ({e}); try 'cpu' or 'cuda'") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise AttnmtError(
            f"device {name!r}: CUDA is not available here (no GPU, or a CPU-only build of torch); use device 'cpu'"
        )
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise AttnmtError(f"device {name!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    if device.type not in ("cpu", "cuda"):
        raise AttnmtError(f"device {name!r}: attnmt runs on 'cpu' or 'cuda'")
    return device


def load_folder(
    folder: str | Path, checkpoint: str = "best", quantize: str | None = None, device: str | torch.device = "cpu"
):
    """A trained model folder loaded by its task (attnmt.load)."""
    inference_device(device)  # a device that is not here is the first error
    return task_of(model_config(Path(folder)).task).load(Path(folder), checkpoint, quantize, device)
