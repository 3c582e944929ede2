"""``attnmt train``: the processes, then the data, model and validation of a translation
experiment, then the loop."""

from __future__ import annotations

from functools import partial
from typing import Callable

import torch

from attnmt import distributed
from attnmt.config import Config
from attnmt.training.loop import TrainerState, TrainingLoop
from attnmt.training.translation import DevScores, prepare_data, setup_translation, summary, pair_batch


class Trainer:
    """A translation experiment ready to train: processes started, data prepared, model set up."""

    def __init__(self, config: Config, log: Callable[[str], None] = print, progress: bool = True):
        tc = config.training
        self.config = config
        self.device = distributed.device(tc.device)
        self.processes = distributed.start(self.device)
        if not self.processes.main:  # one voice: the main process logs and shows progress
            log, progress = (lambda message: None), False
        if tc.threads:
            torch.set_num_threads(tc.threads)
        torch.manual_seed(tc.seed)
        self.data = prepare_data(config, self.processes, log)
        setup = setup_translation(config, self.data, self.device, self.processes)
        self.model = setup.model
        validation = DevScores(self.data.dev, self.data.tgt_sw, config) if self.data.dev is not None else None
        self.loop = TrainingLoop(config, setup, self.data.train.sizes(), partial(pair_batch, self.data.train),
                                 validation, summary(config, self.model, self.data),
                                 processes=self.processes, log=log, progress=progress)

    def train(self, resume: bool = False) -> TrainerState:
        """Trains until a limit (see TrainingLoop.run); leaves the process group at the end."""
        try:
            return self.loop.run(resume)
        finally:
            distributed.stop(self.processes)


def train(config: Config, resume: bool = False, log: Callable[[str], None] = print,
          progress: bool = True) -> TrainerState:
    return Trainer(config, log, progress).train(resume)
