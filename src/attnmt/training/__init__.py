"""Training: teacher-forced cross-entropy with Adam, validation, early stopping, checkpoints.

The experiment folder ends up holding everything needed to translate and to resume:

    config.yaml          the configuration
    spm/                 sentencepiece model(s)
    best.safetensors     weights with the best validation score
    last.safetensors     weights, optimizer, RNG and trainer state of the last checkpoint
    metrics.jsonl        one JSON object per log line (train and validation)

The pieces, each usable alone:

    translation.py   prepare_data (subwords, encoded corpora), setup_translation (model, loss,
                     optimizer, scheduler), translation_batch, DevScores (dev loss and BLEU)
    optimization.py  setup_training: Adam and the learning-rate schedule for any model and loss
    loop.py          TrainingLoop: the steps over batches_to_train, validation, checkpoints, resume,
                     early stopping; it gets the loss, the batches and the validation as arguments
    metrics.py       MetricsWindow (loss and speed of the train records), ProgressBar, trim_metrics
    trainer.py       Trainer and train(): the pieces put together for `attnmt train`
"""

from attnmt.training.loop import TrainerState, TrainingLoop, Validation, batches_to_train
from attnmt.training.metrics import MetricsWindow, ProgressBar, trim_metrics
from attnmt.training.optimization import TrainingSetup, make_scheduler, noam, setup_training
from attnmt.training.trainer import Trainer, train
from attnmt.translation.training import (
                                         DevScores,
                                         TrainingLoss,
                                         TranslationData,
                                         evaluate_loss,
                                         prepare_data,
                                         sequence_loss,
                                         setup_translation,
                                         translate_ids,
                                         translation_batch,
)

__all__ = [
    "train", "Trainer", "TrainerState", "TrainingLoop", "Validation", "batches_to_train",
    "MetricsWindow", "ProgressBar", "trim_metrics", "TrainingSetup", "setup_training", "make_scheduler", "noam",
    "TranslationData", "prepare_data", "setup_translation", "translation_batch", "sequence_loss", "TrainingLoss",
    "DevScores", "evaluate_loss", "translate_ids",
]
