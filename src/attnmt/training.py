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
import torch.nn.functional as F
from tqdm import tqdm

from attnmt.checkpoint import load_training_state, save_model, save_training_state
from attnmt.config import Config
from attnmt.data.batching import Batch, epoch_batches, inference_batches, make_batch
from attnmt.data.prepare import EncodedCorpus, encode_corpus, prepare
from attnmt.data.subwords import PAD, Subwords
from attnmt.decoding import decode
from attnmt.errors import AttnmtError
from attnmt.evaluation import corpus_scores
from attnmt.models import Seq2Seq, build_model


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


def sequence_loss(model: Seq2Seq, batch: Batch, label_smoothing: float = 0.0) -> torch.Tensor:
    """Cross-entropy summed over the real (non-padding) target tokens."""
    real = batch.tgt_out != PAD
    logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in, keep=real)
    return F.cross_entropy(logits.float(), batch.tgt_out[real], label_smoothing=label_smoothing, reduction="sum")


class Trainer:
    def __init__(self, config: Config, log: Callable[[str], None] = print, progress: bool = True):
        self.config, self.log, self.progress = config, log, progress
        self.folder: Path = config.experiment_dir
        tc = config.training
        if tc.threads:
            torch.set_num_threads(tc.threads)
        torch.manual_seed(tc.seed)
        self.src_sw, self.tgt_sw = prepare(config, log)
        self.train_data = encode_corpus(config.data.train, self.src_sw, self.tgt_sw, config.data.max_length, log)
        self.dev_data = (encode_corpus(config.data.dev, self.src_sw, self.tgt_sw, None, log)
                         if config.data.dev else None)
        self.model = build_model(config.model, len(self.src_sw), len(self.tgt_sw))
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=tc.learning_rate, fused=True)
        self.scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
            self.optimizer, mode="max" if tc.early_stopping_metric == "bleu" else "min",
            factor=tc.lr_decay_factor, patience=tc.lr_decay_patience, min_lr=tc.min_learning_rate)
        self.state = TrainerState()
        self.sizes = self.train_data.sizes()

    # ----------------------------------------------------------------- checkpoints

    def resume(self):
        path = self.folder / "last.safetensors"
        info = load_training_state(path, self.model, self.optimizer)
        self.state = TrainerState(**info["trainer"])
        self.scheduler.load_state_dict(info["scheduler"])
        self.log(f"resumed from {path} at step {self.state.step}")

    def save_checkpoint(self):
        info = {"trainer": asdict(self.state), "scheduler": self.scheduler.state_dict()}
        save_training_state(self.folder / "last.safetensors", self.model, self.optimizer, info)

    # ----------------------------------------------------------------- loop

    def train(self, resume: bool = False) -> TrainerState:
        if resume:
            self.resume()
        elif (self.folder / "last.safetensors").exists():
            raise AttnmtError(f"{self.folder} already holds a trained model; "
                              "use --resume to continue it, or choose another experiment_dir")
        tc = self.config.training
        self.log(f"model: {self.config.model.attention} attention, "
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
                loss, tokens = self.train_step(self._batch(self.train_data, indices))
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
            if self.state.batch_in_epoch >= len(batches):
                self.state.epoch += 1
                self.state.batch_in_epoch = 0
        bar.close()
        if self.state.step % tc.validate_every:  # end of training: one last validation
            self.validate()
        self.save_checkpoint()
        if not (self.folder / "best.safetensors").exists():
            save_model(self.model, self.folder / "best.safetensors", {"step": self.state.step})
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
        return (s.stopped_early
                or (tc.max_steps is not None and s.step >= tc.max_steps)
                or (tc.max_epochs is not None and s.epoch >= tc.max_epochs)
                or (tc.max_minutes is not None and s.seconds >= 60 * tc.max_minutes))

    def _epoch_batches(self, epoch: int) -> list[list[int]]:
        d = self.config.data
        return epoch_batches(self.sizes, d.batch_size, d.batch_tokens, d.bucket_batches,
                             self.config.training.seed, epoch)

    @staticmethod
    def _batch(data: EncodedCorpus, indices: list[int]) -> Batch:
        return make_batch([data.src_ids[i] for i in indices], [data.tgt_ids[i] for i in indices], indices)

    def train_step(self, batch: Batch) -> tuple[float, int]:
        """One update; returns the summed loss and the number of target tokens."""
        tc = self.config.training
        self.model.train()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=tc.precision == "bf16"):
            loss = sequence_loss(self.model, batch, tc.label_smoothing)
        tokens = batch.target_tokens
        self.optimizer.zero_grad(set_to_none=True)
        (loss / tokens).backward()  # mean over tokens: the step size does not depend on batch shape
        if tc.clip_grad_norm:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), tc.clip_grad_norm)
        self.optimizer.step()
        return loss.item(), tokens

    # ----------------------------------------------------------------- validation

    def validate(self) -> dict | None:
        if self.dev_data is None:
            return None
        record = evaluate_loss(self.model, self.dev_data, self.config.data.batch_size)
        hypotheses = translate_ids(self.model, self.dev_data.src_ids, self.tgt_sw, self.config,
                                   beam=self.config.training.dev_beam)
        record["bleu"] = corpus_scores(hypotheses, self.dev_data.targets)["bleu"].score
        metric = record["bleu"] if self.config.training.early_stopping_metric == "bleu" else record["loss"]
        improved = self._is_improvement(metric)
        if improved:
            self.state.best_score, self.state.bad_validations = metric, 0
            save_model(self.model, self.folder / "best.safetensors", {"step": self.state.step, **record})
        else:
            self.state.bad_validations += 1
        patience = self.config.training.early_stopping_patience
        if patience is not None and self.state.bad_validations >= patience:
            self.state.stopped_early = True
            self.log(f"early stopping: no improvement in {patience} validations")
        self.scheduler.step(metric)
        record["lr"] = self.optimizer.param_groups[0]["lr"]
        record["best"] = improved
        self._write_metrics("valid", record)
        self.log(f"step {self.state.step}: dev loss {record['loss']:.3f}, ppl {record['perplexity']:.2f}, "
                 f"BLEU {record['bleu']:.2f}{' (best)' if improved else ''}")
        return record

    def _is_improvement(self, metric: float) -> bool:
        best = self.state.best_score
        if best is None:
            return True
        return metric > best if self.config.training.early_stopping_metric == "bleu" else metric < best

    def _write_metrics(self, kind: str, record: dict):
        line = {"type": kind, "step": self.state.step, "epoch": self.state.epoch,
                "seconds": round(self.state.seconds, 2), **record}
        with open(self.folder / "metrics.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")


@torch.inference_mode()
def evaluate_loss(model: Seq2Seq, data: EncodedCorpus, batch_size: int) -> dict:
    model.eval()
    total, tokens = 0.0, 0
    for indices in inference_batches(data.sizes(), batch_size):
        batch = Trainer._batch(data, indices)
        total += float(sequence_loss(model, batch))
        tokens += batch.target_tokens
    loss = total / max(tokens, 1)
    return {"loss": loss, "perplexity": math.exp(min(loss, 50.0))}


def translate_ids(model: Seq2Seq, src_ids: list[list[int]], tgt_sw: Subwords, config: Config,
                  beam: int = 1) -> list[str]:
    """Best translation (text) of each encoded source sentence, in the input order."""
    model.eval()
    dc = config.decoding
    out: list[str] = [""] * len(src_ids)
    for indices in inference_batches([len(s) for s in src_ids], dc.batch_size):
        batch = make_batch([src_ids[i] for i in indices])
        results = decode(model, batch.src, batch.src_lengths, beam=beam, alpha=dc.length_penalty,
                         max_length_ratio=dc.max_length_ratio, max_length_offset=dc.max_length_offset)
        for i, hyps in zip(indices, results):
            out[i] = tgt_sw.decode(hyps[0].tokens)
    return out


def train(config: Config, resume: bool = False, log: Callable[[str], None] = print,
          progress: bool = True) -> TrainerState:
    return Trainer(config, log, progress).train(resume)
