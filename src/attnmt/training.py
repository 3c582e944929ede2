"""Training: teacher-forced cross-entropy with Adam, validation, early stopping, checkpoints.

The experiment folder ends up holding everything needed to translate and to resume:

    config.yaml          the configuration
    spm/                 sentencepiece model(s)
    best.safetensors     weights with the best validation score
    last.safetensors     weights, optimizer, RNG and trainer state of the last checkpoint
    metrics.jsonl        one JSON object per log line (train and validation)
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from attnmt import distributed
from attnmt.checkpoint import load_training_state, save_model, save_training_state
from attnmt.config import Config, TrainingConfig
from attnmt.data.batching import Batch, epoch_batches, inference_batches, make_batch, training_batch
from attnmt.data.prepare import EncodedCorpus, encode_corpus, prepare
from attnmt.data.subwords import PAD, Subwords
from attnmt.decoding import decode
from attnmt.errors import AttnmtError
from attnmt.evaluation import corpus_scores
from attnmt.files import append_text, atomic_write_text
from attnmt.interrupt import deferred_interrupt
from attnmt.models import EncoderDecoder, build_model


@dataclass
class TrainerState:
    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0  # batches of this epoch already trained on
    seconds: float = 0.0  # wall-clock time of the training loop (validation included), across resumes
    sentences: int = 0  # sentence pairs trained on, across resumes
    target_tokens: int = 0  # target tokens (with EOS) trained on
    best_score: float | None = None
    bad_validations: int = 0  # since the last improvement (early stopping)
    stopped_early: bool = False


def noam(step: int, warmup: int) -> float:
    """The inverse-square-root schedule with linear warm-up of Vaswani et al. (2017), as a factor
    of the learning rate that peaks at 1 at step ``warmup``: min(step^-0.5, step warmup^-1.5) warmup^0.5.
    (The paper's d_model^-0.5 min(...) is this with learning_rate = (d_model warmup)^-0.5.)"""
    return min(step ** -0.5, step * warmup ** -1.5) * warmup ** 0.5


def make_scheduler(optimizer: torch.optim.Optimizer, tc: TrainingConfig):
    if tc.schedule == "noam":
        # Stepped after every update; LambdaLR counts from 0, and the first update is step 1.
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda index: noam(index + 1, tc.warmup_steps))
    return torch.optim.lr_scheduler.ReduceLROnPlateau(
        optimizer, mode="max" if tc.early_stopping_metric == "bleu" else "min",
        factor=tc.lr_decay_factor, patience=tc.lr_decay_patience, min_lr=tc.min_learning_rate)


def sequence_loss(model: EncoderDecoder, batch: Batch, label_smoothing: float = 0.0) -> torch.Tensor:
    """Cross-entropy summed over the real (non-padding) target tokens. The output layer, the
    largest product of a step, runs on those positions only."""
    real = batch.tgt_out != PAD
    states, _ = model.decoder_outputs(batch.src, batch.src_lengths, batch.tgt_in)
    return model.generator.loss(states[real], batch.tgt_out[real], label_smoothing)


class TrainingLoss(nn.Module):
    """The model and its loss as one module: what DistributedDataParallel wraps."""

    def __init__(self, model: EncoderDecoder, label_smoothing: float):
        super().__init__()
        self.model, self.label_smoothing = model, label_smoothing

    def forward(self, batch: Batch) -> torch.Tensor:
        return sequence_loss(self.model, batch, self.label_smoothing)


class Trainer:
    def __init__(self, config: Config, log: Callable[[str], None] = print, progress: bool = True):
        tc = config.training
        self.device = distributed.device(tc.device)
        self.processes = distributed.start(self.device)
        if not self.processes.main:  # one voice: the main process logs and shows progress
            log, progress = (lambda message: None), False
        self.config, self.log, self.progress = config, log, progress
        self.folder: Path = config.experiment_dir
        if tc.threads:
            torch.set_num_threads(tc.threads)
        torch.manual_seed(tc.seed)
        with distributed.main_first(self.processes):  # the main process trains the subwords
            self.src_sw, self.tgt_sw = prepare(config, log)
        self.train_data = encode_corpus(config.data.train, self.src_sw, self.tgt_sw, config.data.max_length, log)
        self.dev_data = (encode_corpus(config.data.dev, self.src_sw, self.tgt_sw, None, log)
                         if config.data.dev else None)
        self.model = build_model(config.model, len(self.src_sw), len(self.tgt_sw)).to(self.device)
        self.loss = TrainingLoss(self.model, tc.label_smoothing)
        if self.processes.active:
            self.loss = DistributedDataParallel(self.loss)
            torch.manual_seed(tc.seed + self.processes.rank)  # same weights, own dropout masks
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=tc.learning_rate, betas=tc.adam_betas,
                                          fused=True)
        self.scheduler = make_scheduler(self.optimizer, tc)
        self.state = TrainerState()
        self.sizes = self.train_data.sizes()

    # ----------------------------------------------------------------- checkpoints

    def resume(self):
        path = self.folder / "last.safetensors"
        info = load_training_state(path, self.model, self.optimizer)
        try:
            self.state = TrainerState(**info["trainer"])
            self.scheduler.load_state_dict(info["scheduler"])
        except (KeyError, TypeError) as e:
            raise AttnmtError(f"{path}: not a training checkpoint of attnmt (trainer state: {e!r})") from None
        # Records past the checkpoint come from the run that died; they will be logged again.
        if self.processes.main:
            trim_metrics(self.folder / "metrics.jsonl", self.state.step)
        else:  # the checkpoint holds the main process's random state; the others take their own
            torch.manual_seed(self.config.training.seed + self.processes.rank + self.state.step)
        self.log(f"resumed from {path} at step {self.state.step}")

    def save_checkpoint(self):
        if not self.processes.main:
            return
        info = {"trainer": asdict(self.state), "scheduler": self.scheduler.state_dict()}
        save_training_state(self.folder / "last.safetensors", self.model, self.optimizer, info)

    # ----------------------------------------------------------------- loop

    def train(self, resume: bool = False) -> TrainerState:
        """Trains until a limit; Ctrl-C saves a checkpoint after the step under way and raises
        KeyboardInterrupt (see attnmt.interrupt)."""
        try:
            with deferred_interrupt() as self._interrupt:
                return self._train(resume)
        finally:
            distributed.stop(self.processes)

    def _train(self, resume: bool) -> TrainerState:
        if resume:
            self.resume()
        elif (self.folder / "last.safetensors").exists():
            raise AttnmtError(f"{self.folder} already holds a trained model; "
                              "use --resume to continue it, or choose another experiment_dir")
        elif self.processes.main:  # a run that died before its first checkpoint may have left records
            trim_metrics(self.folder / "metrics.jsonl", 0)
        tc = self.config.training
        mc = self.config.model
        self.log(f"model: {'transformer' if mc.type == 'transformer' else mc.attention + ' attention'}, "
                 f"{sum(p.numel() for p in self.model.parameters()):,} parameters; "
                 f"{len(self.train_data):,} training pairs")
        bar = tqdm(total=self._total_steps(), initial=self.state.step, disable=not self.progress,
                   unit="step", dynamic_ncols=True)
        window_tokens, window_loss, window_start = 0, 0.0, time.perf_counter()
        seconds_before, loop_start = self.state.seconds, time.perf_counter()
        while not self._should_stop():
            batches = self._epoch_batches(self.state.epoch)
            while self.state.batch_in_epoch < len(batches) and not self._should_stop():
                indices = batches[self.state.batch_in_epoch]
                if len(indices) < self.processes.world:  # a share for every process, or skip
                    self.state.batch_in_epoch += 1
                    continue
                loss, tokens = self.train_step(self._batch(self.train_data, distributed.shard(indices, self.processes)))
                self.state.batch_in_epoch += 1
                self.state.step += 1
                self.state.sentences += len(indices)
                self.state.target_tokens += tokens
                window_tokens += tokens
                window_loss += loss
                bar.update(1)
                if self.state.step % tc.log_every == 0:
                    speed = window_tokens / (time.perf_counter() - window_start)
                    record = {"loss": window_loss / window_tokens, "tokens_per_s": speed,
                              "lr": self.optimizer.param_groups[0]["lr"]}
                    bar.set_postfix(loss=f"{record['loss']:.3f}", tok_s=f"{speed:.0f}", **self._time_left())
                    self._write_metrics("train", record)
                    window_tokens, window_loss, window_start = 0, 0.0, time.perf_counter()
                if self._periodic(bar):  # validation time is not training speed
                    window_tokens, window_loss, window_start = 0, 0.0, time.perf_counter()
                self.state.seconds = seconds_before + time.perf_counter() - loop_start
                if self._interrupted():
                    bar.close()
                    self._save_and_stop()
            if self.state.batch_in_epoch >= len(batches):
                self.state.epoch += 1
                self.state.batch_in_epoch = 0
        bar.close()
        if self.state.step % tc.validate_every:  # end of training: one last validation
            self.validate()
        self.save_checkpoint()
        if self.processes.main and not (self.folder / "best.safetensors").exists():
            save_model(self.model, self.folder / "best.safetensors", {"step": self.state.step})
        distributed.barrier(self.processes)  # nobody leaves before the files are written
        return self.state

    def _periodic(self, bar) -> bool:
        """Validation and checkpoints when their step comes; True if anything ran."""
        tc, step = self.config.training, self.state.step
        validate = step % tc.validate_every == 0
        checkpoint = step % tc.checkpoint_every == 0 if tc.checkpoint_every else validate
        if validate:
            bar.clear()
            self.validate()
        if checkpoint:
            self.save_checkpoint()
        return validate or checkpoint

    def _save_and_stop(self):
        self.save_checkpoint()
        self.log(f"interrupted at step {self.state.step}: checkpoint saved to {self.folder / 'last.safetensors'}; "
                 "continue with 'attnmt train CONFIG --resume'")
        raise KeyboardInterrupt

    def _time_left(self) -> dict:
        """With a time budget the bar cannot know the number of steps: show the time left instead."""
        if self.config.training.max_minutes is None:
            return {}
        left = max(0, int(60 * self.config.training.max_minutes - self.state.seconds))
        return {"left": f"{left // 60}:{left % 60:02d}"}

    def _total_steps(self) -> int | None:
        tc = self.config.training
        if tc.max_steps:
            return tc.max_steps
        if tc.max_epochs:
            return tc.max_epochs * len(self._epoch_batches(0))
        return None

    def _should_stop(self) -> bool:
        tc, s = self.config.training, self.state
        stop = (s.stopped_early
                or (tc.max_steps is not None and s.step >= tc.max_steps)
                or (tc.max_epochs is not None and s.epoch >= tc.max_epochs)
                or (tc.max_minutes is not None and s.seconds >= 60 * tc.max_minutes))
        # The clocks of the processes differ: the main process decides for all.
        return bool(distributed.from_main([float(stop)], self.processes)[0])

    def _interrupted(self) -> bool:
        """Ctrl-C reached any of the processes."""
        return distributed.total([float(self._interrupt.requested)], self.processes)[0] > 0

    def _epoch_batches(self, epoch: int) -> list[list[int]]:
        d = self.config.data
        return epoch_batches(self.sizes, d.batch_size, d.batch_tokens, d.bucket_batches,
                             self.config.training.seed, epoch)

    @staticmethod
    def _batch(data: EncodedCorpus, indices: list[int]) -> Batch:
        return training_batch([data.src_ids[i] for i in indices], [data.tgt_ids[i] for i in indices], indices)

    def train_step(self, batch: Batch) -> tuple[float, int]:
        """One update; returns the summed loss and the number of target tokens."""
        tc = self.config.training
        self.model.train()
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=tc.precision == "bf16"):
            loss = self.loss(batch.to(self.device))
        # Sums over the processes' shares: the loss and size of the whole batch.
        loss_sum, tokens = distributed.total([loss.item(), batch.target_tokens], self.processes)
        self.optimizer.zero_grad(set_to_none=True)
        # Mean over the batch's tokens, so the step size does not depend on batch shape; with
        # several processes DistributedDataParallel averages their gradients: undo its division.
        (loss / tokens * self.processes.world).backward()
        if tc.clip_grad_norm:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), tc.clip_grad_norm)
        self.optimizer.step()
        if tc.schedule == "noam":
            self.scheduler.step()
        return loss_sum, int(tokens)

    # ----------------------------------------------------------------- validation

    def validate(self) -> dict | None:
        """Dev loss and BLEU (main process); every process then takes the same decisions from
        the main process's metric: best score, early stopping, learning-rate decay."""
        if self.dev_data is None:
            return None
        record = self._dev_scores() if self.processes.main else {}
        name = self.config.training.early_stopping_metric
        metric = distributed.from_main([record.get(name, 0.0)], self.processes)[0]
        improved = self._is_improvement(metric)
        if improved:
            self.state.best_score, self.state.bad_validations = metric, 0
            if self.processes.main:
                save_model(self.model, self.folder / "best.safetensors", {"step": self.state.step, **record})
        else:
            self.state.bad_validations += 1
        patience = self.config.training.early_stopping_patience
        if patience is not None and self.state.bad_validations >= patience:
            self.state.stopped_early = True
            self.log(f"early stopping: no improvement in {patience} validations")
        if self.config.training.schedule == "plateau":
            self.scheduler.step(metric)
        if not self.processes.main:
            return None
        record["lr"] = self.optimizer.param_groups[0]["lr"]
        record["best"] = improved
        self._write_metrics("valid", record)
        self.log(f"step {self.state.step}: dev loss {record['loss']:.3f}, ppl {record['perplexity']:.2f}, "
                 f"BLEU {record['bleu']:.2f}{' (best)' if improved else ''}")
        return record

    def _dev_scores(self) -> dict:
        record = evaluate_loss(self.model, self.dev_data, self.config.data.batch_size)
        hypotheses = translate_ids(self.model, self.dev_data.src_ids, self.tgt_sw, self.config,
                                   beam=self.config.training.dev_beam)
        record["bleu"] = corpus_scores(hypotheses, self.dev_data.targets)["bleu"].score
        return record

    def _is_improvement(self, metric: float) -> bool:
        best = self.state.best_score
        if best is None:
            return True
        return metric > best if self.config.training.early_stopping_metric == "bleu" else metric < best

    def _write_metrics(self, kind: str, record: dict):
        if not self.processes.main:
            return
        line = {"type": kind, "step": self.state.step, "epoch": self.state.epoch,
                "seconds": round(self.state.seconds, 2), **record}
        append_text(self.folder / "metrics.jsonl", json.dumps(line) + "\n")


@torch.inference_mode()
def evaluate_loss(model: EncoderDecoder, data: EncodedCorpus, batch_size: int) -> dict:
    model.eval()
    total, tokens = 0.0, 0
    device = next(model.parameters()).device
    for indices in inference_batches(data.sizes(), batch_size):
        batch = Trainer._batch(data, indices).to(device)
        total += float(sequence_loss(model, batch))
        tokens += batch.target_tokens
    loss = total / max(tokens, 1)
    return {"loss": loss, "perplexity": math.exp(min(loss, 50.0))}


def translate_ids(model: EncoderDecoder, src_ids: list[list[int]], tgt_sw: Subwords, config: Config,
                  beam: int = 1) -> list[str]:
    """Best translation (text) of each encoded source sentence, in the input order."""
    model.eval()
    dc = config.decoding
    out: list[str] = [""] * len(src_ids)
    for indices in inference_batches([len(s) for s in src_ids], dc.batch_size):
        batch = make_batch([src_ids[i] for i in indices]).to(next(model.parameters()).device)
        results = decode(model, batch.src, batch.src_lengths, beam=beam, alpha=dc.length_penalty,
                         max_length_ratio=dc.max_length_ratio, max_length_offset=dc.max_length_offset)
        for i, hyps in zip(indices, results):
            out[i] = tgt_sw.decode(hyps[0].tokens)
    return out


def trim_metrics(path: Path, step: int):
    """Keeps the records of metrics.jsonl up to ``step``, and drops a line cut off by a crash."""
    if not path.is_file():
        return
    # After the last "\n" comes nothing, or the start of a line whose writer was killed.
    complete = path.read_text(encoding="utf-8", errors="replace").split("\n")[:-1]
    atomic_write_text(path, "".join(line + "\n" for line in complete if _record_step(line) <= step))


def _record_step(line: str) -> float:
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return math.inf
    step = record.get("step") if isinstance(record, dict) else None
    return step if isinstance(step, int) else math.inf


def train(config: Config, resume: bool = False, log: Callable[[str], None] = print,
          progress: bool = True) -> TrainerState:
    return Trainer(config, log, progress).train(resume)
