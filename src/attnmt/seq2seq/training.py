"""Training pieces every sequence-to-sequence task shares (translation and speech): the
teacher-forced cross-entropy, the module that DistributedDataParallel wraps, the dev loss, and
the best output of each source for validation scores."""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn

from attnmt.core import speed
from attnmt.core.config import Config, DecodingConfig
from attnmt.core.progress import phase_bar
from attnmt.data.batching import Batch, inference_batches, make_batch, training_batch
from attnmt.data.subwords import PAD, Subwords
from attnmt.seq2seq.base import EncoderDecoder
from attnmt.seq2seq.graphs import GraphedLoss
from attnmt.seq2seq.search import decode


def sequence_loss(
    model: EncoderDecoder,
    batch: Batch,
    label_smoothing: float = 0.0,
    memory=None,
    window: tuple[int, int] | None = None,
    coverage_weight: float = 0.0,
) -> torch.Tensor:
    """Cross-entropy summed over the real (non-padding) target tokens. The output layer, the
    largest product of a step, runs on those positions only. ``window``: the attention window
    (training.attention_window); ``memory``: the source already encoded, with its window;
    ``coverage_weight``: lambda of the coverage loss added to it (training.coverage_loss)."""
    if memory is None:
        states, weights = model.decoder_outputs(batch.src, batch.src_lengths, batch.tgt_in, window)
    else:
        states, weights = model.decoder_outputs_of(memory, batch.tgt_in)
    real = batch.tgt_out != PAD
    coverage = coverage_weight * coverage_loss(weights, real) if coverage_weight else 0.0
    if not selects_real_rows(states.device):
        return coverage + model.generator.loss(
            states.flatten(0, 1), batch.tgt_out.flatten(), label_smoothing, ignore_index=PAD
        )
    return coverage + model.generator.loss(states[real], batch.tgt_out[real], label_smoothing)


def coverage_note(weight: float) -> str:
    """What training's log says of the coverage loss (training.coverage_loss): "" without one."""
    return f"; coverage loss, lambda {weight:g}" if weight else ""


def coverage_loss(weights: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """See et al.'s (2017) coverage loss, summed over the real target steps (``real`` (B,T)): at step
    t, sum_j min(a_t(j), c_t(j)) with c_t = sum_{t'<t} a_{t'}, the attention that source position j
    has had already. It is 0 while no position is attended to twice, and at most 1 a step.
    weights (B,T,S)."""
    covered = weights.cumsum(1) - weights
    return (torch.minimum(weights, covered).sum(-1) * real).sum()


def selects_real_rows(device: torch.device) -> bool:
    """Whether the loss first selects the rows of real target tokens (fewer rows through the output
    layer: a CPU's way) or leaves the padding out by its target id: on a GPU, selecting would make the
    host wait for the GPU to count the rows, at every step."""
    return device.type != "cuda"


class TrainingLoss(nn.Module):
    """The model and its loss as one module: what DistributedDataParallel wraps. Returns the
    summed loss and the number of target tokens it sums over. With ``graphs`` (on a GPU), the
    decoder runs as CUDA graphs (attnmt.seq2seq.graphs; made with the same window). ``window``:
    the attention window of training (training.attention_window), passed to the model at every
    batch. ``coverage_weight``: lambda of the coverage loss (training.coverage_loss; not in the graphs).
    A task with more to its loss (guided alignment, CTC) overrides ``loss``."""

    def __init__(
        self,
        model: EncoderDecoder,
        label_smoothing: float,
        graphs: GraphedLoss | None = None,
        window: tuple[int, int] | None = None,
        coverage_weight: float = 0.0,
    ):
        super().__init__()
        self.model, self.label_smoothing, self.graphs, self.window = model, label_smoothing, graphs, window
        self.coverage_weight = coverage_weight

    def forward(self, batch: Batch) -> tuple[torch.Tensor, int]:
        if self.graphs is not None and speed.enabled():
            return self.graphs(batch), batch.target_tokens
        return self.loss(batch), batch.target_tokens

    def loss(self, batch: Batch) -> torch.Tensor:
        return sequence_loss(
            self.model, batch, self.label_smoothing, window=self.window, coverage_weight=self.coverage_weight
        )


def pair_batch(data, indices: list[int]) -> Batch:
    """The pairs ``indices`` of ``data`` (src_ids and tgt_ids: token ids) as a batch for the loss."""
    return training_batch([data.src_ids[i] for i in indices], [data.tgt_ids[i] for i in indices], indices)


@torch.inference_mode()
def evaluate_loss(
    model: EncoderDecoder,
    data,
    batch_size: int,
    make_batch: Callable[..., Batch] | None = None,
    window: tuple[int, int] | None = None,
) -> dict:
    """Loss and perplexity per target token of ``data`` (anything with sizes() that
    ``make_batch(data, indices)`` cuts into batches; by default, its src_ids and tgt_ids), the
    attention within ``window``."""
    make_batch = make_batch or pair_batch
    model.eval()
    total, tokens = 0.0, 0
    device = next(model.parameters()).device
    for indices in inference_batches(data.sizes(), batch_size):
        batch = make_batch(data, indices).to(device)
        total += float(sequence_loss(model, batch, window=window))
        tokens += batch.target_tokens
    loss = total / max(tokens, 1)
    return {"loss": loss, "perplexity": math.exp(min(loss, 50.0))}


def validation_decoding(config: Config) -> DecodingConfig:
    """How validation decodes the dev set: the config's decoding settings with beam
    training.dev_beam and the attention window the model trains with (training.attention_window)."""
    return config.decoding.model_copy(
        update={"beam": config.training.dev_beam, "attention_window": config.training.attention_window}
    )


def translate_ids(
    model: EncoderDecoder,
    src_ids: list[list[int]],
    tgt_sw: Subwords,
    settings: DecodingConfig,
    beam: int | None = None,
    progress: str | None = None,
) -> list[str]:
    """Best translation (text) of each encoded source sentence, in the input order."""
    return best_outputs(
        model,
        [len(s) for s in src_ids],
        lambda indices: make_batch([src_ids[i] for i in indices]),
        tgt_sw,
        settings,
        beam,
        progress,
    )


def best_outputs(
    model: EncoderDecoder,
    sizes: list[int],
    source_batch: Callable[[list[int]], Batch],
    tgt_sw: Subwords,
    settings: DecodingConfig,
    beam: int | None = None,
    progress: str | None = None,
) -> list[str]:
    """Best output text of each of len(sizes) sources, in the input order, decoded as ``settings``
    say (beam ``beam`` if given); ``source_batch(indices)`` is a batch of those sources (token ids,
    or audio features). ``progress``: the description of a progress bar over the sources (on a
    terminal), or None for none."""
    model.eval()
    out: list[str] = [""] * len(sizes)
    with phase_bar(len(sizes), progress or "", enabled=progress is not None) as bar:
        for indices in inference_batches(sizes, settings.batch_size):
            batch = source_batch(indices).to(next(model.parameters()).device)
            results = decode(model, batch.src, batch.src_lengths, settings, beam=beam)
            for i, hyps in zip(indices, results):
                out[i] = tgt_sw.decode(hyps[0].tokens)
            bar.update(len(indices))
    return out
