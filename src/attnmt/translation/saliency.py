"""Which source words an output word came from, by gradients rather than attention: saliency.

Attention says where a decoder step looked; it need not say which source words the output depends
on (Jain & Wallace 2019). Saliency asks the model directly: how much would the log-probability of
output piece y_t change if source piece x_j's embedding e_j changed along itself,

    s_t,j = | grad_{e_j} log p(y_t | y_<t, x) . e_j |        (gradient x input)

and, as SmoothGrad (Smilkov et al. 2017), the mean of that over ``samples`` copies of the source
embeddings with Gaussian noise of ``noise`` times their standard deviation added. Ding, Xu & Koehn
(2019) read word alignments from such saliency and found them better than the attention's. Each row
here is normalized to sum to 1, so that the matrices stand where force_attention's do: per pair,
(target pieces + EOS) x (source pieces + EOS), for argmax or threshold links
(``attnmt align --saliency``). One backward pass per target position a batch (and per sample).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

from attnmt.core.devices import model_device, to_numpy
from attnmt.core.errors import AttnmtError
from attnmt.data.batching import Batch, forced_batches


def source_embedding(model: nn.Module) -> nn.Embedding:
    """The lookup of the source's token embeddings (a Transformer's before the position encodings)."""
    from attnmt.seq2seq.model import Seq2Seq
    from attnmt.seq2seq.transformer import Transformer

    embed = None
    if isinstance(model, Transformer):
        embed = model.src_embed.tokens
    elif isinstance(model, Seq2Seq):
        embed = model.encoder.embed  # (None: a speech model's encoder reads features)
    if not isinstance(embed, nn.Embedding):
        raise AttnmtError(
            "saliency reads the gradient at the source's token embeddings: this model reads no "
            "source tokens (a speech model, or an ensemble: use one translation model)"
        )
    return embed


def saliency_of(
    model: nn.Module, batch: Batch, samples: int = 0, noise: float = 0.15, generator: torch.Generator | None = None
) -> Tensor:
    """(B, T, S) the saliency of every source position for every target position of a forced batch,
    rows normalized to sum to 1 over the real source positions; ``samples`` > 0: SmoothGrad."""
    embed, captured = source_embedding(model), {}

    def keep(module, inputs, output):  # the source's embeddings, with noise for a SmoothGrad sample
        if "e" in captured:  # a later call of a pass: the target's, where the embeddings are shared
            return None
        if captured.get("noise"):
            scale = noise * output.detach().std()
            output = output + scale * torch.randn(output.shape, generator=generator, device=output.device)
        captured["e"] = output
        return output

    handle = embed.register_forward_hook(keep)
    try:
        total = 0
        for _ in range(max(samples, 1)):
            captured["noise"] = samples > 0
            total = total + _gradient_times_input(model, batch, captured)
    finally:
        handle.remove()
    real = (batch.src != embed.padding_idx).unsqueeze(1)  # (B,1,S)
    total = total * real
    return total / total.sum(-1, keepdim=True).clamp_min(1e-12)


def _gradient_times_input(model: nn.Module, batch: Batch, captured: dict) -> Tensor:
    """|grad . e| (B,T,S) of one forward pass, a backward pass per target position."""
    captured.pop("e", None)  # (the source is embedded first: its call is the one kept)
    with torch.enable_grad():
        states, _ = model.decoder_outputs(batch.src, batch.src_lengths, batch.tgt_in)
        log_probs = torch.log_softmax(model.generator(states).float(), dim=-1)
        chosen = log_probs.gather(-1, batch.tgt_out.unsqueeze(-1)).squeeze(-1)  # (B,T)
        embeddings = captured["e"]
        rows = []
        for t in range(chosen.size(1)):  # (each sentence's y_t depends on its own source only: one sum a step)
            [grad] = torch.autograd.grad(chosen[:, t].sum(), embeddings, retain_graph=t + 1 < chosen.size(1))
            rows.append((grad * embeddings).sum(-1).abs().detach())
    return torch.stack(rows, dim=1)


def saliency_matrices(
    translator, sources: list[str], targets: list[str], batch_size: int = 32, samples: int = 0, seed: int = 0
) -> list[np.ndarray]:
    """saliency_of every pair, as force_attention gives the attention: per pair an array (target
    pieces + EOS) x (source pieces + EOS) whose rows sum to 1, in input order. ``samples``: SmoothGrad
    samples (0: plain gradient x input), drawn from ``seed``."""
    if len(sources) != len(targets):
        raise AttnmtError(f"numbers of sentences differ: {len(sources)} sources, {len(targets)} targets")
    model, device = translator.model, model_device(translator.model)
    src_ids = translator.src_subwords.encode(list(sources))
    tgt_ids = translator.tgt_subwords.encode(list(targets))
    generator = torch.Generator(device=device).manual_seed(seed)
    results: list[np.ndarray | None] = [None] * len(sources)
    was_training = model.training
    model.eval()
    try:
        for indices, batch in forced_batches(src_ids, tgt_ids, batch_size, device):
            weights = to_numpy(saliency_of(model, batch, samples, generator=generator))
            for row, i in enumerate(indices):
                results[i] = weights[row, : len(tgt_ids[i]) + 1, : len(src_ids[i]) + 1].copy()
    finally:
        model.train(was_training)
    return results
