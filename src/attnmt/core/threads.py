"""How many CPU threads attnmt computes with, and how they wait: its fair share of a busy machine.

PyTorch's CPU build runs its parallel operations on GNU OpenMP, whose threads spin (busy-wait) for
up to 300,000 rounds between two operations before they sleep. On an idle machine that saves a
wake-up; on a busy one a spinning thread holds a core that the thread it waits for needs. On 2
cores beside 4 busy processes, 40 training steps of the quick start's model took 89-365 s with 2
threads, against 5.1 s with 1 and 1.5 s alone (benchmarks/under_load.py, docs/performance.md).

Two defaults, each giving way to the usual setting when there is one:

- Threads spin ``SPIN_ROUNDS`` rounds, then sleep (``GOMP_SPINCOUNT``; ``configure_waiting``, called
  by ``import attnmt`` before torch is imported: OpenMP reads it once, when torch loads it). Alone,
  as fast as the default (same table); beside 4 busy processes, 6.6 s instead of 89. Set
  ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` to choose otherwise.
- The number of threads (``choose``): the CPUs this process may use (``os.sched_getaffinity``) less
  those that other work keeps busy when attnmt starts (``/proc/stat`` over 0.2 s), at least one.
  ``OMP_NUM_THREADS``, ``training.threads`` or ``--threads`` choose instead. A resumed training
  run takes the count of the run it continues (``resume_with``), so that it repeats it bit for bit.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from typing import Callable

SPIN_ROUNDS = 1000
SAMPLE_SECONDS = 0.2

_chosen: int | None = None  # the number set by choose(), once
_automatic = False  # whether choose() took the fair share (no request, no OMP_NUM_THREADS)


def configure_waiting():
    """GNU OpenMP's threads spin SPIN_ROUNDS rounds before they sleep, unless the environment says
    how they wait. Must run before torch is first imported: where torch came first (a script that
    imports it before attnmt), OpenMP has already read its setting, and a warning says so."""
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        return  # the user's choice
    if "torch" in sys.modules:
        warnings.warn(TORCH_FIRST, RuntimeWarning, stacklevel=3)
    os.environ["GOMP_SPINCOUNT"] = str(SPIN_ROUNDS)


TORCH_FIRST = (
    "torch was imported before attnmt, so OpenMP's threads keep spinning up to OpenMP's default "
    "300,000 rounds between operations instead of sleeping after 1,000: beside other work, or on two "
    "hyperthreads of one core, decoding and training can be several times slower. Import attnmt "
    f"before torch, or set GOMP_SPINCOUNT={SPIN_ROUNDS} (or OMP_WAIT_POLICY) in the environment "
    "(docs/performance.md, 'Beside other work: threads')."
)


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, which containers and taskset narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _cpu_times() -> tuple[float, float] | None:
    """(busy, total) jiffies of all the machine's CPUs since boot, or None where /proc/stat is not."""
    try:
        with open("/proc/stat") as f:
            fields = [float(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle and iowait
    return sum(fields[:8]) - idle, sum(fields[:8])


def busy_cpus(seconds: float = SAMPLE_SECONDS) -> float:
    """How many CPUs of the machine other work keeps busy, measured over ``seconds`` (during which
    this process sleeps); 0 where it cannot be measured."""
    before = _cpu_times()
    time.sleep(seconds)
    after = _cpu_times()
    if before is None or after is None or after[1] <= before[1]:
        return 0.0
    return (after[0] - before[0]) / (after[1] - before[1]) * (os.cpu_count() or 1)


def fair_share(usable: int, busy: float, cpus: int) -> int:
    """The threads to use: the usable CPUs that other work leaves free, at least 1."""
    return max(1, min(usable, round(cpus - busy)))


def choose(requested: int | None = None, log: Callable[[str], None] | None = None) -> int:
    """Sets torch's thread count: ``requested`` if given, else the environment's OMP_NUM_THREADS if
    set, else a fair share of the machine (measured once a process; the number is kept for later
    calls without a request). Returns the number in use."""
    global _chosen, _automatic
    import torch

    if requested is not None:
        torch.set_num_threads(requested)
        _chosen, _automatic = requested, False
    elif _chosen is None:
        if "OMP_NUM_THREADS" in os.environ:
            _chosen = torch.get_num_threads()
        else:
            usable, busy = usable_cpus(), busy_cpus()
            _chosen, _automatic = fair_share(usable, busy, os.cpu_count() or usable), True
            torch.set_num_threads(_chosen)
            if _chosen < usable and log is not None:
                log(
                    f"{_chosen} CPU thread{'s' if _chosen > 1 else ''}: {busy:.1f} of the machine's CPUs are busy with "
                    f"other work ({usable} usable; --threads or training.threads to choose)"
                )
    return _chosen


def resume_with(threads: int | None, log: Callable[[str], None] | None = None):
    """A resumed training run computes with the thread count of the run it continues (stored in its
    checkpoint): products split over another number of threads can round differently, and a
    resumed run must repeat the uninterrupted one bit for bit. Only where the count was chosen as a
    fair share: a number the user chose stays."""
    global _chosen
    import torch

    if threads is None or not _automatic or threads == _chosen:
        return
    if log is not None:
        log(
            f"{threads} CPU threads, as the run being resumed (instead of {_chosen}: --threads or training.threads "
            "to choose)"
        )
    torch.set_num_threads(threads)
    _chosen = threads
