"""What the training loop needs to train a translation model: the experiment's subwords and
encoded corpora, the model and its teacher-forced loss, batches of sentence pairs, and the
validation (dev loss and BLEU)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from attnmt.core import distributed, speed
from attnmt.core.config import Config, GuidedAlignment
from attnmt.core.distributed import ONE_PROCESS, Processes
from attnmt.core.progress import phase_bar
from attnmt.data import splits
from attnmt.data.batching import Batch, inference_batches, make_batch, training_batch
from attnmt.data.subwords import PAD, Subwords
from attnmt.evaluation import corpus_scores
from attnmt.seq2seq import EncoderDecoder, build_model
from attnmt.seq2seq.decoding import decode
from attnmt.seq2seq.graphs import GraphedLoss, graphed_loss
from attnmt.training.optimization import TrainingSetup, setup_training
from attnmt.translation import guided_alignment
from attnmt.translation.prepare import EncodedCorpus, encode_corpus, prepare, training_corpus


@dataclass
class TranslationData:
    src_sw: Subwords
    tgt_sw: Subwords
    train: EncodedCorpus  # without the pairs longer than data.max_length
    dev: EncodedCorpus | None  # every pair; None without a dev set


def prepare_data(config: Config, processes: Processes = ONE_PROCESS,
                 log: Callable[[str], None] = print) -> TranslationData:
    """The subwords (trained unless present, by the main process while the others wait) and the
    encoded training and dev corpora of an experiment."""
    with distributed.main_first(processes):  # (it also draws the held-out dev and test sets)
        src_sw, tgt_sw = prepare(config, log)
    train = encode_corpus(config.data.train, src_sw, tgt_sw, config.data.max_length, log,
                          corpus=training_corpus(config, log), max_source_words=config.data.max_source_words)
    dev = None
    if config.data.dev:
        dev = encode_corpus(splits.resolved(config.data.dev, "dev", config.experiment_dir), src_sw, tgt_sw, None, log)
    if config.training.guided_alignment is not None:
        with distributed.main_first(processes):  # (eflomal runs once, in the main process)
            guided_alignment.attach_links(config, train, src_sw, tgt_sw, log)
    return TranslationData(src_sw, tgt_sw, train, dev)


def setup_translation(config: Config, data: TranslationData, device: torch.device,
                      processes: Processes = ONE_PROCESS) -> TrainingSetup:
    """The model of the config for the data's vocabularies, its loss, optimizer and scheduler."""
    model = build_model(config.model, len(data.src_sw), len(data.tgt_sw)).to(device)
    tc = config.training
    guided = tc.guided_alignment
    # (the graphs capture the translation loss only: guided alignment trains without them)
    graphs = None if guided else graphed_loss(model, tc.label_smoothing, device, tc.cuda_graphs, processes.world)
    return setup_training(model, TrainingLoss(model, tc.label_smoothing, graphs, guided), tc, processes)


def summary(config: Config, model: nn.Module, data: TranslationData) -> str:
    mc = config.model
    return (f"model: {'transformer' if mc.type == 'transformer' else mc.attention + ' attention'}, "
            f"{sum(p.numel() for p in model.parameters()):,} parameters; {len(data.train):,} training pairs")


def translation_batch(data: EncodedCorpus, indices: list[int]) -> Batch:
    """The pairs ``indices`` of ``data`` as a batch for the loss (training and dev loss); with the
    reference attention of guided alignment where ``data`` has links."""
    batch = training_batch([data.src_ids[i] for i in indices], [data.tgt_ids[i] for i in indices], indices)
    if data.alignments is not None:
        batch.alignment = guided_alignment.reference_attention([data.alignments[i] for i in indices],
                                                               batch.src.size(1), batch.tgt_out.size(1))
    return batch


def sequence_loss(model: EncoderDecoder, batch: Batch, label_smoothing: float = 0.0, memory=None,
                  guided: GuidedAlignment | None = None) -> torch.Tensor:
    """Cross-entropy summed over the real (non-padding) target tokens. The output layer, the
    largest product of a step, runs on those positions only. ``memory``: the source already encoded.
    With ``guided`` and the batch's reference attention, plus guided.weight times the
    guided-alignment loss (attnmt.translation.guided_alignment)."""
    real = batch.tgt_out != PAD
    if guided is not None and batch.alignment is not None:
        states, weights = guided_alignment.trained_attention(model, batch, guided)
    elif memory is None:
        states, weights = model.decoder_outputs(batch.src, batch.src_lengths, batch.tgt_in)
    else:
        states, weights = model.decoder_outputs_of(memory, batch.tgt_in)
    loss = model.generator.loss(states[real], batch.tgt_out[real], label_smoothing)
    if guided is not None and batch.alignment is not None:
        loss = loss + guided.weight * guided_alignment.alignment_loss(weights, batch.alignment)
    return loss


class TrainingLoss(nn.Module):
    """The model and its loss as one module: what DistributedDataParallel wraps. Returns the
    summed loss and the number of target tokens it sums over. With ``graphs`` (on a GPU), the
    decoder runs as CUDA graphs (attnmt.seq2seq.graphs); ``guided``: guided alignment."""

    def __init__(self, model: EncoderDecoder, label_smoothing: float, graphs: GraphedLoss | None = None,
                 guided: GuidedAlignment | None = None):
        super().__init__()
        self.model, self.label_smoothing, self.graphs, self.guided = model, label_smoothing, graphs, guided

    def forward(self, batch: Batch) -> tuple[torch.Tensor, int]:
        if self.graphs is not None and speed.enabled():
            return self.graphs(batch), batch.target_tokens
        return sequence_loss(self.model, batch, self.label_smoothing, guided=self.guided), batch.target_tokens


@dataclass
class DevScores:
    """The validation of a translation model: dev loss and perplexity (teacher forcing), and the
    BLEU of its translations (beam training.dev_beam)."""

    dev: EncodedCorpus
    tgt_sw: Subwords
    config: Config

    progress: bool = True  # a bar while the dev set is translated (on a terminal)

    def __call__(self, model: EncoderDecoder) -> dict:
        record = evaluate_loss(model, self.dev, self.config.data.batch_size)
        hypotheses = translate_ids(model, self.dev.src_ids, self.tgt_sw, self.config,
                                   beam=self.config.training.dev_beam, progress="validation" if self.progress else None)
        record["bleu"] = corpus_scores(hypotheses, self.dev.targets)["bleu"].score
        return record

    @staticmethod
    def describe(record: dict) -> str:
        return f"dev loss {record['loss']:.3f}, ppl {record['perplexity']:.2f}, BLEU {record['bleu']:.2f}"


@torch.inference_mode()
def evaluate_loss(model: EncoderDecoder, data, batch_size: int, make_batch=translation_batch) -> dict:
    """Loss and perplexity per target token of ``data`` (anything with sizes() that
    ``make_batch(data, indices)`` cuts into batches)."""
    model.eval()
    total, tokens = 0.0, 0
    device = next(model.parameters()).device
    for indices in inference_batches(data.sizes(), batch_size):
        batch = make_batch(data, indices).to(device)
        total += float(sequence_loss(model, batch))
        tokens += batch.target_tokens
    loss = total / max(tokens, 1)
    return {"loss": loss, "perplexity": math.exp(min(loss, 50.0))}


def translate_ids(model: EncoderDecoder, src_ids: list[list[int]], tgt_sw: Subwords, config: Config,
                  beam: int = 1, progress: str | None = None) -> list[str]:
    """Best translation (text) of each encoded source sentence, in the input order."""
    return best_outputs(model, [len(s) for s in src_ids], lambda indices: make_batch([src_ids[i] for i in indices]),
                        tgt_sw, config, beam, progress)


def best_outputs(model: EncoderDecoder, sizes: list[int], source_batch: Callable[[list[int]], Batch],
                 tgt_sw: Subwords, config: Config, beam: int = 1, progress: str | None = None) -> list[str]:
    """Best output text of each of len(sizes) sources, in the input order; ``source_batch(indices)``
    is a batch of those sources (token ids, or audio features). ``progress``: the description of
    a progress bar over the sources (on a terminal), or None for none."""
    model.eval()
    dc = config.decoding
    out: list[str] = [""] * len(sizes)
    with phase_bar(len(sizes), progress or "", enabled=progress is not None) as bar:
        for indices in inference_batches(sizes, dc.batch_size):
            batch = source_batch(indices).to(next(model.parameters()).device)
            results = decode(model, batch.src, batch.src_lengths, beam=beam, alpha=dc.length_penalty,
                             max_length_ratio=dc.max_length_ratio, max_length_offset=dc.max_length_offset)
            for i, hyps in zip(indices, results):
                out[i] = tgt_sw.decode(hyps[0].tokens)
            bar.update(len(indices))
    return out
