"""Training on several processes with torch.distributed, started by torchrun.

    torchrun --nproc-per-node 2 -m attnmt.cli train CONFIG.yaml

torchrun starts the processes and gives each its RANK and the WORLD_SIZE in the environment.
Every process builds the same batches and trains on its own share of each of them
(``shard``); DistributedDataParallel adds up the gradients, so each update is the update
of the whole batch. Process 0 alone validates and writes checkpoints and logs; the
decisions that follow from them (stop, best score, learning rate) are sent to the others.

Without torchrun (no WORLD_SIZE) there is one process, and every function here does nothing.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.distributed as dist

from attnmt.core.errors import AttnmtError


@dataclass(frozen=True)
class Processes:
    rank: int = 0
    world: int = 1
    device: torch.device = torch.device("cpu")  # where the numbers they exchange live: NCCL takes GPU tensors only

    @property
    def main(self) -> bool:
        """The process that validates and writes files."""
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world > 1


ONE_PROCESS = Processes()  # without torchrun


def start(device: torch.device) -> Processes:
    """Joins the process group that torchrun describes in the environment; gloo on CPUs,
    NCCL on GPUs."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Processes()
    if not dist.is_initialized():
        # Imported after the group exists (DistributedDataParallel imports it), torch._dynamo keeps
        # references to it, so that destroy_process_group cannot free it: gloo's threads then outlive
        # Python's exit, and now and then abort the process (SIGABRT) as they free their last work.
        import torch._dynamo  # noqa: F401

        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return Processes(dist.get_rank(), dist.get_world_size(), device)


def device(name: str) -> torch.device:
    """The device of this process: the CPU, or with "cuda" the GPU of its LOCAL_RANK."""
    if name == "cuda" and not torch.cuda.is_available():
        raise AttnmtError(
            "training.device cuda (--device cuda): CUDA is not available here (no GPU, or a CPU-only "
            "build of torch); use cpu"
        )
    if name == "cuda":
        index = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device(name)


@contextmanager
def main_first(processes: Processes):
    """The main process runs the block first (e.g. writes files), then the others."""
    if not processes.main:
        barrier(processes)
    yield
    if processes.main:
        barrier(processes)


def stop(processes: Processes):
    """Leaves the process group; DistributedDataParallel wrappers must be freed first (see
    TrainingLoop.leave_processes)."""
    if processes.active and dist.is_initialized():
        dist.destroy_process_group()


def shard(indices: list[int], processes: Processes) -> list[int]:
    """This process's share of a batch: every world-th sentence, starting at its rank."""
    return indices[processes.rank :: processes.world]


def barrier(processes: Processes):
    if processes.active:
        dist.barrier()


def from_main(values: list[float], processes: Processes) -> list[float]:
    """The main process's ``values``, everywhere (numbers only: no pickled objects travel)."""
    if not processes.active:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=processes.device)
    dist.broadcast(t, src=0)
    return t.tolist()


def total(values: list[float], processes: Processes) -> list[float]:
    """Sums of ``values`` over all processes."""
    if not processes.active:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=processes.device)
    dist.all_reduce(t)
    return t.tolist()
