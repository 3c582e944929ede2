"""The CPU speed of two commits of attnmt, alternated in one sitting: did a change slow the CPU?

    python benchmarks/before_after.py BEFORE AFTER [--rounds 2] [--steps 100]
    flock LOCKFILE python benchmarks/before_after.py b6f9afc HEAD   # alone on the machine

Checks both commits out in git worktrees (WORK/before, WORK/after), then per round, one side after
the other, in a child process running that side's code: trains configs/rnn-bahdanau.yaml (fp32,
2 threads, no dev set) for --steps steps and reads its training target tokens/s over the steps
after the first 20 (metrics.jsonl), then translates the first 256 sentences of test_2016_flickr with
greedy search, beam 5, and beam 5 with a constraint on every sentence ("a man": the banks of
docs/decoding.md), best of 2 each. Prints each round's figures side by side.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MULTI30K = REPO.parent / "shared" / "data" / "multi30k"

PROBE = r"""
import json, sys, time
from pathlib import Path
import torch
import attnmt
try:
    from attnmt.core.config import load_config
except ImportError:  # a commit from before the per-task packages (issue 24)
    from attnmt.config import load_config
from attnmt.data.corpus import read_lines
from attnmt.training import train

side, repo, data, work, steps = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]), int(sys.argv[5])
assert Path(attnmt.__file__).resolve().is_relative_to(repo.resolve()), attnmt.__file__
torch.set_num_threads(2)
config = load_config(repo / "configs" / "rnn-bahdanau.yaml")
config.data.train.src, config.data.train.tgt = data / "train.de.gz", data / "train.en.gz"
config.data.dev = None
config.experiment_dir = work
config.training.max_steps, config.training.max_minutes, config.training.log_every = steps, None, 20
config.training.precision, config.training.threads = "fp32", 2
train(config, log=lambda line: None, progress=False)
records = [json.loads(line) for line in (work / "metrics.jsonl").read_text().splitlines()]
speeds = [r["tokens_per_s"] for r in records if r["type"] == "train" and r["step"] > 20]
sources = read_lines(data / "test_2016_flickr.de.gz")[:256]
translator = attnmt.load(work)
result = {"train_tokens_per_s": sum(speeds) / len(speeds)}
for beam in (1, 5):
    best = 0.0
    for _ in range(2):
        started = time.perf_counter()
        translator.translate(sources, beam=beam, batch_size=64)
        best = max(best, len(sources) / (time.perf_counter() - started))
    result[f"decode_beam{beam}"] = best
best = 0.0
for _ in range(2):
    started = time.perf_counter()
    translator.translate(sources, beam=5, batch_size=64, constraints=[["a man"]] * len(sources))
    best = max(best, len(sources) / (time.perf_counter() - started))
result["decode_constrained"] = best
print(json.dumps(result))
"""


def worktree(commit: str, path: Path) -> Path:
    if path.exists():
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(path)], check=True)
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(path), commit], check=True, capture_output=True
    )
    return path


def probe(side: str, tree: Path, args, round_: int) -> dict:
    work = Path(args.work) / f"{side}-{round_}"
    subprocess.run(["rm", "-rf", str(work)], check=True)
    env = {"PYTHONPATH": str(tree / "src"), "OMP_NUM_THREADS": "2", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, side, str(tree), str(args.data), str(work), str(args.steps)],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, **env},
    )
    if done.returncode != 0:
        sys.exit(f"{side}: the probe failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--data", default=str(MULTI30K))
    parser.add_argument("--work", default="/tmp/attnmt-before-after")
    args = parser.parse_args(argv)
    from requirements import check, multi30k, program

    check(
        "benchmarks/before_after.py",
        program("git", "checks the two commits out in worktrees", apt="git"),
        multi30k(args.data, ["train.de.gz", "train.en.gz", "test_2016_flickr.de.gz"]),
    )
    trees = {
        side: worktree(commit, Path(args.work) / side)
        for side, commit in (("before", args.before), ("after", args.after))
    }
    rows = []
    for round_ in range(args.rounds):
        for side in ("before", "after"):
            rows.append((side, round_ + 1, probe(side, trees[side], args, round_)))
            print(side, round_ + 1, rows[-1][2], flush=True)
    print("\n| side | round | training target tokens/s | greedy sentences/s | beam 5 sentences/s | constrained |")
    print("|---|---|---|---|---|---|")
    for side, round_, r in rows:
        figures = f"{r['train_tokens_per_s']:,.0f} | {r['decode_beam1']:.0f} | {r['decode_beam5']:.1f}"
        figures += f" | {r['decode_constrained']:.1f}"
        print(f"| {side} | {round_} | {figures} |")


if __name__ == "__main__":
    main()
