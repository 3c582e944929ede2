"""``attnmt train``: the processes, then the data, model and validation of a translation
experiment (or of a sentence-pair one, task: pairs: attnmt.pairs.training, or of a speech one, task:
speech: attnmt.speech.training), then the loop."""

from __future__ import annotations

import json
from functools import partial
from typing import Callable

import torch

from attnmt.core import distributed, speed, threads
from attnmt.core.config import Config
from attnmt.core.files import atomic_write_text
from attnmt.pairs.training import pair_test_scores, pair_training_loop
from attnmt.training.loop import TrainerState, TrainingLoop
from attnmt.translation.training import DevScores, prepare_data, setup_translation, summary, translation_batch


class Trainer:
    """An experiment ready to train: processes started, data prepared, model set up."""

    def __init__(self, config: Config, log: Callable[[str], None] = print, progress: bool = True):
        tc = config.training
        self.config = config
        self.device = distributed.device(tc.device)
        self.processes = distributed.start(self.device)
        if not self.processes.main:  # one voice: the main process logs and shows progress
            log, progress = (lambda message: None), False
        self.log, self.progress = log, progress
        threads.choose(tc.threads, log)
        if tc.precision == "bf16" and self.device.type == "cpu" and not speed.cpu_has_bf16():
            log("warning: training.precision bf16 on a CPU without bf16 units (AVX512-BF16 or AMX): its products are "
                "emulated, tens of times slower than fp32 here; set training.precision: fp32")
        torch.manual_seed(tc.seed)
        if config.task == "pairs":
            self.loop = pair_training_loop(config, self.device, self.processes, log, progress)
        elif config.task == "speech":
            from attnmt.speech.training import speech_parts

            parts = speech_parts(config, self.device, self.processes, log, progress)
            self.loop = TrainingLoop(config, parts.setup, parts.sizes, parts.make_batch, parts.validation,
                                     parts.summary, processes=self.processes, log=log, progress=progress)
        else:
            self.data = prepare_data(config, self.processes, log)
            setup = setup_translation(config, self.data, self.device, self.processes)
            validation = (DevScores(self.data.dev, self.data.tgt_sw, config, progress) if self.data.dev is not None
                          else None)
            self.loop = TrainingLoop(config, setup, self.data.train.sizes(),
                                     partial(translation_batch, self.data.train), validation,
                                     summary(config, setup.model, self.data),
                                     processes=self.processes, log=log, progress=progress)
        self.model = self.loop.model

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
        """The best checkpoint on each test set: in test-scores.json and as "test" records of
        metrics.jsonl. Translation: BLEU, chrF and BLEU by length; pairs: accuracy, per-class
        precision, recall and F1, confusion matrix."""
        if self.config.task == "pairs":
            reports, records = pair_test_scores(self.config, self.device, self.log)
        elif self.config.task == "speech":
            reports, records = self.speech_test_scores()
        else:
            reports, records = self.translation_test_scores()
        atomic_write_text(self.config.experiment_dir / "test-scores.json", json.dumps(reports, indent=2) + "\n")
        for record in records:
            self.loop.write_metrics("test", record)

    def translation_test_scores(self) -> tuple[dict, list[dict]]:
        from attnmt.api import load
        from attnmt.evaluation import test_set_reports

        translator = load(self.config.experiment_dir, device=self.device)
        reports = test_set_reports(translator, translator.test_sets, log=self.log, progress=self.progress)
        return self.summarized(
            reports, lambda r: {"bleu": r["bleu"]["score"], "chrf": r["chrf"]["score"], "sentences": r["sentences"],
                                "beam": r["beam"]},
            lambda r: f"BLEU {r['bleu']['score']:.2f}, chrF {r['chrf']['score']:.2f} ({r['sentences']} sentences, "
                      f"beam {r['beam']})")

    def speech_test_scores(self) -> tuple[dict, list[dict]]:
        from attnmt.api import load
        from attnmt.speech.error_rates import speech_test_set_reports

        recognizer = load(self.config.experiment_dir, device=self.device)
        reports = speech_test_set_reports(recognizer, recognizer.test_sets, log=self.log,
                                          cache=self.config.experiment_dir / "features", progress=self.progress)
        return self.summarized(
            reports, lambda r: {k: r[k] for k in ("cer", "wer", "beam")},
            lambda r: f"CER {r['cer']:.2f}%, WER {r['wer']:.2f}% ({r['utterances']} utterances, beam {r['beam']})")

    def summarized(self, reports: dict[str, dict], record: Callable[[dict], dict],
                   line: Callable[[dict], str]) -> tuple[dict, list[dict]]:
        """The reports without their hypotheses, and a metrics record (``record``) of each, logged (``line``)."""
        summary = {name: {key: value for key, value in report.items() if key != "hypotheses"}
                   for name, report in reports.items()}
        for name, report in summary.items():
            self.log(f"test set {name}: {line(report)}")
        return summary, [{"name": name, **record(report)} for name, report in summary.items()]


def train(config: Config, resume: bool = False, log: Callable[[str], None] = print,
          progress: bool = True) -> TrainerState:
    return Trainer(config, log, progress).train(resume)
