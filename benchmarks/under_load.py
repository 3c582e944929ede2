"""attnmt beside other work: a training run's wall-clock and CPU time with N busy processes beside it.

    python benchmarks/under_load.py                       # busy 0 and 4, every thread setting
    python benchmarks/under_load.py --busy 0 2 4 --steps 40
    flock LOCKFILE python benchmarks/under_load.py         # alone on the machine (it makes its own load)

Trains the dates quick start's model (character level, batch 64) for --steps steps in a child process,
once per thread setting, each beside 0, then N busy processes (pure-Python loops, one core each,
stopped when the run ends). Settings: `1` thread; `2-openmp-default`, 2 threads waiting as GNU
OpenMP's threads do unless told (spinning 300,000 rounds); `2-passive` (OMP_WAIT_POLICY=PASSIVE:
waiting threads sleep at once); `2`, with attnmt's waiting (a short spin, attnmt.core.threads); `auto`,
attnmt's defaults (its waiting, and the cores that other work leaves free). Prints, per setting
and load, the run's wall-clock seconds and CPU seconds (the child's user + system time): a
process that gets its fair share of a busy machine takes more wall-clock time but the same CPU
time.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

PROBE = r"""
import sys, time
from pathlib import Path
from attnmt.translation import dates
from attnmt.translation.quickstart import quickstart_config
from attnmt.core.config import config_from_dict
from attnmt.training import train

folder, steps = Path(sys.argv[1]), int(sys.argv[2])
data = dates.write_corpus(folder / "data", n_train=4000, n_dev=100, n_test=10)
raw = quickstart_config(folder.resolve(), steps, "bahdanau")
raw["training"]["validate_every"] = 10 * steps  # training steps only: the validation at the end is not timed
config = config_from_dict(raw, Path("."))
import torch
state = train(config, log=lambda line: None, progress=False)
print("THREADS", torch.get_num_threads(), "SECONDS", state.seconds)
"""

SETTINGS = {
    "1": {"OMP_NUM_THREADS": "1"},
    "2-openmp-default": {"OMP_NUM_THREADS": "2", "GOMP_SPINCOUNT": "300000"},  # GNU OpenMP's own
    "2-passive": {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE"},
    "2": {"OMP_NUM_THREADS": "2"},  # attnmt's waiting: a short spin (attnmt.core.threads)
    "auto": {},
}  # attnmt's defaults: its waiting, and a fair share of the cores
BUSY = "import time\nend = time.time() + {seconds}\nwhile time.time() < end:\n    pass\n"


def run(setting: str, busy: int, steps: int, work: Path) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "MKL_NUM_THREADS")
    }
    env.update(SETTINGS[setting])
    loops = [subprocess.Popen([sys.executable, "-c", BUSY.format(seconds=900)]) for _ in range(busy)]
    try:
        time.sleep(1.0 if busy else 0.0)  # the loops running before the run starts
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", PROBE, str(work / f"{setting}-{busy}"), str(steps)],
            env=env,
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the probe's alone: the loops are not waited for yet
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    if done.returncode != 0:
        sys.exit(f"{setting}, {busy} busy: the probe failed\n{done.stderr[-2000:]}")
    words = done.stdout.split()
    figure = lambda name: words[words.index(name) + 1]  # noqa: E731
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"threads": int(figure("THREADS")), "training_seconds": float(figure("SECONDS")), "wall": wall, "cpu": cpu}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--busy", type=int, nargs="+", default=[0, 4])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--work", default="/tmp/attnmt-under-load")
    args = parser.parse_args(argv)
    work = Path(args.work)
    subprocess.run(["rm", "-rf", str(work)], check=True)
    usable = len(os.sched_getaffinity(0))
    print(f"{os.cpu_count()} CPUs, {usable} usable; {args.steps} training steps of the dates model")
    print("| setting | busy processes | threads | training seconds | whole run: wall s | CPU s |")
    print("|---|---|---|---|---|---|")
    for busy in args.busy:
        for setting in args.settings:
            r = run(setting, busy, args.steps, work)
            print(
                f"| {setting} | {busy} | {r['threads']} | {r['training_seconds']:.1f} | {r['wall']:.1f} "
                f"| {r['cpu']:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
