"""Training, shared by every task: teacher-forced loss with Adam, validation, early stopping,
checkpoints. Each task gives the loop its data, model, loss and validation (its task.py's
``training_loop``, asked through attnmt.core.task); the loop does the rest.

The experiment folder ends up holding everything needed to translate and to resume:

    config.yaml          the configuration
    spm/                 sentencepiece model(s)
    best.safetensors     weights with the best validation score
    last.safetensors     weights, optimizer, RNG and trainer state of the last checkpoint
    metrics.jsonl        one JSON object per log line (train and validation)

The pieces, each usable alone:

    optimization.py  setup_training: Adam and the learning-rate schedule for any model and loss
    loop.py          TrainingLoop: the steps over batches_to_train, validation, checkpoints, resume,
                     early stopping; it gets the loss, the batches and the validation as arguments
    divergence.py    DivergenceCheck: a step whose loss or gradient norm is not finite stops the run
                     (on one GPU checked on the device, read every train record)
    metrics.py       MetricsWindow (loss and speed of the train records), ProgressBar, trim_metrics
    trainer.py       Trainer and train(): the task's pieces put together for `attnmt train`, then
                     the test sets scored

A task's own pieces are in its package (attnmt.translation.training, attnmt.speech.training,
attnmt.pairs.training); those translation and speech share are in attnmt.seq2seq.training.
"""

from attnmt.training.loop import TrainerState, TrainingLoop, Validation, batches_to_train
from attnmt.training.metrics import MetricsWindow, ProgressBar, trim_metrics
from attnmt.training.optimization import TrainingSetup, make_scheduler, noam, setup_training
from attnmt.training.trainer import Trainer, train

__all__ = [
    "train",
    "Trainer",
    "TrainerState",
    "TrainingLoop",
    "Validation",
    "batches_to_train",
    "MetricsWindow",
    "ProgressBar",
    "trim_metrics",
    "TrainingSetup",
    "setup_training",
    "make_scheduler",
    "noam",
]
