"""Tensors leaving their device: the one way attnmt hands a tensor to numpy or to the host.

A tensor on a GPU cannot become a numpy array (``.numpy()`` raises "can't convert cuda:0 device
type tensor to numpy"), and numpy has no bfloat16. Every place that needs the numbers of a tensor
as numpy goes through ``to_numpy``, which copies them to the CPU first; nothing in attnmt calls
``.numpy()`` on a tensor (or ``np.asarray`` on one) itself. tests/test_devices.py runs the
commands with ``torch.Tensor.numpy`` refusing any caller but this module, so that a forgotten
``.numpy()`` fails on a CPU too, not only on a GPU.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


def to_cpu(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` detached, on the CPU: a copy from its device, or the tensor itself if it is there."""
    return tensor.detach().cpu()


def host_copy(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of ``tensor`` on the CPU, detached, that shares memory with nothing
    (a checkpoint's tensors: safetensors refuses tensors that share storage, such as tied weights)."""
    return tensor.detach().to("cpu", memory_format=torch.contiguous_format, copy=True)


def to_numpy(tensor: torch.Tensor, copy: bool = False) -> np.ndarray:
    """The numbers of ``tensor`` as a numpy array, by way of the CPU: detached, copied from its
    device (GPU) when it lives on one, dtype as it is except bfloat16, which numpy lacks, made
    float32 (a caller wanting float32 anyway calls ``.float()`` first). ``copy``: an array that
    shares no memory with the tensor (on the CPU, ``.numpy()`` alone shares it)."""
    tensor = tensor.detach()
    fresh = tensor.device.type != "cpu"  # the copy to the CPU is a new tensor
    if tensor.dtype == torch.bfloat16:
        tensor, fresh = tensor.float(), True
    array = tensor.cpu().numpy()
    return array.copy() if copy and not fresh else array


def model_device(model: nn.Module) -> torch.device:
    """Where ``model`` lives: the device of its first parameter (or buffer); the CPU without either."""
    for tensor in model.parameters():
        return tensor.device
    for tensor in model.buffers():
        return tensor.device
    return torch.device("cpu")
