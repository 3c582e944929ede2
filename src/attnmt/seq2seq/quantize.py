"""Quantized inference: int8 dynamic quantization of a trained model's linear layers (CPUs)."""

from __future__ import annotations

import copy
import warnings

import torch

QUANTIZE = (None, "int8", "bf16")


def quantize_int8(model: torch.nn.Module) -> torch.nn.Module:
    """The model with every linear layer (the RNN decoder's, the attention's, the Transformer's
    and the output layer) replaced by PyTorch's dynamically quantized int8 version: weights
    stored as int8 with a scale, activations quantized on the fly at each product. For
    translation only: the quantized model cannot be trained.

    The encoder's nn.GRU / nn.LSTM stay float32: quantizing them too gained nothing measurable
    (docs/performance.md); the encoder runs once per sentence, the decoder once per word. The
    output layer, an nn.Linear subclass with a fused training loss, is first made a plain
    nn.Linear (on the same parameters), because quantize_dynamic maps modules by exact type and
    would leave it in float32, and it is the largest product of a decoder step; so is every other
    subclass (attnmt.core.speed.Linear, the Transformer's).

    Layers with a single output (additive attention's v in e_j = v^T tanh(...)) stay float32: a
    product with one output gains nothing from int8, quantizing its input would cost a pass over
    every energy of the step, and attnmt.core.speed.v_tanh computes the score from v's weights."""
    from torch.ao.quantization import quantize_dynamic

    model = copy.deepcopy(model)  # the caller's float model stays as it was (deepcopy keeps ties)
    for parent in list(model.modules()):
        for name, child in parent.named_children():
            if isinstance(child, torch.nn.Linear) and type(child) is not torch.nn.Linear:
                plain = torch.nn.Linear(child.in_features, child.out_features, bias=child.bias is not None)
                plain.weight, plain.bias = child.weight, child.bias  # shares tied weights, copies nothing
                setattr(parent, name, plain)
    with warnings.catch_warnings():
        # torch.ao.quantization announces its move to torchao; it still works in this torch
        # and is what attnmt pins (torch 2.13), so the warning would only confuse users.
        warnings.filterwarnings("ignore", message=r"torch\.ao\.quantization is deprecated")
        warnings.filterwarnings("ignore", message=r".*quantize_per_tensor.*deprecated")
        products = {name for name, m in model.named_modules() if type(m) is torch.nn.Linear and m.out_features > 1}
        return quantize_dynamic(model, products, dtype=torch.qint8, inplace=True)
