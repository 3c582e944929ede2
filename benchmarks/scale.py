"""How cost grows with the corpus (issue 50): attnmt against OpenNMT-py 3.5.1 on generated corpora of
0.03, 0.3, 3 and 30 million sentence pairs, one system after the other.

    python benchmarks/scale.py --sizes 0.03,0.3 --systems attnmt     # minutes
    flock LOCKFILE python benchmarks/scale.py                          # every size, both systems: hours

Steps, in a work folder WORK (default runs/scale-bench/):
 1. corpora: WORK/corpora/pairs-N.{de,en}, each line two random Multi30k training pairs joined by a
    space (about 27 words a side, 270 bytes a pair: 8 GB at 30 million), `random.Random(N)`;
    written once (a stamp file says it is complete), deleted at the end unless --keep-corpora.
    Each size's attnmt experiment folder (its store) is deleted after the size unless --keep-stores:
    then a start-up can be measured again with `attnmt train WORK/configs/attnmt-N.yaml`.
 2. attnmt, for each size: `attnmt prepare` (configs/rnn-bahdanau.yaml's model and subwords, the
    generated corpus, no dev set; --workers): its wall clock and lines/s; then `attnmt train` for
    --steps steps (2 threads), and the same under `torchrun --nproc-per-node 2` (1 thread each).
    The store of the first run is used by the second.
 3. OpenNMT-py 3.5.1, for each size: the peers' configuration (../shared/peers/opennmt-rnn_de_en.yaml,
    its joint BPE of 8,000 pieces learnt from Multi30k by benchmarks/peers.py's anchors) streaming the
    same files with its on-the-fly sentencepiece transform, --steps steps, 2 threads. (Several
    processes of OpenNMT-py need GPUs: none on the CPU.) Its virtual environment is benchmarks/peers.py's
    (WORK/venv-opennmt, installed unless --skip-install).
Every command runs alone, its process tree sampled twice a second from /proc: peak resident memory
(the sum over the tree, or one process's high-water mark if larger) and, beside it, the peak of
the anonymous part (RssAnon: the pages of a memory-mapped store count as resident while the system
may drop them at any time); the time from the command's start to its first training step (attnmt's
line before its first step, OpenNMT-py's "Start training loop"); the target tokens/s of the training
(attnmt: its metrics.jsonl records after the first; OpenNMT-py: its report lines). WORK/scale.json
holds every figure with date, machine, versions and command; a Markdown table is printed, for
docs/performance.md ("How cost grows with the corpus").

What it takes (2 cores, 2026-12-02 figures of docs/data.md): about 30 s of attnmt preparation a
million pairs (15 min at 30 million) and 142 MB of store a million (4.3 GB), the corpora 8.3 GB in
all; the training runs are --steps long whatever the size.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import yaml

import peers
from peers import MULTI30K, PEER_CONFIGS, REPO, process_tree

SIZES = (0.03, 0.3, 3.0, 30.0)  # millions of pairs
BYTES_A_PAIR = 270 + 142 + 100  # text, attnmt's store, slack (OpenNMT-py keeps nothing on disk)
ATTNMT_FIRST_STEP = re.compile(r"parameters; [\d,]+ training pairs")  # logged right before the first step
ONMT_FIRST_STEP = re.compile(r"Start training loop")


# ---------------------------------------------------------------------------------------------- measuring


def memory_of(pid: int) -> tuple[int, int, int]:
    """(VmRSS, VmHWM, RssAnon) of a process in KiB; zeros once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0, 0, 0
    values = dict(re.findall(r"^(VmRSS|VmHWM|RssAnon):\s+(\d+) kB", status, re.M))
    return int(values.get("VmRSS", 0)), int(values.get("VmHWM", 0)), int(values.get("RssAnon", 0))


def measured(cmd: list, log: Path, env: dict, first_step: re.Pattern | None = None, timeout: float = 6 * 3600) -> dict:
    """Runs ``cmd`` to its end (its output into ``log``), sampling its process tree's memory twice a
    second: wall clock, seconds to the first line matching ``first_step``, peak RSS and RssAnon (MB)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        out.write(f"$ {' '.join(map(str, cmd))}\n")
        out.flush()
        start = time.monotonic()
        process = subprocess.Popen(
            [str(c) for c in cmd], stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    rss = anon = 0
    first = None
    while process.poll() is None and time.monotonic() - start < timeout:
        sizes = [memory_of(pid) for pid in process_tree(process.pid)]
        rss = max([rss, sum(s[0] for s in sizes), *(s[1] for s in sizes)])
        anon = max(anon, sum(s[2] for s in sizes))
        if first is None and first_step is not None and first_step.search(log.read_text(errors="replace")):
            first = time.monotonic() - start
        time.sleep(0.5)
    if process.poll() is None:
        peers.stop(process, signal.SIGTERM)
        raise peers.failure(cmd, log, f"still running after {timeout:.0f} s")
    if process.returncode != 0:
        raise peers.failure(cmd, log, f"ended with status {process.returncode}")
    if first is None and first_step is not None and first_step.search(log.read_text(errors="replace")):
        first = time.monotonic() - start  # (a run shorter than one sample)
    return {
        "wall_s": round(time.monotonic() - start, 2),
        "first_step_s": None if first is None else round(first, 2),
        "peak_rss_mb": round(rss / 1024),
        "peak_anon_mb": round(anon / 1024),
    }


# ---------------------------------------------------------------------------------------------- 1. corpora


def corpus(work: Path, pairs: int) -> tuple[Path, Path]:
    """WORK/corpora/pairs-N.de and .en, written line by line (once)."""
    folder = work / "corpora"
    de, en, done = (folder / f"pairs-{pairs}.{lang}" for lang in ("de", "en", "done"))
    if done.is_file():
        return de, en
    folder.mkdir(parents=True, exist_ok=True)
    sides = [
        gzip.decompress((MULTI30K / f"train.{lang}.gz").read_bytes()).decode().splitlines() for lang in ("de", "en")
    ]
    rng = random.Random(pairs)
    with open(de, "w", encoding="utf-8") as out_de, open(en, "w", encoding="utf-8") as out_en:
        for _ in range(pairs):
            i, j = rng.randrange(len(sides[0])), rng.randrange(len(sides[0]))
            out_de.write(f"{sides[0][i]} {sides[0][j]}\n")
            out_en.write(f"{sides[1][i]} {sides[1][j]}\n")
    done.write_text("complete\n")
    return de, en


# ---------------------------------------------------------------------------------------------- 2. attnmt


def attnmt_config(work: Path, pairs: int, files: tuple[Path, Path], steps: int) -> Path:
    """The reference configuration on the generated corpus: no dev or test set, --steps steps."""
    config = yaml.safe_load((REPO / "configs" / "rnn-bahdanau.yaml").read_text())
    config["experiment_dir"] = str(work / f"attnmt-{pairs}")
    config["data"]["train"] = {"src": str(files[0]), "tgt": str(files[1])}
    config["data"].pop("dev", None)
    config["data"].pop("test", None)
    config["training"].update({"max_steps": steps, "max_minutes": None, "log_every": 10, "validate_every": 10 * steps})
    path = work / "configs" / f"attnmt-{pairs}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def attnmt_tokens_per_s(folder: Path) -> float | None:
    """The mean target tokens/s of metrics.jsonl's training records after the first (start-up)."""
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    speeds = [r["tokens_per_s"] for r in records if r["type"] == "train"][1:]
    return round(sum(speeds) / len(speeds)) if speeds else None


def run_attnmt(work: Path, pairs: int, files, steps: int, workers: int, processes: list[int]) -> dict:
    config = attnmt_config(work, pairs, files, steps)
    folder = work / f"attnmt-{pairs}"
    shutil.rmtree(folder, ignore_errors=True)
    python = [sys.executable, "-m", "attnmt.cli"]
    env = peers.thread_env()
    logs = work / "logs"
    prepared = measured([*python, "prepare", config, "--workers", workers], logs / f"attnmt-{pairs}-prepare.log", env)
    figures = {"prepare": {**prepared, "lines_per_s": round(pairs / prepared["wall_s"])}}
    for count in processes:
        for name in ("last.safetensors", "best.safetensors", "metrics.jsonl"):  # (the store and subwords kept)
            (folder / name).unlink(missing_ok=True)
        if count == 1:
            cmd = [*python, "train", config, "--no-progress", "--threads", 2]
        else:
            # torchrun of this interpreter's torch (a `torchrun` on PATH may be another Python's)
            torchrun = [sys.executable, "-m", "torch.distributed.run"]
            cmd = [*torchrun, "--standalone", "--nproc-per-node", count, "-m", "attnmt.cli", "train", config]
            cmd += ["--no-progress", "--threads", 1]
        run = measured(cmd, logs / f"attnmt-{pairs}-train-{count}.log", env, ATTNMT_FIRST_STEP)
        figures[f"train_{count}"] = {**run, "tokens_per_s": attnmt_tokens_per_s(folder)}
    return figures


# ---------------------------------------------------------------------------------------------- 3. OpenNMT-py


def opennmt_config(work: Path, pairs: int, files: tuple[Path, Path], steps: int) -> Path:
    config = yaml.safe_load(peers.render((PEER_CONFIGS / "opennmt-rnn_de_en.yaml").read_text(), work))
    config["data"] = {
        "corpus_1": {"path_src": str(files[0]), "path_tgt": str(files[1]), "transforms": ["sentencepiece"]}
    }
    config.update(
        {
            "train_steps": steps,
            "report_every": 10,
            "valid_steps": 10 * steps,  # (no validation set: none)
            "save_checkpoint_steps": 10 * steps,
            "save_model": str(work / "onmt" / f"model-{pairs}" / "rnn"),
            "log_file": str(work / "logs" / f"opennmt-{pairs}-train.onmt.log"),
        }
    )
    path = work / "configs" / f"opennmt-{pairs}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def run_opennmt(work: Path, pairs: int, files, steps: int) -> dict:
    config = opennmt_config(work, pairs, files, steps)
    log = work / "logs" / f"opennmt-{pairs}-train.log"
    run = measured([*peers.onmt_command(work, "train"), "-config", config], log, peers.onmt_env(), ONMT_FIRST_STEP)
    parsed = peers.parse_onmt_log(log.read_text(errors="replace"))
    return {
        "train_1": {**run, "tokens_per_s": None if parsed["tokens_per_s"] is None else round(parsed["tokens_per_s"])}
    }


# ---------------------------------------------------------------------------------------------- the table


ROWS = (
    ("preparation, s", "prepare", "wall_s"),
    ("preparation, lines/s", "prepare", "lines_per_s"),
    ("preparation, peak RSS / RssAnon, MB", "prepare", ("peak_rss_mb", "peak_anon_mb")),
    ("to the first step, s", "train_1", "first_step_s"),
    ("training, peak RSS / RssAnon, MB", "train_1", ("peak_rss_mb", "peak_anon_mb")),
    ("training, target tokens/s", "train_1", "tokens_per_s"),
    ("2 processes: to the first step, s", "train_2", "first_step_s"),
    ("2 processes: peak RSS / RssAnon, MB", "train_2", ("peak_rss_mb", "peak_anon_mb")),
    ("2 processes: target tokens/s", "train_2", "tokens_per_s"),
)


def table(results: dict) -> str:
    columns = [(system, size) for system in results for size in results[system]]
    lines = ["| | " + " | ".join(f"{system} {int(size):,} pairs" for system, size in columns) + " |"]
    lines.append("|---" * (1 + len(columns)) + "|")
    for label, phase, keys in ROWS:
        cells = []
        for system, size in columns:
            figures = results[system][size].get(phase, {})
            values = [figures.get(key) for key in (keys if isinstance(keys, tuple) else (keys,))]
            cells.append("—" if all(v is None for v in values) else " / ".join(f"{v:,}" for v in values))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- main


def check_requirements(args, work: Path, sizes: list[int]):
    from requirements import Missing, check, multi30k, path

    needs = [multi30k(MULTI30K, ["train.de.gz", "train.en.gz"])]
    if "opennmt" in args.systems:
        needs.append(path(PEER_CONFIGS / "opennmt-rnn_de_en.yaml", "OpenNMT-py's configuration", None))
    existing = next(folder for folder in (work, *work.parents) if folder.exists())  # (nothing made before the check)
    # (a size's files are deleted before the next unless kept)
    largest = sum(sizes) if args.keep_corpora or args.keep_stores else max(sizes)
    wanted, free = largest * BYTES_A_PAIR, shutil.disk_usage(existing).free
    if wanted > free:
        needs.append(
            Missing(
                f"{wanted / 1e9:.1f} GB of free disk in {work} (found {free / 1e9:.1f} GB)",
                "the corpora and attnmt's stores",
                advice="choose smaller --sizes or another --work",
            )
        )
    check("benchmarks/scale.py", *needs)


def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="millions of pairs, comma-separated")
    parser.add_argument("--systems", default="attnmt,opennmt", help="attnmt and/or opennmt, comma-separated")
    parser.add_argument("--processes", default="1,2", help="attnmt's training runs: 1 and/or 2 processes")
    parser.add_argument("--steps", type=int, default=50, help="training steps of each run")
    parser.add_argument("--workers", type=int, default=2, help="attnmt prepare --workers")
    parser.add_argument("--work", type=Path, default=REPO / "runs" / "scale-bench")
    parser.add_argument("--skip-install", action="store_true", help="OpenNMT-py's environment is there already")
    parser.add_argument("--keep-corpora", action="store_true")
    parser.add_argument(
        "--keep-stores", action="store_true", help="keep attnmt's experiment folders (its prepared stores) at the end"
    )
    args = parser.parse_args(argv)
    args.systems = [s for s in args.systems.split(",") if s]
    args.processes = [int(p) for p in args.processes.split(",")]
    if set(args.systems) - {"attnmt", "opennmt"} or set(args.processes) - {1, 2}:
        parser.error("--systems: attnmt, opennmt; --processes: 1, 2")
    sizes = [round(float(size) * 1_000_000) for size in args.sizes.split(",")]
    work = args.work.resolve()
    check_requirements(args, work, sizes)

    if "opennmt" in args.systems:
        if not args.skip_install:
            peers.install_peers(work, ["opennmt"])
        peers.prepare_anchors(work)  # its sentencepiece model and vocabulary, from Multi30k
    results = {system: {} for system in args.systems}
    for pairs in sizes:
        files = corpus(work, pairs)
        if "attnmt" in args.systems:
            results["attnmt"][pairs] = run_attnmt(work, pairs, files, args.steps, args.workers, args.processes)
        if "opennmt" in args.systems:
            results["opennmt"][pairs] = run_opennmt(work, pairs, files, args.steps)
        if not args.keep_corpora:
            for path in files:
                path.unlink()
            (work / "corpora" / f"pairs-{pairs}.done").unlink()
        if not args.keep_stores:
            shutil.rmtree(work / f"attnmt-{pairs}", ignore_errors=True)  # its store: 142 MB a million pairs
        print(f"{pairs:,} pairs: {json.dumps({s: results[s][pairs] for s in results})}", flush=True)

    record = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
        "machine": peers.machine(),
        "commit": subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
        "steps": args.steps,
        "results": results,
    }
    (work / "scale.json").write_text(json.dumps(record, indent=1) + "\n")
    print(table(results))
    print(f"\n{work / 'scale.json'}; machine: {record['machine']['cpu']}, {record['machine']['nproc']} cores")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
