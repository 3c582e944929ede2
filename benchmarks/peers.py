"""Side by side: attnmt against OpenNMT-py 3.5.1 and JoeyNMT 2.3.0, Multi30k German -> English.

    python benchmarks/peers.py                            # 20 minutes of training per system (over an hour)
    python benchmarks/peers.py --minutes 3                # short-budget check (about 15 minutes)
    python benchmarks/peers.py --only opennmt,joeynmt --skip-install
    python benchmarks/peers.py --only joeynmt --joey-config uniform-init
    flock LOCKFILE python benchmarks/peers.py             # on a shared machine: one benchmark at a time

Steps, each a function below, in a work folder WORK (default runs/peers/):
 1. install: one virtual environment per peer (WORK/venv-opennmt, WORK/venv-joeynmt), CPU torch 2.13.0
    first and pinned by a constraints file; kept and reused when its requirements have not changed.
 2. anchors: the unzipped Multi30k files (WORK/data), one joint sentencepiece BPE model of 8,000 pieces
    trained on train.de + train.en (WORK/spm/spm8k.model), its pieces for JoeyNMT
    (WORK/spm/joint_vocab.txt) and for OpenNMT-py ("piece<TAB>count", WORK/onmt/vocab.shared); then the
    configurations of ../shared/peers, read at run time, with `<anchors>` replaced by WORK (WORK/configs).
 3. training, one system after the other, 2 threads each: attnmt through benchmarks/run.py (which also
    decodes and scores), then `onmt_train`, then `joeynmt train`. A peer is stopped after --minutes of
    its training loop (counted from its first log line of the loop, as attnmt counts its budget):
    OpenNMT-py with SIGTERM, as `timeout` does (its last checkpoint is decoded), JoeyNMT with SIGINT,
    on which it saves its weights (best.ckpt is decoded, as its configuration says, or those weights
    if it never validated). The peak resident memory of its process tree is read from /proc meanwhile.
 4. decoding: test_2016_flickr with greedy search and beam 5, batch 64, with each peer's own translate
    command (wall clock, model loading included); sacreBLEU (13a, cased) BLEU and chrF of its
    detokenized output.
 5. one table (and WORK/results.json with date, command, machine and versions).

Budgets shorter than 20 minutes validate (and OpenNMT-py saves checkpoints) more often, at the same
interval for all three systems, so that each has a validation score and a checkpoint at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from datetime import datetime, timezone
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
MULTI30K = SHARED / "data" / "multi30k"
PEER_CONFIGS = SHARED / "peers"
SYSTEMS = ("attnmt", "opennmt", "joeynmt")
TITLES = {"attnmt": "attnmt", "opennmt": "OpenNMT-py 3.5.1", "joeynmt": "JoeyNMT 2.3.0"}
JOEY_CONFIGS = {"default": "joeynmt-rnn_de_en.yaml", "uniform-init": "joeynmt-rnn_de_en-uniform-init.yaml"}
SPLITS = ("train", "val", "test_2016_flickr")
BATCH = 64  # sentences a training batch, in all three configurations
THREADS = 2
TORCH = "torch==2.13.0"  # the CPU wheel; an open range would pull a CUDA build of several GB
# OpenNMT-py declares torch<2.3: installed with --no-deps, then what training and translating import
# (its transforms are all imported at start-up, hence spacy, fasttext, rapidfuzz and pyahocorasick).
OPENNMT_REQUIREMENTS = ["OpenNMT-py==3.5.1"]
OPENNMT_DEPENDENCIES = ["configargparse==1.9.0", "pyyaml==6.0.3", "sentencepiece==0.2.3", "sacrebleu==2.6.0",
                        "pyonmttok==1.38.1", "spacy==3.8.18", "fasttext-wheel==0.9.2", "rapidfuzz==3.14.6",
                        "pyahocorasick==2.3.1", "regex==2026.11.15"]
JOEYNMT_REQUIREMENTS = ["joeynmt==2.3.0", "importlib_metadata==8.7.1", "sentencepiece==0.2.0"]
# Wall-clock limits of the steps that are not timed (a hung command must not hold the lock forever).
INSTALL_TIMEOUT, DECODE_TIMEOUT, STARTUP_ALLOWANCE = 1800, 1800, 600


class StepFailed(RuntimeError):
    """A step of the benchmark failed; the message names the command and ends with its log's tail."""


# ---------------------------------------------------------------------------------------------- helpers

def tail(path: Path, lines: int = 25) -> str:
    """The last lines of a log file ('' if there is none)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def failure(cmd, log: Path, why: str) -> StepFailed:
    shown = " ".join(str(c) for c in cmd)
    return StepFailed(f"{why}: {shown}\n--- last lines of {log}:\n{tail(log)}")


def thread_env(**extra) -> dict:
    """The environment of every timed command: 2 threads, whatever the machine has."""
    return {**os.environ, "OMP_NUM_THREADS": str(THREADS), "MKL_NUM_THREADS": str(THREADS), **extra}


def run_logged(cmd, log: Path, env=None, stdin=None, timeout=None, stdout: Path | None = None) -> float:
    """Runs cmd with its output appended to log (its standard output to `stdout` if given); returns
    its wall-clock seconds, raises StepFailed."""
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with open(log, "a") as out, open(stdout or os.devnull, "w") as result:
        out.write(f"\n$ {' '.join(str(c) for c in cmd)}\n")
        out.flush()
        try:
            done = subprocess.run([str(c) for c in cmd], stdout=result if stdout else out, stderr=out, env=env,
                                  stdin=stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise failure(cmd, log, f"timed out after {timeout} s") from None
    if done.returncode != 0:
        raise failure(cmd, log, f"exit status {done.returncode}")
    return time.perf_counter() - started


# ---------------------------------------------------------------------------------------------- 1. install

def install_venv(venv: Path, requirements: list[str], no_deps: list[str], log: Path):
    """A virtual environment with CPU torch, then `no_deps` without their dependencies, then the rest.

    Reused as it is when its marker file lists the same requirements (idempotent)."""
    marker = venv / "peers-installed.json"
    wanted = {"torch": TORCH, "no_deps": no_deps, "requirements": requirements}
    if marker.exists() and json.loads(marker.read_text()) == wanted:
        print(f"  {venv.name}: already installed")
        return
    print(f"  {venv.name}: installing (log {log})")
    venv.parent.mkdir(parents=True, exist_ok=True)
    constraints = venv.parent / "constraints.txt"
    constraints.write_text(TORCH + "\n")
    pip = [venv / "bin" / "python", "-m", "pip", "install", "--quiet", "-c", constraints]
    run_logged([sys.executable, "-m", "venv", venv], log, timeout=INSTALL_TIMEOUT)
    run_logged([*pip, TORCH], log, timeout=INSTALL_TIMEOUT)
    if no_deps:
        run_logged([*pip, "--no-deps", *no_deps], log, timeout=INSTALL_TIMEOUT)
    run_logged([*pip, *requirements], log, timeout=INSTALL_TIMEOUT)
    marker.write_text(json.dumps(wanted, indent=1))


def install_peers(work: Path, systems: list[str]):
    if "opennmt" in systems:
        install_venv(work / "venv-opennmt", OPENNMT_DEPENDENCIES, OPENNMT_REQUIREMENTS,
                     work / "logs" / "install-opennmt.log")
    if "joeynmt" in systems:
        install_venv(work / "venv-joeynmt", JOEYNMT_REQUIREMENTS, [], work / "logs" / "install-joeynmt.log")


def venv_versions(venv: Path, packages: list[str]) -> dict:
    """The installed versions of packages in a virtual environment, from its own python."""
    code = ("import importlib.metadata as m, json, platform; "
            f"print(json.dumps({{'python': platform.python_version(), "
            f"**{{p: m.version(p) for p in {packages!r}}}}}))")
    return json.loads(subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True,
                                     check=True).stdout)


# ---------------------------------------------------------------------------------------------- 2. anchors

def unzip_data(work: Path):
    """WORK/data/{train,val,test_2016_flickr}.{de,en}: the shared files, unzipped byte for byte."""
    import gzip

    (work / "data").mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        for lang in ("de", "en"):
            target = work / "data" / f"{split}.{lang}"
            if not target.exists():  # written under another name first: never a partial file
                partial = target.with_suffix(target.suffix + ".partial")
                partial.write_bytes(gzip.decompress((MULTI30K / f"{split}.{lang}.gz").read_bytes()))
                partial.rename(target)


def train_spm(work: Path):
    """One joint sentencepiece BPE model, 8,000 pieces, on train.de + train.en.

    Its four special pieces are JoeyNMT's (<unk> 0, <pad> 1, <s> 2, </s> 3), so the model has 7,996
    ordinary pieces: OpenNMT-py adds its own 4 specials to them and gets 8,000, as its config says."""
    import sentencepiece as spm

    model = work / "spm" / "spm8k.model"
    if model.exists():
        return
    model.parent.mkdir(parents=True, exist_ok=True)
    spm.SentencePieceTrainer.train(
        input=[str(work / "data" / "train.de"), str(work / "data" / "train.en")],
        model_prefix=str(model.with_suffix("")), model_type="bpe", vocab_size=8000, character_coverage=1.0,
        unk_id=0, pad_id=1, bos_id=2, eos_id=3, unk_piece="<unk>", pad_piece="<pad>", bos_piece="<s>",
        eos_piece="</s>", num_threads=THREADS, minloglevel=2)


def write_vocabularies(work: Path) -> dict:
    """spm/joint_vocab.txt (all pieces, in id order), onmt/vocab.shared (ordinary pieces with their
    counts in train.de + train.en, most frequent first); returns the train set's statistics."""
    from collections import Counter

    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_file=str(work / "spm" / "spm8k.model"))
    pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    (work / "spm" / "joint_vocab.txt").write_text("\n".join(pieces) + "\n")
    counts, target_lengths = Counter(), []
    for lang in ("de", "en"):
        encoded = processor.encode((work / "data" / f"train.{lang}").read_text().splitlines(), out_type=str)
        for sentence in encoded:
            counts.update(sentence)
        if lang == "en":
            target_lengths = [len(sentence) + 1 for sentence in encoded]  # + </s>, as all three count
    ordinary = [p for i, p in enumerate(pieces) if not (processor.is_control(i) or processor.is_unknown(i))]
    ordinary.sort(key=lambda p: -counts[p])  # stable: equal counts keep the model's order
    (work / "onmt").mkdir(parents=True, exist_ok=True)
    (work / "onmt" / "vocab.shared").write_text("".join(f"{p}\t{counts[p]}\n" for p in ordinary))
    return {"pieces": len(pieces), "ordinary_pieces": len(ordinary),
            "target_tokens_per_sentence": sum(target_lengths) / len(target_lengths)}


def prepare_anchors(work: Path) -> dict:
    unzip_data(work)
    train_spm(work)
    stats_path = work / "spm" / "stats.json"
    if not (stats_path.exists() and (work / "onmt" / "vocab.shared").exists()):
        stats_path.write_text(json.dumps(write_vocabularies(work), indent=1))
    return json.loads(stats_path.read_text())


def intervals(minutes: float) -> dict:
    """Steps between log lines, validations and OpenNMT-py's checkpoints: the peer configurations'
    100, 500 and 500 for 20 minutes or more; for shorter budgets proportionally fewer steps between
    validations, and a checkpoint at every log line, so that OpenNMT-py has one near the end."""
    validate = min(500, max(50, int(500 * minutes / 20) // 50 * 50))
    log = min(100, validate // 5)
    return {"log": log, "validate": validate, "save": validate if minutes >= 20 else log}


def set_key(config: dict, dotted: str, value):
    *parents, last = dotted.split(".")
    for key in parents:
        config = config[key]
    config[last] = value


def render(text: str, work: Path, overrides: dict | None = None) -> str:
    """A peer configuration with `<anchors>` replaced by WORK (absolute), then `overrides`
    ({"training.validation_freq": 100, ...}) set; the text is kept as is when there are none."""
    text = text.replace("<anchors>", str(Path(work).resolve()))
    if not overrides:
        return text
    config = yaml.safe_load(text)
    for dotted, value in overrides.items():
        set_key(config, dotted, value)
    return yaml.safe_dump(config, sort_keys=False, allow_unicode=True)


def render_configs(work: Path, minutes: float, joey_config: str) -> dict[str, Path]:
    """WORK/configs/*.yaml from ../shared/peers (read now, never copied into the repository)."""
    every = intervals(minutes)
    onmt_train = {"report_every": every["log"], "valid_steps": every["validate"],
                  "save_checkpoint_steps": every["save"]}
    joey_train = {"training.logging_freq": every["log"], "training.validation_freq": every["validate"]}
    joey_model_dir = yaml.safe_load(render((PEER_CONFIGS / JOEY_CONFIGS[joey_config]).read_text(), work))["model_dir"]
    joey_decode = {"model_dir": joey_model_dir, "testing.load_model": f"{joey_model_dir}/best.ckpt"}
    wanted = {
        "opennmt-train": ("opennmt-rnn_de_en.yaml", onmt_train),
        "opennmt-greedy": ("opennmt-translate_greedy.yaml", None),
        "opennmt-beam5": ("opennmt-translate_beam5.yaml", None),
        "joeynmt-train": (JOEY_CONFIGS[joey_config], joey_train),
        "joeynmt-beam5": ("joeynmt-translate_beam5.yaml", joey_decode),
        "joeynmt-greedy": ("joeynmt-translate_beam5.yaml", {**joey_decode, "testing.beam_size": 1}),
    }
    (work / "configs").mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, (source, overrides) in wanted.items():
        paths[name] = work / "configs" / f"{name}.yaml"
        defaults = yaml.safe_load((PEER_CONFIGS / source).read_text())
        changed = {k: v for k, v in (overrides or {}).items() if lookup(defaults, k) != v}
        paths[name].write_text(render((PEER_CONFIGS / source).read_text(), work, changed))
    return paths


def lookup(config: dict, dotted: str):
    for key in dotted.split("."):
        if not isinstance(config, dict) or key not in config:
            return None
        config = config[key]
    return config


# ---------------------------------------------------------------------------------------------- log parsing

ONMT_STEP = re.compile(r"Step (\d+)(?:/\s*\d+)?; .*?([\d.]+)/\s*([\d.]+) tok/s;\s*([\d.]+) sec")
ONMT_VALID = re.compile(r"validation BLEU: ([\d.]+)")
JOEY_TIME = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) - "
JOEY_STEP = re.compile(JOEY_TIME + r".*Epoch\s+\d+, Step:\s+(\d+), .*Tokens per Sec:\s+([\d.]+)", re.M)
JOEY_START = re.compile(JOEY_TIME + r".*EPOCH 1$", re.M)
JOEY_VALID = re.compile(r"Evaluation result \((?:greedy|beam search)\): bleu:\s+([\d.]+)")


def parse_onmt_log(text: str) -> dict:
    """OpenNMT-py's training log: the last step logged and its seconds since the training loop began,
    target tokens/s (the mean of its report lines) and the validation BLEU scores by step."""
    steps, validation, last_step = [], [], 0
    for line in text.splitlines():
        if match := ONMT_STEP.search(line):
            last_step = int(match[1])
            steps.append((last_step, float(match[3]), float(match[4])))
        elif match := ONMT_VALID.search(line):
            validation.append({"step": last_step, "bleu": float(match[1])})
    if not steps:
        return {"steps": 0, "seconds": None, "tokens_per_s": None, "validation": validation}
    return {"steps": steps[-1][0], "seconds": steps[-1][2], "validation": validation,
            "tokens_per_s": sum(s[1] for s in steps) / len(steps)}


def joey_time(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def parse_joey_log(text: str) -> dict:
    """JoeyNMT's training log: the last step logged and its seconds since "EPOCH 1" (from the log's
    timestamps), target tokens/s (the mean of its report lines) and the validation BLEU scores by step."""
    start = JOEY_START.search(text)
    steps = [(joey_time(m[1]), int(m[2]), float(m[3])) for m in JOEY_STEP.finditer(text)]
    validation, last_step = [], 0
    for line in text.splitlines():
        if match := JOEY_STEP.search(line):
            last_step = int(match[2])
        elif match := JOEY_VALID.search(line):
            validation.append({"step": last_step, "bleu": float(match[1])})
    if not steps or not start:
        return {"steps": 0, "seconds": None, "tokens_per_s": None, "validation": validation}
    return {"steps": steps[-1][1], "seconds": steps[-1][0] - joey_time(start[1]), "validation": validation,
            "tokens_per_s": sum(s[2] for s in steps) / len(steps)}


# ---------------------------------------------------------------------------------------------- 3. training

def process_tree(root: int) -> list[int]:
    """root and all its descendants, from /proc/*/stat."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def memory_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process in KiB, (0, 0) once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0, 0
    values = dict(re.findall(r"^(VmRSS|VmHWM):\s+(\d+) kB", status, re.M))
    return int(values.get("VmRSS", 0)), int(values.get("VmHWM", 0))


class PeakMemory:
    """Peak resident memory of a process tree: the larger of the sum of the tree's current RSS (over
    all samples) and any one process's own high-water mark, which the kernel keeps exactly."""

    def __init__(self, root: int):
        self.root, self.peak_kib = root, 0

    def sample(self):
        sizes = [memory_kib(pid) for pid in process_tree(self.root)]
        self.peak_kib = max([self.peak_kib, sum(rss for rss, _ in sizes), *(hwm for _, hwm in sizes)])

    @property
    def gb(self) -> float:
        return self.peak_kib / 1024 / 1024  # KiB -> GiB, as benchmarks/run.py reports attnmt's


def stop(process: subprocess.Popen, first: signal.Signals):
    """`first` to the process group, then SIGTERM and SIGKILL while it is still there."""
    for sig, wait in ((first, 60), (signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def train_for(cmd, log: Path, env: dict, minutes: float, loop_started: re.Pattern, stop_with: signal.Signals) -> dict:
    """Runs a peer's training command for `minutes` of its training loop (from the first log line
    matching loop_started), sampling its memory twice a second, then stops it with `stop_with`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        out.write(f"$ {' '.join(str(c) for c in cmd)}\n")
        out.flush()
        process = subprocess.Popen([str(c) for c in cmd], stdout=out, stderr=subprocess.STDOUT, env=env,
                                   start_new_session=True)
    memory, started = PeakMemory(process.pid), time.monotonic()
    deadline = started + STARTUP_ALLOWANCE + 60 * minutes
    loop_seen = False
    while process.poll() is None and time.monotonic() < deadline:
        memory.sample()
        if not loop_seen and loop_started.search(log.read_text(errors="replace")):
            loop_seen, deadline = True, time.monotonic() + 60 * minutes
        time.sleep(0.5)
    if process.poll() is None:
        memory.sample()  # the high-water marks up to the stop
        stop(process, stop_with)
    elif process.returncode != 0:
        raise failure(cmd, log, f"training ended early with status {process.returncode}")
    if not loop_seen:
        raise failure(cmd, log, f"no training loop within {STARTUP_ALLOWANCE} s")
    return {"peak_rss_gb": memory.gb, "wall_s": time.monotonic() - started}


def train_attnmt(work: Path, minutes: float) -> dict:
    """benchmarks/run.py does attnmt's training, decoding and scoring: its results.json is the column."""
    out = work / "attnmt"
    shutil.rmtree(out, ignore_errors=True)  # run.py refuses an existing model folder
    cmd = [sys.executable, REPO / "benchmarks" / "run.py", "--config", REPO / "configs" / "rnn-bahdanau.yaml",
           "--minutes", str(minutes), "--threads", str(THREADS), "--out", out,
           "--validate-every", str(intervals(minutes)["validate"])]
    run_logged(cmd, work / "logs" / "attnmt.log", env=thread_env(), timeout=60 * minutes + DECODE_TIMEOUT + 1800)
    results = json.loads((out / "results.json").read_text())
    ours, last_valid = results["attnmt"], results["validation"][-1]
    return {"sentences_per_s": ours["sentences_per_s"], "tokens_per_s_reported": ours["tokens_per_s"],
            "steps": ours["steps"], "valid_bleu_end": last_valid["bleu"], "valid_step_end": last_valid["step"],
            "validation": [{"step": r["step"], "bleu": r["bleu"]} for r in results["validation"]],
            "bleu_greedy": ours["bleu_greedy"], "bleu_beam5": ours["bleu_beam5"], "chrf_beam5": ours["chrf_beam5"],
            "decode_greedy": ours["decode_greedy"], "decode_beam5": ours["decode_beam5"],
            "peak_rss_gb": ours["peak_rss_gb"], "precision": results["args"]["precision"],
            **{key: ours.get(key) for key in PEER_KEY},
            "checkpoint": "best.safetensors (best validation BLEU; attnmt also validates at the end)",
            "signature": results["beam5"]["signature"]}


def training_figures(parsed: dict, run: dict, log: Path) -> dict:
    if not parsed["steps"]:
        raise StepFailed(f"no training step in the log {log}:\n{tail(log)}")
    last = parsed["validation"][-1] if parsed["validation"] else {"step": None, "bleu": None}
    return {"steps": parsed["steps"], "train_seconds": parsed["seconds"],
            "sentences_per_s": parsed["steps"] * BATCH / parsed["seconds"],
            "tokens_per_s_reported": parsed["tokens_per_s"], "validation": parsed["validation"],
            "valid_bleu_end": last["bleu"], "valid_step_end": last["step"], **run}


def onmt_env() -> dict:
    # OpenNMT-py's checkpoints are pickles (optimizer and options), which torch >= 2.6 refuses to load
    # by default: these are files this benchmark has just written itself, so the full load is safe.
    return thread_env(TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1")


def train_opennmt(work: Path, configs: dict, minutes: float) -> dict:
    shutil.rmtree(work / "onmt" / "model", ignore_errors=True)  # no checkpoint of an earlier run
    log = work / "logs" / "opennmt-train.log"
    cmd = [work / "venv-opennmt" / "bin" / "onmt_train", "-config", configs["opennmt-train"]]
    # SIGTERM, as `timeout` sends: OpenNMT-py saves nothing then; its last checkpoint is used.
    run = train_for(cmd, log, onmt_env(), minutes, re.compile("Start training loop"), signal.SIGTERM)
    return training_figures(parse_onmt_log(log.read_text(errors="replace")), run, log)


def train_joeynmt(work: Path, configs: dict, minutes: float) -> dict:
    log = work / "logs" / "joeynmt-train.log"
    cmd = [work / "venv-joeynmt" / "bin" / "python", "-m", "joeynmt", "train", configs["joeynmt-train"],
           "--skip-test"]
    # SIGINT: JoeyNMT saves its weights at the budget (latest.ckpt), for when no validation made best.ckpt.
    run = train_for(cmd, log, thread_env(), minutes, JOEY_START, signal.SIGINT)
    return training_figures(parse_joey_log(log.read_text(errors="replace")), run, log)


# ---------------------------------------------------------------------------------------------- 4. decoding

def score(hypotheses_path: Path, work: Path) -> dict:
    from attnmt.data.corpus import read_lines
    from attnmt.evaluation import corpus_scores

    hypotheses = read_lines(hypotheses_path)
    references = read_lines(work / "data" / "test_2016_flickr.en")
    scores = corpus_scores(hypotheses, references)
    return {"bleu": scores["bleu"].score, "chrf": scores["chrf"].score, "signature": scores["bleu"].signature,
            "sentences": len(references)}


def complete_checkpoint(folder: Path) -> Path:
    """OpenNMT-py's newest checkpoint that is a whole file (the stop may cut a checkpoint being written)."""
    def step(path: Path) -> int:
        return int(re.search(r"_step_(\d+)\.pt$", path.name)[1])

    for path in sorted(folder.glob("*_step_*.pt"), key=step, reverse=True):
        try:
            with zipfile.ZipFile(path) as archive:
                if archive.testzip() is None:
                    return path
        except (zipfile.BadZipFile, OSError):
            print(f"  {path.name} is incomplete (cut by the stop), taking the one before")
    raise StepFailed(f"no OpenNMT-py checkpoint in {folder}: the budget ended before the first save")


def decode_figures(outputs: dict[str, tuple[Path, float]], work: Path) -> dict:
    greedy, beam5 = (score(outputs[k][0], work) for k in ("greedy", "beam5"))
    return {"bleu_greedy": greedy["bleu"], "bleu_beam5": beam5["bleu"], "chrf_beam5": beam5["chrf"],
            "decode_greedy": greedy["sentences"] / outputs["greedy"][1],
            "decode_beam5": beam5["sentences"] / outputs["beam5"][1], "signature": beam5["signature"]}


def decode_opennmt(work: Path, configs: dict) -> dict:
    checkpoint = complete_checkpoint(work / "onmt" / "model")
    outputs = {}
    for search in ("greedy", "beam5"):
        hypotheses = work / "onmt" / f"test_2016_flickr.{search}.en"
        cmd = [work / "venv-opennmt" / "bin" / "onmt_translate", "-config", configs[f"opennmt-{search}"],
               "-model", checkpoint, "-src", work / "data" / "test_2016_flickr.de", "-output", hypotheses]
        outputs[search] = hypotheses, run_logged(cmd, work / "logs" / f"opennmt-{search}.log", env=onmt_env(),
                                                  timeout=DECODE_TIMEOUT)
    return {"checkpoint": checkpoint.name, **decode_figures(outputs, work)}


def decode_joeynmt(work: Path, configs: dict) -> dict:
    """Decodes with best.ckpt, as the peer configuration says, or latest.ckpt (saved at the budget) if
    no validation made a best.ckpt."""
    checkpoint = Path(yaml.safe_load(configs["joeynmt-beam5"].read_text())["testing"]["load_model"])
    if not checkpoint.exists():
        checkpoint = checkpoint.with_name("latest.ckpt")
        for search in ("greedy", "beam5"):
            config = yaml.safe_load(configs[f"joeynmt-{search}"].read_text())
            config["testing"]["load_model"] = str(checkpoint)
            configs[f"joeynmt-{search}"].write_text(yaml.safe_dump(config, sort_keys=False))
    if not checkpoint.exists():
        raise StepFailed(f"no JoeyNMT checkpoint in {checkpoint.parent}: see {work / 'logs' / 'joeynmt-train.log'}")
    outputs = {}
    for search in ("greedy", "beam5"):
        hypotheses = work / "joey" / f"test_2016_flickr.{search}.en"
        # Sources on standard input, translations on standard output: JoeyNMT 2.3.0's `-o FILE` fails
        # after decoding (AttributeError: 'BaseConfig' object has no attribute 'n_best').
        cmd = [work / "venv-joeynmt" / "bin" / "python", "-m", "joeynmt", "translate", configs[f"joeynmt-{search}"]]
        with open(work / "data" / "test_2016_flickr.de") as source:
            outputs[search] = hypotheses, run_logged(cmd, work / "logs" / f"joeynmt-{search}.log", env=thread_env(),
                                                      stdin=source, timeout=DECODE_TIMEOUT, stdout=hypotheses)
    return {"checkpoint": f"{checkpoint.name} -> {checkpoint.resolve().name}", **decode_figures(outputs, work)}


# ---------------------------------------------------------------------------------------------- 5. table

ROWS = [  # label, key, format
    ("training sentences/s", "sentences_per_s", "{:.0f}"),
    ("training target tokens/s, as the system reports", "tokens_per_s_reported", "{:,.0f}"),
    ("training target tokens/s, spm8k pieces + </s> of train.en", "tokens_per_s_counted", "{:,.0f}"),
    ("steps", "steps", "{:,}"),
    ("validation BLEU at the end (last validation)", "valid_bleu_end", "{:.1f}"),
    ("test_2016 BLEU greedy", "bleu_greedy", "{:.1f}"),
    ("test_2016 BLEU beam 5", "bleu_beam5", "{:.1f}"),
    ("test_2016 chrF beam 5", "chrf_beam5", "{:.1f}"),
    ("decode sent/s greedy, batch 64 (wall, load included)", "decode_greedy", "{:.0f}"),
    ("decode sent/s beam 5, batch 64 (wall, load included)", "decode_beam5", "{:.0f}"),
    # attnmt's opt-in cheaper inference (benchmarks/run.py decodes with both); the peers decode in
    # float32 only on CPUs, so their float32 figure stands in these rows and their ratios.
    ("test_2016 BLEU beam 5, attnmt --bf16 (bf16 output layer; peers: float32)", "bleu_beam5_bf16", "{:.1f}"),
    ("decode sent/s beam 5, batch 64, attnmt --bf16 (peers: float32)", "decode_beam5_bf16", "{:.0f}"),
    ("test_2016 BLEU beam 5, attnmt --int8 (int8 linear layers; peers: float32)", "bleu_beam5_int8", "{:.1f}"),
    ("decode sent/s beam 5, batch 64, attnmt --int8 (peers: float32)", "decode_beam5_int8", "{:.0f}"),
    ("training peak RSS GB (lower is better)", "peak_rss_gb", "{:.2f}"),
    ("machine speed before the system, GFLOP/s (64×512×1536 fp32 products)", "probe_gflops_before", "{:.0f}"),
    ("machine speed after the system, GFLOP/s", "probe_gflops_after", "{:.0f}"),
]


PEER_KEY = {f"{figure}_beam5_{q}": f"{figure}_beam5" for q in ("bf16", "int8") for figure in ("bleu", "decode")}


def ratio(ours, theirs) -> str:
    if ours is None or not theirs:
        return "—"
    return f"{ours / theirs:.2f}"


def table(systems: dict[str, dict]) -> str:
    """The markdown table: one row a figure; columns attnmt, the peers, then attnmt / each peer."""
    peers = [s for s in ("opennmt", "joeynmt") if s in systems]
    names = [TITLES[s] for s in SYSTEMS if s in systems]
    header = ["figure", *names, *(f"attnmt / {TITLES[p].split()[0]}" for p in peers if "attnmt" in systems)]
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for label, key, fmt in ROWS:
        values = [systems[s].get(key if s == "attnmt" else PEER_KEY.get(key, key)) for s in SYSTEMS if s in systems]
        cells = [fmt.format(v) if v is not None else "—" for v in values]
        if "attnmt" in systems:
            cells += [ratio(systems["attnmt"].get(key), systems[p].get(PEER_KEY.get(key, key))) for p in peers]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def machine() -> dict:
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
    return {"nproc": os.cpu_count(), "cpu": model[1] if model else platform.processor(), "threads": THREADS,
            "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
            "load_average_at_end": [round(x, 2) for x in os.getloadavg()]}


def versions(work: Path, systems: list[str]) -> dict:
    import sacrebleu
    import sentencepiece
    import torch

    import attnmt

    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    found = {"attnmt": {"version": attnmt.__version__, "commit": commit.stdout.strip() or None,
                        "python": platform.python_version(), "torch": torch.__version__,
                        "sacrebleu": sacrebleu.__version__, "sentencepiece": sentencepiece.__version__}}
    if "opennmt" in systems:
        found["opennmt"] = venv_versions(work / "venv-opennmt", ["OpenNMT-py", "torch", "sentencepiece", "sacrebleu"])
    if "joeynmt" in systems:
        found["joeynmt"] = venv_versions(work / "venv-joeynmt", ["joeynmt", "torch", "sentencepiece", "sacrebleu"])
    return found


def save_results(work: Path, args, systems: dict, anchors: dict, ran: list[str]) -> dict:
    """WORK/results.json; the figures of systems not run this time (--only) are kept from the last one."""
    path = work / "results.json"
    earlier = json.loads(path.read_text())["systems"] if path.exists() else {}
    merged = {s: systems.get(s, earlier.get(s)) for s in SYSTEMS if s in systems or s in earlier}
    results = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               "command": " ".join(["python", *sys.argv]), "minutes": args.minutes,
               "intervals": intervals(args.minutes), "joey_config": JOEY_CONFIGS[args.joey_config],
               "machine": machine(), "versions": versions(work, ran), "anchors": anchors, "ran": ran,
               "systems": merged}
    path.write_text(json.dumps(results, indent=2))
    return results


# ---------------------------------------------------------------------------------------------- main

def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=20.0,
                        help="training budget of each system, wall clock of its training loop (default 20)")
    parser.add_argument("--only", default=",".join(SYSTEMS), help="comma-separated subset of " + ",".join(SYSTEMS))
    parser.add_argument("--work", default=str(REPO / "runs" / "peers"), help="work folder (default runs/peers)")
    parser.add_argument("--skip-install", action="store_true", help="use the virtual environments as they are")
    parser.add_argument("--joey-config", choices=sorted(JOEY_CONFIGS), default="default",
                        help="JoeyNMT's configuration: default (xavier init, as JoeyNMT ships) or uniform-init")
    args = parser.parse_args(argv)
    args.systems = [s.strip() for s in args.only.split(",") if s.strip()]
    if unknown := set(args.systems) - set(SYSTEMS):
        parser.error(f"--only: unknown {', '.join(sorted(unknown))}; choose among {', '.join(SYSTEMS)}")
    return args


PROBE = """
import time, torch
torch.set_num_threads({threads})
a, b = torch.randn(64, 512), torch.randn(512, 1536)
for _ in range(100):
    a @ b
products, start = 0, time.perf_counter()
while time.perf_counter() - start < {seconds}:
    for _ in range(100):
        a @ b
    products += 100
print(2 * 64 * 512 * 1536 * products / (time.perf_counter() - start) / 1e9)
"""


def machine_speed(seconds: float = 5.0) -> float:
    """GFLOP/s of float32 (64 x 512) x (512 x 1,536) products, the size of an RNN decoder step's,
    on THREADS threads. Taken before and after each system: the machine is shared, and its speed
    can drift between the systems of one run by more than the differences being measured."""
    code = PROBE.format(threads=THREADS, seconds=seconds)
    done = subprocess.run([sys.executable, "-c", code], env=thread_env(), capture_output=True, text=True)
    if done.returncode != 0:
        raise StepFailed(f"machine speed probe failed:\n{done.stderr[-2000:]}")
    return round(float(done.stdout), 1)


def run_system(name: str, work: Path, configs: dict, minutes: float, per_sentence: float) -> dict:
    print(f"{TITLES[name]}: training {minutes:g} min, then decoding test_2016_flickr (logs in {work / 'logs'})",
          flush=True)
    probe_before = machine_speed()
    if name == "attnmt":
        figures = train_attnmt(work, minutes)
    elif name == "opennmt":
        figures = {**train_opennmt(work, configs, minutes), **decode_opennmt(work, configs)}
    else:
        figures = {**train_joeynmt(work, configs, minutes), **decode_joeynmt(work, configs)}
    figures["probe_gflops_before"], figures["probe_gflops_after"] = probe_before, machine_speed()
    figures["tokens_per_s_counted"] = figures["sentences_per_s"] * per_sentence
    figures["minutes"] = minutes
    figures["load_average"] = [round(x, 2) for x in os.getloadavg()]  # 1, 5, 15 min: others' work on the cores
    figures["measured"] = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return figures


def main(argv=None):
    args = parse_args(argv)
    work = Path(args.work).resolve()
    for needed in (MULTI30K, PEER_CONFIGS):
        if not needed.is_dir():
            sys.exit(f"not found: {needed}")
    try:
        peers = [s for s in args.systems if s != "attnmt"]
        if peers and not args.skip_install:
            install_peers(work, peers)
        for peer in peers:
            if not (work / f"venv-{peer}" / "bin" / "python").exists():
                raise StepFailed(f"{work}/venv-{peer} is missing: run without --skip-install")
        anchors = prepare_anchors(work)
        configs = render_configs(work, args.minutes, args.joey_config)
        systems = {name: run_system(name, work, configs, args.minutes, anchors["target_tokens_per_sentence"])
                   for name in SYSTEMS if name in args.systems}
    except StepFailed as e:
        sys.exit(f"peers.py: {e}")
    results = save_results(work, args, systems, anchors, args.systems)
    print(f"\nMulti30k de-en, {args.minutes:g} min of training per system, {THREADS} threads; "
          f"{results['date']}; {results['machine']['cpu']} ({results['machine']['nproc']} cores)")
    for name, figures in results["systems"].items():
        note = "" if name in args.systems else f"; from an earlier run ({figures['measured']})"
        print(f"  {TITLES[name]}: validation BLEU by step "
              + (", ".join(f"{v['step']}: {v['bleu']:.1f}" for v in figures["validation"]) or "none")
              + f"; decoded with {figures.get('checkpoint', 'its best checkpoint')}"
              + f"; load average at the end {figures['load_average'][0]:.1f}" + note)
    print(table(results["systems"]))
    print(f"\nratios: attnmt / peer; above 1 is better for attnmt except for memory. {work / 'results.json'}")


if __name__ == "__main__":
    main()
