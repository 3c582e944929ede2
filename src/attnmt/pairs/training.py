"""What the training loop needs to train a sentence-pair classifier (task: pairs): the subwords
and encoded pairs, the decomposable attention model and its cross-entropy, batches of pairs, and
the validation (dev loss and accuracy)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnmt.core import distributed
from attnmt.core.config import Config
from attnmt.core.distributed import ONE_PROCESS, Processes
from attnmt.data.subwords import Subwords
from attnmt.pairs.classifier import PairBatch, pair_batch, predict
from attnmt.pairs.data import (
    EncodedPairs,
    TrainingPairs,
    encode_pairs,
    encode_training_pairs,
    prepare_pairs,
    read_pairs,
)
from attnmt.pairs.embeddings import initial_embeddings
from attnmt.pairs.model import DecomposableAttention, build_pair_model
from attnmt.training.loop import TrainingLoop
from attnmt.training.metrics import test_set_summary
from attnmt.training.optimization import TrainingSetup, setup_training


@dataclass
class PairData:
    subwords: Subwords  # one vocabulary for both sentences
    labels: list[str]
    train: TrainingPairs  # read line by line, held as arrays; without the pairs longer than data.max_length
    dev: EncodedPairs | None  # held with its texts


def prepare_pair_data(
    config: Config, processes: Processes = ONE_PROCESS, log: Callable[[str], None] = print
) -> PairData:
    with distributed.main_first(processes):
        subwords = prepare_pairs(config, log)
    d = config.data
    train = encode_training_pairs(d.train, subwords, d.labels, d.max_length, log)
    dev = encode_pairs(read_pairs(d.dev), subwords, d.labels, str(d.dev.tsv), None, log) if d.dev else None
    return PairData(subwords, d.labels, train, dev)


def setup_pairs(
    config: Config,
    data: PairData,
    device: torch.device,
    processes: Processes = ONE_PROCESS,
    log: Callable[[str], None] = print,
) -> TrainingSetup:
    """The pair model of the config, its embeddings initialised as model.embeddings says, its loss,
    optimizer and scheduler."""
    mc = config.model
    model = build_pair_model(mc, len(data.subwords), len(data.labels))
    if mc.embeddings is not None:
        with torch.no_grad():
            model.embed.weight.copy_(
                initial_embeddings(mc.embeddings, data.subwords, model.embed.weight, config.training.seed, log)
            )
            model.embed.weight[model.pad_id].zero_()
        model.embed.weight.requires_grad_(not mc.embeddings.freeze)
    model.to(device)
    return setup_training(model, PairLoss(model, config.training.label_smoothing), config.training, processes)


def pair_training_loop(
    config: Config, device: torch.device, processes: Processes, log: Callable[[str], None], progress: bool
) -> TrainingLoop:
    """Data, model and validation of a pair experiment in the training loop."""
    data = prepare_pair_data(config, processes, log)
    setup = setup_pairs(config, data, device, processes, log)
    validation = PairScores(data.dev, config.data.batch_size) if data.dev is not None else None
    return TrainingLoop(
        config,
        setup,
        data.train.sizes(),
        partial(pair_training_batch, data.train),
        validation,
        summary(config, setup.model, data),
        processes=processes,
        log=log,
        progress=progress,
        data=data,
    )


def summary(config: Config, model: nn.Module, data: PairData) -> str:
    mc = config.model
    return (
        f"model: decomposable attention{' with intra-sentence attention' if mc.intra_attention else ''}, "
        f"{sum(p.numel() for p in model.parameters()):,} parameters; {len(data.train):,} training pairs; "
        f"labels {', '.join(data.labels)}"
    )


def pair_training_batch(data: TrainingPairs | EncodedPairs, indices: list[int]) -> PairBatch:
    """The pairs ``indices`` of ``data`` as a batch, with their labels."""
    return pair_batch(
        [data.premise_ids[i] for i in indices],
        [data.hypothesis_ids[i] for i in indices],
        [int(data.label_ids[i]) for i in indices],
    )


class PairLoss(nn.Module):
    """The model and its loss as one module: the cross-entropy summed over the batch, and the
    number of pairs it sums over."""

    def __init__(self, model: DecomposableAttention, label_smoothing: float):
        super().__init__()
        self.model, self.label_smoothing = model, label_smoothing

    def forward(self, batch: PairBatch) -> tuple[Tensor, int]:
        logits = self.model(batch.premise, batch.hypothesis).logits
        return F.cross_entropy(logits, batch.labels, reduction="sum", label_smoothing=self.label_smoothing), len(
            batch.labels
        )


@dataclass
class PairScores:
    """The validation of a pair model: dev loss and accuracy."""

    dev: EncodedPairs
    batch_size: int

    def __call__(self, model: DecomposableAttention) -> dict:
        predicted, loss = predict(model, self.dev, self.batch_size)
        correct = sum(p == g for p, g in zip(predicted, self.dev.label_ids))
        return {"loss": loss, "accuracy": correct / len(self.dev)}

    @staticmethod
    def describe(record: dict) -> str:
        return f"dev loss {record['loss']:.3f}, accuracy {100 * record['accuracy']:.2f}%"


def pair_test_scores(
    config: Config, device: torch.device, log: Callable[[str], None], progress: bool = False
) -> tuple[dict, list[dict]]:
    """The best checkpoint on each test set of the config: the reports (without the predictions)
    and the records for metrics.jsonl."""
    from attnmt.pairs.classifier import PairClassifier

    classifier = PairClassifier(config.experiment_dir, device=device)
    reports = {name: classifier.evaluate(files, config.data.batch_size) for name, files in classifier.test_sets.items()}
    return test_set_summary(
        reports,
        lambda r: {"accuracy": r["accuracy"], "macro_f1": r["macro_f1"], "pairs": r["pairs"]},
        lambda r: f"accuracy {100 * r['accuracy']:.2f}%, macro F1 {100 * r['macro_f1']:.2f}% ({r['pairs']} pairs)",
        log,
    )
