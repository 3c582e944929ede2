"""What the training loop needs to train a translation model: the experiment's subwords and
encoded corpora, the model and its teacher-forced loss, batches of sentence pairs, and the
validation (dev loss and BLEU)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable

import torch
from torch import nn

from attnmt.core import distributed
from attnmt.core.config import Config, GuidedAlignment
from attnmt.core.distributed import ONE_PROCESS, Processes
from attnmt.data import splits
from attnmt.data.batching import Batch, training_batch
from attnmt.data.store import PairStore, StoredPairs
from attnmt.data.subwords import PAD, Subwords
from attnmt.seq2seq import EncoderDecoder, build_model
from attnmt.seq2seq.graphs import GraphedLoss, graphed_loss
from attnmt.seq2seq.training import (
    TrainingLoss,
    coverage_loss,
    coverage_note,
    evaluate_loss,
    sequence_loss,
    translate_ids,
    validation_decoding,
)
from attnmt.training.loop import TrainingLoop
from attnmt.training.optimization import TrainingSetup, setup_training
from attnmt.training import fine_tuning
from attnmt.translation import guided_alignment, reference_links
from attnmt.translation.evaluation import corpus_scores
from attnmt.translation.prepare import EncodedCorpus, encode_corpus, prepare_subwords, prepared_store, training_pairs


@dataclass
class TranslationData:
    src_sw: Subwords
    tgt_sw: Subwords
    train: StoredPairs  # read from the store: without the pairs held out or dropped by the filters
    dev: EncodedCorpus | None  # every pair, with its text (BLEU); None without a dev set
    store: PairStore | None = None


def prepare_data(
    config: Config, processes: Processes = ONE_PROCESS, log: Callable[[str], None] = print
) -> TranslationData:
    """The subwords and the store of the encoded training pairs (each made unless present, by the
    main process while the others wait; every process then maps the same store), the training
    pairs read from it, and the encoded dev corpus of an experiment."""
    with distributed.main_first(processes):  # (it also draws the held-out dev and test sets)
        src_sw, tgt_sw = prepare_subwords(config, log)
        prepared = prepared_store(config, src_sw, tgt_sw, log, check=processes.main)
    train = training_pairs(config, prepared, src_sw, log)
    dev = None
    if config.data.dev:
        dev = encode_corpus(splits.resolved(config.data.dev, "dev", config.experiment_dir), src_sw, tgt_sw, None, log)
    if config.training.guided_alignment is not None:
        with distributed.main_first(processes):  # (eflomal runs once, in the main process)
            guided_alignment.attach_links(config, train, src_sw, tgt_sw, log, check=processes.main)
    return TranslationData(src_sw, tgt_sw, train, dev, prepared)


def setup_translation(
    config: Config, data: TranslationData, device: torch.device, processes: Processes = ONE_PROCESS
) -> TrainingSetup:
    """The model of the config for the data's vocabularies, its loss, optimizer and scheduler."""
    model = build_model(config.model, len(data.src_sw), len(data.tgt_sw))
    tc = config.training
    if tc.init_from is not None:  # fine-tuning (a resumed run then loads its own last checkpoint)
        fine_tuning.initialize(model, config)
    model = model.to(device)
    guided = tc.guided_alignment
    # (the graphs capture the cross-entropy only: guided alignment and the coverage loss train without them)
    graphs = (
        None
        if guided or tc.coverage_loss
        else graphed_loss(model, tc.label_smoothing, device, tc.cuda_graphs, processes.world, tc.attention_window)
    )
    loss = TranslationLoss(model, tc.label_smoothing, graphs, guided, tc.attention_window, tc.coverage_loss)
    return setup_training(model, loss, tc, processes)


def summary(config: Config, model: nn.Module, data: TranslationData) -> str:
    mc, tc = config.model, config.training
    start = "" if tc.init_from is None else f"; fine-tuning the {tc.init_checkpoint} weights of {tc.init_from}"
    return (
        f"model: {mc.transformer_name if mc.type == 'transformer' else mc.attention_name + ' attention'}, "
        f"{sum(p.numel() for p in model.parameters()):,} parameters{coverage_note(tc.coverage_loss)}; "
        f"{len(data.train):,} training pairs{start}"
    )


def translation_batch(data: EncodedCorpus | StoredPairs, indices: list[int]) -> Batch:
    """The pairs ``indices`` of ``data`` as a batch for the loss (training and dev loss); with the
    reference attention of guided alignment where ``data`` has links."""
    batch = training_batch([data.src_ids[i] for i in indices], [data.tgt_ids[i] for i in indices], indices)
    if data.alignments is not None:
        batch.alignment = reference_links.reference_attention(
            [data.alignments[i] for i in indices], batch.src.size(1), batch.tgt_out.size(1)
        )
    return batch


def guided_sequence_loss(
    model: EncoderDecoder,
    batch: Batch,
    label_smoothing: float,
    guided: GuidedAlignment,
    window: tuple[int, int] | None = None,
    coverage_weight: float = 0.0,
) -> torch.Tensor:
    """The cross-entropy (attnmt.seq2seq.training.sequence_loss) plus guided.weight times the
    guided-alignment loss of the batch's reference attention (attnmt.translation.guided_alignment);
    the attention within ``window``; and the coverage loss times ``coverage_weight``."""
    if batch.alignment is None:
        return sequence_loss(model, batch, label_smoothing, window=window, coverage_weight=coverage_weight)
    real = batch.tgt_out != PAD
    states, weights = guided_alignment.trained_attention(model, batch, guided, window)
    loss = model.generator.loss(states[real], batch.tgt_out[real], label_smoothing)
    if coverage_weight:
        loss = loss + coverage_weight * coverage_loss(weights, real)
    return loss + guided.weight * reference_links.alignment_loss(weights, batch.alignment)


class TranslationLoss(TrainingLoss):
    """The shared teacher-forced loss, with guided alignment where the config asks for it."""

    def __init__(
        self,
        model: EncoderDecoder,
        label_smoothing: float,
        graphs: GraphedLoss | None = None,
        guided: GuidedAlignment | None = None,
        window: tuple[int, int] | None = None,
        coverage_weight: float = 0.0,
    ):
        super().__init__(model, label_smoothing, graphs, window, coverage_weight)
        self.guided = guided

    def loss(self, batch: Batch) -> torch.Tensor:
        if self.guided is None:
            return super().loss(batch)
        return guided_sequence_loss(
            self.model, batch, self.label_smoothing, self.guided, self.window, self.coverage_weight
        )


@dataclass
class DevScores:
    """The validation of a translation model: dev loss and perplexity (teacher forcing), and the
    BLEU of its translations (beam training.dev_beam), within training.attention_window."""

    dev: EncodedCorpus
    tgt_sw: Subwords
    config: Config

    progress: bool = True  # a bar while the dev set is translated (on a terminal)

    def __call__(self, model: EncoderDecoder) -> dict:
        record = evaluate_loss(
            model, self.dev, self.config.data.batch_size, translation_batch, self.config.training.attention_window
        )
        hypotheses = translate_ids(
            model,
            self.dev.src_ids,
            self.tgt_sw,
            validation_decoding(self.config),
            progress="validation" if self.progress else None,
        )
        record["bleu"] = corpus_scores(hypotheses, self.dev.targets)["bleu"].score
        return record

    @staticmethod
    def describe(record: dict) -> str:
        return f"dev loss {record['loss']:.3f}, ppl {record['perplexity']:.2f}, BLEU {record['bleu']:.2f}"


def translation_training_loop(
    config: Config, device: torch.device, processes: Processes, log: Callable[[str], None], progress: bool
) -> TrainingLoop:
    """Data, model, loss and validation of a translation experiment in the shared training loop."""
    data = prepare_data(config, processes, log)
    setup = setup_translation(config, data, device, processes)
    validation = DevScores(data.dev, data.tgt_sw, config, progress) if data.dev is not None else None
    return TrainingLoop(
        config,
        setup,
        data.train.sizes(),
        partial(translation_batch, data.train),
        validation,
        summary(config, setup.model, data),
        processes=processes,
        log=log,
        progress=progress,
        data=data,
    )
