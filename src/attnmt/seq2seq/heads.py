"""Attention heads switched off at test time, to see which ones a trained Transformer needs
(Michel, Levy & Neubig 2019, "Are Sixteen Heads Really Better than One?"; Voita et al. 2019).

A multi-head attention joins its heads' outputs, head_1 ... head_H, and projects them with W_o.
Masking head h multiplies its output by 0 before W_o: the layer goes on as if the head had never
existed, the other heads untouched (their weights are still computed and shown). A head is named
by where it sits:

    encoder.L.H    head H of encoder layer L's self-attention
    decoder.L.H    head H of decoder layer L's (masked) self-attention
    cross.L.H      head H of decoder layer L's attention over the source

counting from 0, as ``attnmt translate --mask-heads cross.2.0,encoder.0.3`` writes them.
benchmarks/head_pruning.py measures what each head is worth on Multi30k (docs/transformer.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

import torch
from torch import nn

from attnmt.core.errors import AttnmtError
from attnmt.seq2seq.ensemble import Ensemble
from attnmt.seq2seq.transformer import Transformer

KINDS = ("encoder", "decoder", "cross")

Head = tuple[str, int, int]  # (kind, layer, head)
T = TypeVar("T")


def attentions(model: nn.Module, kind: str) -> list[nn.Module]:
    """The multi-head attentions of one kind, layer by layer (a Transformer's)."""
    if kind == "encoder":
        return [layer.self_attention for layer in model.encoder_layers]
    if kind == "decoder":
        return [layer.self_attention for layer in model.decoder_layers]
    return [layer.cross_attention for layer in model.decoder_layers]


def every_head(model: nn.Module) -> list[Head]:
    """Every head of the model, kind by kind, layer by layer."""
    return [
        (kind, layer, head)
        for kind in KINDS
        for layer, attention in enumerate(attentions(model, kind))
        for head in range(attention.heads)
    ]


def check_heads(model: nn.Module, heads: Iterable[Head]):
    """AttnmtError unless ``model`` is a Transformer that has every one of ``heads``."""
    if not isinstance(model, Transformer):
        what = (
            "an ensemble: heads are switched off in one model"
            if isinstance(model, Ensemble)
            else "a model with one attention of one head"
        )
        raise AttnmtError(f"heads are masked in a Transformer (model.type: transformer); this is {what}")
    known = set(every_head(model))
    for head in heads:
        if head not in known:
            raise AttnmtError(
                f"no head {'.'.join(map(str, head))} in this model: it has "
                f"{len(model.encoder_layers)} encoder and {len(model.decoder_layers)} decoder layers of "
                f"{model.config.heads} heads (kinds: {', '.join(KINDS)}; counting from 0)"
            )


def mask_heads(model: nn.Module, heads: Iterable[Head]):
    """Switches ``heads`` off and every other head on (an empty list: all on again)."""
    heads = list(heads)
    check_heads(model, heads)
    for kind in KINDS:
        for layer, attention in enumerate(attentions(model, kind)):
            off = [h for k, n, h in heads if (k, n) == (kind, layer)]
            mask = torch.ones(attention.heads, device=model.src_embed.tokens.weight.device)  # (W_o may be int8)
            mask[off] = 0.0
            attention.head_mask = mask if off else None


def call_masked(model: nn.Module, heads: list[Head], call: Callable[[], T]) -> T:
    """call() with ``heads`` switched off and the others on, then the model's heads as they were
    (the server: one request's heads; none: call() on the model as it is)."""
    if not heads:
        return call()
    check_heads(model, heads)
    attentions_before = [(a, a.head_mask) for kind in KINDS for a in attentions(model, kind)]
    mask_heads(model, heads)
    try:
        return call()
    finally:
        for attention, mask in attentions_before:
            attention.head_mask = mask


def parse_heads(text: str) -> list[Head]:
    """ "cross.2.0,encoder.0.3" -> [("cross", 2, 0), ("encoder", 0, 3)]; AttnmtError naming a bad item."""
    heads = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        parts = item.split(".")
        if len(parts) != 3 or parts[0] not in KINDS or not (parts[1].isdigit() and parts[2].isdigit()):
            raise AttnmtError(
                f"head {item!r}: write KIND.LAYER.HEAD, KIND one of {', '.join(KINDS)}, LAYER and "
                "HEAD counted from 0 (e.g. cross.2.0)"
            )
        heads.append((parts[0], int(parts[1]), int(parts[2])))
    return heads
