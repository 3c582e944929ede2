"""``attnmt train``: the processes, then the task's data, model and validation (asked of the
config's task, attnmt.core.task), then the shared loop, then the test sets."""

from __future__ import annotations

import json
from typing import Callable

import torch

from attnmt.core import distributed, speed, threads
from attnmt.core.config import Config
from attnmt.core.errors import AttnmtError
from attnmt.core.files import atomic_write_text
from attnmt.core.task import task_of
from attnmt.training.loop import TrainerState


class Trainer:
    """An experiment ready to train: processes started, data prepared, model set up."""

    def __init__(self, config: Config, log: Callable[[str], None] = print, progress: bool = True):
        tc = config.training
        self.config = config
        self.task = task_of(config.task)
        self.device = distributed.device(tc.device)
        self.processes = distributed.start(self.device)
        if not self.processes.main:  # one voice: the main process logs and shows progress
            log, progress = (lambda message: None), False
        self.log, self.progress = log, progress
        threads.choose(tc.threads, log)
        if tc.precision == "bf16" and self.device.type == "cpu" and not speed.cpu_has_bf16():
            log(
                "warning: training.precision bf16 on a CPU without bf16 units (AVX512-BF16 or AMX): its products are "
                "emulated, tens of times slower than fp32 here; set training.precision: fp32"
            )
        if tc.init_from is not None and not self.task.fine_tunes:
            raise AttnmtError(
                f"training.init_from: the training of {self.task.what} cannot start from another "
                "model's weights (fine-tuning is for translation and speech models)"
            )
        torch.manual_seed(tc.seed)
        self.loop = self.task.training_loop(config, self.device, self.processes, log, progress)
        self.model = self.loop.model
        self.data = self.loop.data  # what the task prepared (translation: TranslationData)

    def train(self, resume: bool = False) -> TrainerState:
        """Trains until a limit (see TrainingLoop.run), then scores the best model on the test sets
        of the config; leaves the process group at the end."""
        try:
            state = self.loop.run(resume)
            if self.processes.main and self.config.data.test:
                self.score_test_sets()
            return state
        finally:
            self.loop.leave_processes()

    def score_test_sets(self):
        """The best checkpoint on each test set, as the task scores it (translation: BLEU, chrF and
        BLEU by length; speech: CER and WER; pairs: accuracy, per-class precision, recall and F1,
        confusion matrix): in test-scores.json and as "test" records of metrics.jsonl."""
        reports, records = self.task.test_scores(self.config, self.device, self.log, self.progress)
        atomic_write_text(self.config.experiment_dir / "test-scores.json", json.dumps(reports, indent=2) + "\n")
        for record in records:
            self.loop.write_metrics("test", record)


def train(
    config: Config, resume: bool = False, log: Callable[[str], None] = print, progress: bool = True
) -> TrainerState:
    return Trainer(config, log, progress).train(resume)
