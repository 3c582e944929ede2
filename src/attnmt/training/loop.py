"""The training loop, for any model and data: steps, periodic validation and checkpoints, early
stopping, resume, Ctrl-C, several processes.

The loop knows the examples only by their sizes and the model only by what it is given:

    setup        the model, its loss (batch -> summed loss, number of terms summed), optimizer, scheduler
    make_batch   example indices -> a batch that the loss takes (anything with .to(device))
    validation   scores on the dev set (a Validation), or None
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterator, Protocol

import numpy as np
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from attnmt.core import distributed, threads
from attnmt.core.checkpoint import load_training_state, save_model, save_training_state
from attnmt.core.config import Config
from attnmt.core.distributed import ONE_PROCESS, Processes
from attnmt.core.errors import AttnmtError
from attnmt.core.files import append_text
from attnmt.core.folders import kept_checkpoint_path, kept_checkpoints
from attnmt.core.interrupt import deferred_interrupt
from attnmt.data import batching
from attnmt.training.divergence import DivergenceCheck
from attnmt.training.metrics import MetricsWindow, ProgressBar, trim_metrics
from attnmt.training.optimization import TrainingSetup, higher_is_better

# What a CPU allocation that fails raises: a RuntimeError of torch's CPU allocator, not torch.OutOfMemoryError
CPU_OUT_OF_MEMORY = "DefaultCPUAllocator: can't allocate memory"


@dataclass
class TrainerState:
    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0  # batches of this epoch already trained on
    seconds: float = 0.0  # wall-clock time of the training loop (validation included), across resumes
    sentences: int = 0  # examples (sentence pairs) trained on, across resumes
    target_tokens: int = 0  # terms of the loss (target tokens, with EOS) trained on
    best_score: float | None = None
    bad_validations: int = 0  # since the last improvement (early stopping)
    stopped_early: bool = False


class Validation(Protocol):
    """Scores of the model on the dev set, as a record of metrics.jsonl that holds the config's
    early-stopping metric. Called on the main process only; it must draw no random numbers from
    torch's generator (e.g. by dropout: model.eval()), or a resumed run would differ."""

    def __call__(self, model: nn.Module) -> dict: ...

    def describe(self, record: dict) -> str:
        """The scores for the log, e.g. "dev loss 1.234, ppl 3.43, BLEU 27.10"."""


def batches_to_train(
    state: TrainerState,
    epoch_batches: Callable[[int], list[list[int]]],
    should_stop: Callable[[], bool],
    min_size: int = 1,
) -> Iterator[list[int]]:
    """The batches (example indices) from the state's position on, epoch after epoch, until
    ``should_stop()``, which is asked before each one. A batch counts in the state
    (batch_in_epoch, then epoch) as soon as it is handed out, so a checkpoint written after its
    step resumes with the next. Batches smaller than ``min_size`` (one example for each process)
    are skipped."""
    while not should_stop():
        batches = epoch_batches(state.epoch)
        while state.batch_in_epoch < len(batches) and not should_stop():
            indices = batches[state.batch_in_epoch]
            state.batch_in_epoch += 1
            if len(indices) >= min_size:
                yield indices
        if state.batch_in_epoch >= len(batches):
            state.epoch += 1
            state.batch_in_epoch = 0


class TrainingLoop:
    """Trains ``setup.model`` in ``config.experiment_dir`` until a limit of ``config.training``.
    Every epoch cuts the examples, known by their ``sizes``, into batches of similar sizes under
    config.data's budget; ``make_batch`` builds a batch from its examples' indices."""

    def __init__(
        self,
        config: Config,
        setup: TrainingSetup,
        sizes: list[int],
        make_batch: Callable[[list[int]], Any],
        validation: Validation | None = None,
        summary: str = "",
        *,
        processes: Processes = ONE_PROCESS,
        log: Callable[[str], None] = print,
        progress: bool = True,
        data: Any = None,
    ):
        self.config, self.folder = config, config.experiment_dir
        self.data = data  # the task's prepared data, for a look from outside (Trainer.data); the loop never reads it
        self.model, self.loss = setup.model, setup.loss
        self.optimizer, self.scheduler = setup.optimizer, setup.scheduler
        self.device = next(self.model.parameters()).device
        self.sizes, self.make_batch, self.validation = sizes, make_batch, validation
        self.summary = summary  # logged right before the first step
        self.processes, self.log, self.progress = processes, log, progress
        self.state = TrainerState()
        # One process on a GPU: the loss and gradient norm are checked on the device (see divergence.py)
        self.divergence = DivergenceCheck(self.optimizer, on_device=self.device.type == "cuda" and not processes.active)

    def run(self, resume: bool = False) -> TrainerState:
        """Trains until a limit; Ctrl-C saves a checkpoint after the step under way and raises
        KeyboardInterrupt (see attnmt.core.interrupt)."""
        with deferred_interrupt() as self._interrupt:
            self._start(resume)
            self._steps()
            self._finish()
        return self.state

    def leave_processes(self):
        """Leaves the process group, if any: first unwraps the loss from DistributedDataParallel,
        then destroys the group. In that order, the group is freed by destroy_process_group, which
        lets go of Python's lock while gloo's threads free their last work (they need the lock to
        free tensors made in Python); freed with DistributedDataParallel's reducer, which keeps the
        lock, it could wait for them forever."""
        if isinstance(self.loss, DistributedDataParallel):
            self.loss = self.loss.module
        distributed.stop(self.processes)

    def _start(self, resume: bool):
        if resume:
            self.resume()
        elif (self.folder / "last.safetensors").exists():
            raise AttnmtError(
                f"{self.folder} already holds a trained model; "
                "use --resume to continue it, or choose another experiment_dir"
            )
        elif self.processes.main:  # a run that died before its first checkpoint may have left records
            trim_metrics(self.folder / "metrics.jsonl", 0)
        if self.config.training.memory_check:
            self.check_memory()
        self.log(self.summary)

    def _steps(self):
        tc, state = self.config.training, self.state
        bar = ProgressBar(self._total_steps(), state.step, self.progress, tc.max_minutes)
        window = MetricsWindow()
        seconds_before, loop_start = state.seconds, time.perf_counter()
        for indices in batches_to_train(state, self.epoch_batches, self._should_stop, self.processes.world):
            loss, tokens = self.train_step(self.make_batch(distributed.shard(indices, self.processes)))
            state.step += 1
            state.sentences += len(indices)
            state.target_tokens += tokens
            window.add(loss, tokens)
            bar.update()
            if state.step % tc.log_every == 0:
                self.divergence.raise_if_diverged(state.step)
                record = window.record(self.optimizer.param_groups[0]["lr"])
                bar.show(record, state.seconds)
                self.write_metrics("train", record)
                window.restart()
            if self._periodic(bar):  # validation time is not training speed
                window.restart()
            state.seconds = seconds_before + time.perf_counter() - loop_start
            if self._interrupted():
                bar.close()
                self._save_and_stop()
        bar.close()

    def _finish(self):
        if self.state.step % self.config.training.validate_every:  # end of training: one last validation
            self.validate()
        self.save_checkpoint(keep=True)
        if self.processes.main and not (self.folder / "best.safetensors").exists():
            save_model(self.model, self.folder / "best.safetensors", {"step": self.state.step})
        distributed.barrier(self.processes)  # nobody leaves before the files are written

    def train_step(self, batch) -> tuple[torch.Tensor | float, int]:
        """One update; returns the summed loss (with one process a tensor, read only when a record
        is written: reading it would wait for a GPU) and the number of terms it sums (target tokens)."""
        tc = self.config.training
        self.model.train()
        loss, tokens = self.forward(batch.to(self.device))
        if self.processes.active:  # sums over the processes' shares: the loss and size of the whole batch
            loss_sum, tokens = distributed.total([loss.item(), tokens], self.processes)
        else:  # (a copy: a CUDA graph's output is overwritten by its next replay)
            loss_sum = loss.detach().clone()
        self.optimizer.zero_grad(set_to_none=True)
        # Mean over the batch's tokens, so the step size does not depend on batch shape; with
        # several processes DistributedDataParallel averages their gradients: undo its division.
        (loss / tokens * self.processes.world).backward()
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), tc.clip_grad_norm) if tc.clip_grad_norm else None
        with self.divergence.guarded(self.state.step + 1, loss_sum, norm):
            self.optimizer.step()
        if tc.schedule == "noam":
            self.scheduler.step()
        return loss_sum, int(tokens)

    def forward(self, batch) -> tuple[torch.Tensor, int]:
        """The batch's summed loss and its number of terms, under bf16 autocast if training.precision says so."""
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.config.training.precision == "bf16"):
            return self.loss(batch)

    def check_memory(self):
        """One forward and backward pass over the largest batch the corpus can make (its longest
        examples, batching.longest_batch) before the first step. The run reaches the peak memory of
        its training steps at once: a corpus whose longest batch does not fit fails now rather than
        hours in, and the peak does not depend on which batches happen to come first (measured: the
        first 50 batches of a 3-million-pair corpus held one of 64 x 80 pieces, those of its
        30,000-pair sample none over 48, the longest of either epoch 95). The gradients are dropped
        and the random state is put back: training goes on exactly as without the check."""
        d = self.config.data
        indices = batching.longest_batch(self.sizes, d.batch_size, d.batch_tokens)
        if len(indices) < self.processes.world:
            return
        batch = self.make_batch(distributed.shard(indices, self.processes)).to(self.device)
        cuda = self.device.type == "cuda"
        # No gradient exchange between processes (DistributedDataParallel.no_sync): nothing is learnt.
        no_sync = self.loss.no_sync() if isinstance(self.loss, DistributedDataParallel) else contextlib.nullcontext()
        self.model.train()
        try:
            with torch.random.fork_rng(devices=[self.device] if cuda else []), no_sync:
                loss, tokens = self.forward(batch)
                (loss / tokens).backward()
        except RuntimeError as error:  # (torch.OutOfMemoryError is one)
            if not isinstance(error, torch.OutOfMemoryError) and CPU_OUT_OF_MEMORY not in str(error):
                raise
            longest = int(np.asarray(self.sizes)[indices].max())
            raise AttnmtError(
                f"the longest batch of the corpus ({len(indices)} examples of up to {longest} pieces) does not fit in "
                f"the memory of {self.device}: lower data.batch_size, "
                f"data.batch_tokens or data.max_length (or training.memory_check: false to start anyway)"
            ) from error
        finally:
            self.optimizer.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize(self.device)

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        d = self.config.data
        return batching.epoch_batches(
            self.sizes, d.batch_size, d.batch_tokens, d.bucket_batches, self.config.training.seed, epoch
        )

    # ----------------------------------------------------------------- limits and interrupts

    def _total_steps(self) -> int | None:
        tc = self.config.training
        if tc.max_steps:
            return tc.max_steps
        if tc.max_epochs:
            return tc.max_epochs * len(self.epoch_batches(0))
        return None

    def _should_stop(self) -> bool:
        tc, s = self.config.training, self.state
        stop = (
            s.stopped_early
            or (tc.max_steps is not None and s.step >= tc.max_steps)
            or (tc.max_epochs is not None and s.epoch >= tc.max_epochs)
            or (tc.max_minutes is not None and s.seconds >= 60 * tc.max_minutes)
        )
        # The clocks of the processes differ: the main process decides for all.
        return bool(distributed.from_main([float(stop)], self.processes)[0])

    def _interrupted(self) -> bool:
        """Ctrl-C reached any of the processes."""
        return distributed.total([float(self._interrupt.requested)], self.processes)[0] > 0

    def _save_and_stop(self):
        self.save_checkpoint()
        self.log(
            f"interrupted at step {self.state.step}: checkpoint saved to {self.folder / 'last.safetensors'}; "
            "continue with 'attnmt train CONFIG --resume'"
        )
        raise KeyboardInterrupt

    # ----------------------------------------------------------------- checkpoints

    def resume(self):
        path = self.folder / "last.safetensors"
        info = load_training_state(path, self.model, self.optimizer)
        try:
            self.state = TrainerState(**info["trainer"])
            self.scheduler.load_state_dict(info["scheduler"])
        except (KeyError, TypeError) as e:
            raise AttnmtError(f"{path}: not a training checkpoint of attnmt (trainer state: {e!r})") from None
        if isinstance(info.get("threads"), int) and info["threads"] > 0:
            threads.resume_with(info["threads"], self.log)
        # Records past the checkpoint come from the run that died; they will be logged again.
        if self.processes.main:
            trim_metrics(self.folder / "metrics.jsonl", self.state.step)
            for step, kept in kept_checkpoints(self.folder).items():  # (kept by the run that died)
                if step > self.state.step:
                    kept.unlink()
        else:  # the checkpoint holds the main process's random state; the others take their own
            torch.manual_seed(self.config.training.seed + self.processes.rank + self.state.step)
        self.log(f"resumed from {path} at step {self.state.step}")

    def save_checkpoint(self, keep: bool = False):
        """last.safetensors; ``keep`` (the checkpoints of the schedule and of the end, not Ctrl-C's):
        the weights kept for averaging too, written first, so that a run that dies in between
        resumes from the checkpoint before and writes them again."""
        if not self.processes.main:
            return
        self.divergence.raise_if_diverged(self.state.step)
        if keep and self.config.training.keep_checkpoints:
            self._keep_checkpoint(self.config.training.keep_checkpoints)
        info = {
            "trainer": asdict(self.state),
            "scheduler": self.scheduler.state_dict(),
            "threads": torch.get_num_threads(),
        }
        save_training_state(self.folder / "last.safetensors", self.model, self.optimizer, info)

    def _keep_checkpoint(self, keep: int):
        """The weights of this step into EXPERIMENT/checkpoints/, the oldest beyond ``keep``
        removed (training.keep_checkpoints, for `attnmt average`)."""
        save_model(self.model, kept_checkpoint_path(self.folder, self.state.step), {"step": self.state.step})
        for path in list(kept_checkpoints(self.folder).values())[:-keep]:
            path.unlink()

    def _periodic(self, bar: ProgressBar) -> bool:
        """Validation and checkpoints when their step comes; True if anything ran."""
        tc, step = self.config.training, self.state.step
        validate = step % tc.validate_every == 0
        checkpoint = step % tc.checkpoint_every == 0 if tc.checkpoint_every else validate
        if validate:
            bar.clear()
            self.validate()
        if checkpoint:
            self.save_checkpoint(keep=True)
        return validate or checkpoint

    # ----------------------------------------------------------------- validation

    def validate(self) -> dict | None:
        """The validation's scores (main process); every process then takes the same decisions
        from the main process's metric: best score, early stopping, learning-rate decay."""
        if self.validation is None:
            return None
        record = self.validation(self.model) if self.processes.main else {}
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
        self.write_metrics("valid", record)
        self.log(f"step {self.state.step}: {self.validation.describe(record)}{' (best)' if improved else ''}")
        return record

    def _is_improvement(self, metric: float) -> bool:
        best = self.state.best_score
        if best is None:
            return True
        return metric > best if higher_is_better(self.config.training) else metric < best

    def write_metrics(self, kind: str, record: dict):
        if not self.processes.main:
            return
        line = {
            "type": kind,
            "step": self.state.step,
            "epoch": self.state.epoch,
            "seconds": round(self.state.seconds, 2),
            **record,
        }
        append_text(self.folder / "metrics.jsonl", json.dumps(line) + "\n")
