"""Side by side: attnmt against OpenNMT-py 3.5.1 and JoeyNMT 2.3.0, Multi30k German -> English.

    python benchmarks/peers.py                            # 20 minutes of training per system (over an hour)
    python benchmarks/peers.py --minutes 3                # short-budget check (about 15 minutes)
    python benchmarks/peers.py --only opennmt,joeynmt --skip-install
    python benchmarks/peers.py --only joeynmt --joey-config uniform-init
    python benchmarks/peers.py --only attnmt,opennmt --skip-install --decode-only   # decode the last run's models again
    python benchmarks/peers.py --only attnmt,opennmt --skip-install --decode-only --rounds 3   # best of 3, alternated
    flock LOCKFILE python benchmarks/peers.py             # on a shared machine: one benchmark at a time
    python benchmarks/peers.py --device cuda --minutes 2  # on a GPU: attnmt and OpenNMT-py (benchmarks/gpu_peers.sh)

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

--device cuda: attnmt (batches of 64 sentences, then a second run with token batches, --batch-tokens)
and OpenNMT-py trained one after the other on GPU 0, JoeyNMT not. No virtual environment: everything
runs with this python (sys.executable), OpenNMT-py as `python -m onmt.bin.train` / `onmt.bin.translate`,
which must be importable (installed beforehand from wheels with --no-deps, see benchmarks/gpu_peers.sh);
spacy and fasttext, which OpenNMT-py imports at start-up for transforms this benchmark does not use,
are stub modules (WORK/stubs, first on its PYTHONPATH) that say in its log when they are imported, and
fail if used. The configurations are the same with `gpu_ranks: [0]` (training) and `gpu: 0`
(translation), their own intervals (log every 100 steps, validate every 500; under 20 minutes, a
checkpoint every 100). nvidia-smi is read every 0.5 s in a background thread during each timed
command (utilisation.gpu, memory.used of GPU 0; WORK/logs/gpu-*.csv): mean utilisation over the
training loop and over the decoding, peak memory. Decoding speed twice: decoding only (attnmt: its
in-process translate call after loading, benchmarks/run.py; OpenNMT-py: its -report_time "Total
translation time", 0.1 s resolution) and the whole command, start-up included (a fresh process:
interpreter, imports, CUDA initialisation, model loading, decoding: `python -m attnmt.cli translate`,
`python -m onmt.bin.translate`).
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
import threading
import time
import zipfile
from contextlib import contextmanager, nullcontext
from datetime import datetime, timezone
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
MULTI30K = SHARED / "data" / "multi30k"
PEER_CONFIGS = SHARED / "peers"
CHOICES = ("attnmt", "opennmt", "joeynmt")  # --only
SYSTEMS = ("attnmt", "attnmt_tokens", "opennmt", "joeynmt")  # the columns, in this order
TITLES = {
    "attnmt": "attnmt",
    "attnmt_tokens": "attnmt, token batches",
    "opennmt": "OpenNMT-py 3.5.1",
    "joeynmt": "JoeyNMT 2.3.0",
}
SHORT = {"attnmt": "attnmt", "attnmt_tokens": "attnmt tokens", "opennmt": "OpenNMT-py", "joeynmt": "JoeyNMT"}
DEVICES = ("cpu", "cuda")
GPU_SYSTEMS = ("attnmt", "opennmt")  # JoeyNMT is not part of the GPU run
BATCH_TOKENS = 5000  # the token-batch run of attnmt on a GPU (--batch-tokens)
JOEY_CONFIGS = {"default": "joeynmt-rnn_de_en.yaml", "uniform-init": "joeynmt-rnn_de_en-uniform-init.yaml"}
SPLITS = ("train", "val", "test_2016_flickr")
BATCH = 64  # sentences a training batch, in all three configurations
THREADS = 2
TORCH = "torch==2.13.0"  # the CPU wheel; an open range would pull a CUDA build of several GB
# OpenNMT-py declares torch<2.3: installed with --no-deps, then what training and translating import
# (its transforms are all imported at start-up, hence spacy, fasttext, rapidfuzz and pyahocorasick).
OPENNMT_REQUIREMENTS = ["OpenNMT-py==3.5.1"]
OPENNMT_DEPENDENCIES = [
    "configargparse==1.9.0",
    "pyyaml==6.0.3",
    "sentencepiece==0.2.3",
    "sacrebleu==2.6.0",
    "pyonmttok==1.38.1",
    "spacy==3.8.18",
    "fasttext-wheel==0.9.2",
    "rapidfuzz==3.14.6",
    "pyahocorasick==2.3.1",
    "regex==2026.11.15",
]
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
            done = subprocess.run(
                [str(c) for c in cmd],
                stdout=result if stdout else out,
                stderr=out,
                env=env,
                stdin=stdin,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            raise failure(cmd, log, f"timed out after {timeout} s") from None
    if done.returncode != 0:
        raise failure(cmd, log, f"exit status {done.returncode}")
    return time.perf_counter() - started


def run_watched(cmd, log: Path, env: dict, timeout: float, marker: re.Pattern) -> dict:
    """run_logged, and the wall-clock time (time.time()) at which a line matching `marker` first
    appeared in the log, read twice a second while the command runs (None if it never did)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as out:
        out.write(f"\n$ {' '.join(str(c) for c in cmd)}\n")
        out.flush()
        offset = out.tell()
        process = subprocess.Popen([str(c) for c in cmd], stdout=out, stderr=out, env=env, start_new_session=True)
    started, seen = time.monotonic(), None
    with left_behind_killed(process):
        while process.poll() is None:
            if seen is None:
                with open(log, errors="replace") as text:
                    text.seek(offset)
                    if marker.search(text.read()):
                        seen = time.time()
            if time.monotonic() - started > timeout:
                stop(process, signal.SIGTERM)
                raise failure(cmd, log, f"timed out after {timeout} s")
            time.sleep(0.5)
    if process.returncode != 0:
        raise failure(cmd, log, f"exit status {process.returncode}")
    return {"wall_s": time.monotonic() - started, "marker_at": seen}


@contextmanager
def left_behind_killed(process: subprocess.Popen):
    """Kills the process group of a command started in its own session (start_new_session) if the
    block is left by an exception (a failure, or SIGTERM: see `main`) while the command still runs."""
    try:
        yield
    except BaseException:
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()
        raise


def terminated(signum, frame):
    """SIGTERM (`timeout` on a machine lent for a limited time): ends the run as a failed step, so
    that the running command is killed and what was measured so far stays (WORK/results.partial.json)."""
    raise StepFailed(f"stopped by signal {signum} (SIGTERM)")


# ---------------------------------------------------------------------------------------------- GPU

NVIDIA_SMI = ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits"]
NVIDIA_SMI_INFO = ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]


def smi_number(field: str) -> float | None:
    """A field of nvidia-smi's csv; None for what it cannot read ("[N/A]", "[Not Supported]")."""
    try:
        return float(field)
    except ValueError:
        return None


def parse_nvidia_smi(text: str) -> list[tuple[float | None, float | None]]:
    """(utilisation %, memory used MiB) of each GPU, in nvidia-smi's order, from the output of
    NVIDIA_SMI (`13, 2048` a line)."""
    rows = []
    for line in text.splitlines():
        if line.strip():
            fields = [f.strip() for f in line.split(",")]
            if len(fields) != 2:
                raise ValueError(f"unexpected nvidia-smi line: {line!r}")
            rows.append((smi_number(fields[0]), smi_number(fields[1])))
    return rows


def parse_gpu_info(text: str) -> dict:
    """GPU 0's name and driver from the output of NVIDIA_SMI_INFO (`NVIDIA H100 80GB HBM3, 580.159.04`)."""
    first = next(line for line in text.splitlines() if line.strip())
    name, driver = (f.strip() for f in first.rsplit(",", 1))
    return {"gpu": name, "driver": driver}


class GpuSampler:
    """GPU 0's utilisation and memory in use, read with nvidia-smi every `interval` seconds in a
    background thread while a timed command runs:

        with GpuSampler(csv=log_folder / "gpu-x.csv") as gpu:
            ...                             # the command
        gpu.summary(start, end)             # over a window of wall-clock times (time.time())

    utilization.gpu is the share of nvidia-smi's last sample period (1/6 s to 1 s) in which a kernel
    ran; memory.used counts every process's memory on the GPU (PyTorch's cached blocks included)."""

    def __init__(self, interval: float = 0.5, command: list[str] | None = None, csv: Path | None = None):
        self.interval, self.command, self.csv = interval, command or NVIDIA_SMI, csv
        self.samples: list[tuple[float, float | None, float | None]] = []  # (time.time(), %, MiB)
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nvidia-smi", daemon=True)

    def _run(self):
        while not self._stop.is_set():
            began = time.time()
            try:
                done = subprocess.run(self.command, capture_output=True, text=True, timeout=10)
                if done.returncode != 0:
                    raise OSError(f"exit status {done.returncode}: {done.stderr.strip()[-200:]}")
                util, memory = parse_nvidia_smi(done.stdout)[0]
                self.samples.append((time.time(), util, memory))
            except (OSError, ValueError, IndexError, subprocess.TimeoutExpired) as e:
                if len(self.errors) < 10:
                    self.errors.append(f"{type(e).__name__}: {e}")
            self._stop.wait(max(0.0, self.interval - (time.time() - began)))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        if self.csv is not None:
            self.csv.parent.mkdir(parents=True, exist_ok=True)
            cell = lambda value: "" if value is None else f"{value:g}"  # noqa: E731
            self.csv.write_text(
                "time,utilization_gpu_percent,memory_used_mib\n"
                + "".join(f"{t:.3f},{cell(u)},{cell(m)}\n" for t, u, m in self.samples)
                + "".join(f"# error: {e}\n" for e in self.errors)
            )
        return False

    def summary(self, start: float | None = None, end: float | None = None) -> dict:
        """Mean utilisation (%) and peak memory (GB, MiB / 1024) of the samples taken between start and
        end (time.time(); None: unbounded), and how many there were; None where there were none."""
        inside = [(u, m) for t, u, m in self.samples if (start is None or t >= start) and (end is None or t <= end)]
        utils = [u for u, _ in inside if u is not None]
        memory = [m for _, m in inside if m is not None]
        return {
            "util": sum(utils) / len(utils) if utils else None,
            "mem_gb": max(memory) / 1024 if memory else None,
            "samples": len(inside),
        }


def gpu_figures(
    sampler: GpuSampler, what: str, start: float | None = None, end: float | None = None, memory_over_all: bool = False
) -> dict:
    """{gpu_util_WHAT, gpu_mem_WHAT_gb, gpu_samples_WHAT} over a window; peak memory over all the
    samples instead with memory_over_all (a decoding command: its model loading included)."""
    window = sampler.summary(start, end) if start is not None and end is not None else sampler.summary()
    if start is None or end is None:
        window["util"] = None  # no window: no utilisation (its idle start-up would count)
    memory = sampler.summary()["mem_gb"] if memory_over_all else window["mem_gb"]
    return {f"gpu_util_{what}": window["util"], f"gpu_mem_{what}_gb": memory, f"gpu_samples_{what}": window["samples"]}


def gpu_info() -> dict:
    """GPU 0's name and driver (nvidia-smi), torch's version and its CUDA and cuDNN versions, read
    in a child process (this one holds no CUDA context: it would count in the memory samples)."""
    done = subprocess.run(NVIDIA_SMI_INFO, capture_output=True, text=True)
    info = parse_gpu_info(done.stdout) if done.returncode == 0 and done.stdout.strip() else {}
    code = (
        "import json, torch; print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda, "
        "'cudnn': torch.backends.cudnn.version(), 'torch_device_name': torch.cuda.get_device_name(0) "
        "if torch.cuda.is_available() else None}))"
    )
    versions = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if versions.returncode == 0:
        info.update(json.loads(versions.stdout.strip().splitlines()[-1]))
    return info


# Stand-ins for what OpenNMT-py 3.5.1 imports at start-up for transforms this benchmark does not use
# (onmt/transforms/terminology.py: spacy; clean.py: fasttext). On the GPU they are not installed.
STUBBED = {"spacy": "terminology", "fasttext": "clean"}
STUB_USED = "peers.py stub used:"
STUB = '''"""Stand-in for {name}, written by benchmarks/peers.py --device cuda: OpenNMT-py 3.5.1 imports {name} at
start-up for its "{transform}" transform, which this benchmark does not use. Using it fails, and says so."""
import sys

print("peers.py stub: {name} imported (by OpenNMT-py at start-up; not used by this benchmark)", file=sys.stderr,
      flush=True)


class StubUsed(AttributeError):
    """{name} used: the {transform} transform is not available here."""


def __getattr__(attribute):
    if attribute.startswith("__"):  # introspection (copy, pickle, inspect), not a use
        raise AttributeError(attribute)
    print("{used} {name}." + attribute, file=sys.stderr, flush=True)
    raise StubUsed("{name}." + attribute + ": {name} is a stub of benchmarks/peers.py here (not installed); "
                   "the {transform} transform of OpenNMT-py is not available")
'''


def write_stubs(work: Path) -> Path:
    """WORK/stubs/{spacy,fasttext}/__init__.py; returns WORK/stubs, for the front of PYTHONPATH."""
    folder = work / "stubs"
    for name, transform in STUBBED.items():
        (folder / name).mkdir(parents=True, exist_ok=True)
        (folder / name / "__init__.py").write_text(STUB.format(name=name, transform=transform, used=STUB_USED))
    return folder


def stub_uses(*logs: Path) -> list[str]:
    """The lines of the logs that say a stub was used (none, in a valid run)."""
    found = []
    for log in logs:
        if log.exists():
            found += [line for line in log.read_text(errors="replace").splitlines() if STUB_USED in line]
    return found


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
        install_venv(
            work / "venv-opennmt", OPENNMT_DEPENDENCIES, OPENNMT_REQUIREMENTS, work / "logs" / "install-opennmt.log"
        )
    if "joeynmt" in systems:
        install_venv(work / "venv-joeynmt", JOEYNMT_REQUIREMENTS, [], work / "logs" / "install-joeynmt.log")


def venv_versions(venv: Path, packages: list[str], python: str | None = None, env: dict | None = None) -> dict:
    """The installed versions of packages in a virtual environment, from its own python (or `python`)."""
    code = (
        "import importlib.metadata as m, json, platform; "
        f"print(json.dumps({{'python': platform.python_version(), "
        f"**{{p: m.version(p) for p in {packages!r}}}}}))"
    )
    return json.loads(
        subprocess.run(
            [python or str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, check=True, env=env
        ).stdout
    )


# ---------------------------------------------------------------------------------------------- 2. anchors


def unzip_data(work: Path, data: Path = MULTI30K):
    """WORK/data/{train,val,test_2016_flickr}.{de,en}: the shared files (in `data`), unzipped byte for byte."""
    import gzip

    (work / "data").mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        for lang in ("de", "en"):
            target = work / "data" / f"{split}.{lang}"
            if not target.exists():  # written under another name first: never a partial file
                partial = target.with_suffix(target.suffix + ".partial")
                partial.write_bytes(gzip.decompress((data / f"{split}.{lang}.gz").read_bytes()))
                partial.rename(target)


def train_spm(work: Path, threads: int = THREADS):
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
        model_prefix=str(model.with_suffix("")),
        model_type="bpe",
        vocab_size=8000,
        character_coverage=1.0,
        unk_id=0,
        pad_id=1,
        bos_id=2,
        eos_id=3,
        unk_piece="<unk>",
        pad_piece="<pad>",
        bos_piece="<s>",
        eos_piece="</s>",
        num_threads=threads,
        minloglevel=2,
    )


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
    return {
        "pieces": len(pieces),
        "ordinary_pieces": len(ordinary),
        "target_tokens_per_sentence": sum(target_lengths) / len(target_lengths),
    }


def prepare_anchors(work: Path, data: Path = MULTI30K, threads: int = THREADS) -> dict:
    unzip_data(work, data)
    train_spm(work, threads)
    stats_path = work / "spm" / "stats.json"
    if not (stats_path.exists() and (work / "onmt" / "vocab.shared").exists()):
        stats_path.write_text(json.dumps(write_vocabularies(work), indent=1))
    return json.loads(stats_path.read_text())


def intervals(minutes: float, device: str = "cpu") -> dict:
    """Steps between log lines, validations and OpenNMT-py's checkpoints: the peer configurations'
    100, 500 and 500 for 20 minutes or more; for shorter budgets proportionally fewer steps between
    validations, and a checkpoint at every log line, so that OpenNMT-py has one near the end.
    On a GPU (ten times the steps of 2 CPU threads, and more) the peers' own 100 and 500 whatever
    the budget, with a checkpoint every 100 steps under 20 minutes."""
    if device == "cuda":
        return {"log": 100, "validate": 500, "save": 500 if minutes >= 20 else 100}
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


def render_configs(
    work: Path, minutes: float, joey_config: str, peer_configs: Path = PEER_CONFIGS, device: str = "cpu"
) -> dict[str, Path]:
    """WORK/configs/*.yaml from ../shared/peers (read now, never copied into the repository). On a
    GPU: OpenNMT-py's on GPU 0 (`gpu_ranks: [0]`, `world_size: 1`, translation `gpu: 0`), no JoeyNMT."""
    every = intervals(minutes, device)
    onmt_train = {
        "report_every": every["log"],
        "valid_steps": every["validate"],
        "save_checkpoint_steps": every["save"],
    }
    onmt_decode = None
    if device == "cuda":
        onmt_train.update({"gpu_ranks": [0], "world_size": 1})
        onmt_decode = {"gpu": 0}
    wanted = {
        "opennmt-train": ("opennmt-rnn_de_en.yaml", onmt_train),
        "opennmt-greedy": ("opennmt-translate_greedy.yaml", onmt_decode),
        "opennmt-beam5": ("opennmt-translate_beam5.yaml", onmt_decode),
    }
    if device == "cpu":
        joey_train = {"training.logging_freq": every["log"], "training.validation_freq": every["validate"]}
        joey_source = (peer_configs / JOEY_CONFIGS[joey_config]).read_text()
        joey_model_dir = yaml.safe_load(render(joey_source, work))["model_dir"]
        joey_decode = {"model_dir": joey_model_dir, "testing.load_model": f"{joey_model_dir}/best.ckpt"}
        wanted.update(
            {
                "joeynmt-train": (JOEY_CONFIGS[joey_config], joey_train),
                "joeynmt-beam5": ("joeynmt-translate_beam5.yaml", joey_decode),
                "joeynmt-greedy": ("joeynmt-translate_beam5.yaml", {**joey_decode, "testing.beam_size": 1}),
            }
        )
    (work / "configs").mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, (source, overrides) in wanted.items():
        paths[name] = work / "configs" / f"{name}.yaml"
        defaults = yaml.safe_load((peer_configs / source).read_text())
        changed = {k: v for k, v in (overrides or {}).items() if lookup(defaults, k) != v}
        paths[name].write_text(render((peer_configs / source).read_text(), work, changed))
    return paths


def lookup(config: dict, dotted: str):
    for key in dotted.split("."):
        if not isinstance(config, dict) or key not in config:
            return None
        config = config[key]
    return config


# ---------------------------------------------------------------------------------------------- log parsing

ONMT_STEP = re.compile(r"Step\s+(\d+)(?:/\s*\d+)?; .*?([\d.]+)/\s*([\d.]+) tok/s;\s*([\d.]+) sec")
ONMT_VALID = re.compile(r"validation BLEU: ([\d.]+)")
JOEY_TIME = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) - "
JOEY_STEP = re.compile(JOEY_TIME + r".*Epoch\s+\d+, Step:\s+(\d+), .*Tokens per Sec:\s+([\d.]+)", re.M)
JOEY_START = re.compile(JOEY_TIME + r".*EPOCH 1$", re.M)
JOEY_VALID = re.compile(r"Evaluation result \((?:greedy|beam search)\): bleu:\s+([\d.]+)")


def parse_onmt_log(text: str) -> dict:
    """OpenNMT-py's training log: the last step logged and its seconds since the training loop began,
    target tokens/s (the mean of its report lines), the validation BLEU scores by step, and the steps
    a second from its first log line to its last (the loop's start-up left out: its bucket of
    examples filled, the first kernels)."""
    steps, validation, last_step = [], [], 0
    for line in text.splitlines():
        if match := ONMT_STEP.search(line):
            last_step = int(match[1])
            steps.append((last_step, float(match[3]), float(match[4])))
        elif match := ONMT_VALID.search(line):
            validation.append({"step": last_step, "bleu": float(match[1])})
    if not steps:
        return {"steps": 0, "seconds": None, "tokens_per_s": None, "validation": validation}
    steady = (
        (steps[-1][0] - steps[0][0]) / (steps[-1][2] - steps[0][2])
        if len(steps) > 1 and steps[-1][2] > steps[0][2]
        else None
    )
    return {
        "steps": steps[-1][0],
        "seconds": steps[-1][2],
        "validation": validation,
        "tokens_per_s": sum(s[1] for s in steps) / len(steps),
        "steady_steps_per_s": steady,
    }


ONMT_TIME = r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO\] "
ONMT_TRANSLATION_TIME = re.compile(ONMT_TIME + r"Total translation time \(s\): ([\d.]+)")


def parse_onmt_translate_log(text: str) -> dict:
    """OpenNMT-py's -report_time of its last translation in a log: its decoding seconds (model loaded,
    input read as it goes, output written; 0.1 s resolution) and the wall-clock times (time.time(),
    from the log's local timestamps) of their start and end; Nones without the line."""
    found = ONMT_TRANSLATION_TIME.findall(text)
    if not found:
        return {"seconds": None, "window": None}
    stamp, seconds = found[-1]
    end = joey_time(stamp)  # the same timestamp format
    return {"seconds": float(seconds), "window": [end - float(seconds), end]}


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
    return {
        "steps": steps[-1][1],
        "seconds": steps[-1][0] - joey_time(start[1]),
        "validation": validation,
        "tokens_per_s": sum(s[2] for s in steps) / len(steps),
    }


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
        process = subprocess.Popen(
            [str(c) for c in cmd], stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    memory, started = PeakMemory(process.pid), time.monotonic()
    deadline = started + STARTUP_ALLOWANCE + 60 * minutes
    loop_seen, loop_window = False, [None, None]  # wall clock (time.time()): the GPU samples of the loop
    with left_behind_killed(process):
        while process.poll() is None and time.monotonic() < deadline:
            memory.sample()
            if not loop_seen and loop_started.search(log.read_text(errors="replace")):
                loop_seen, deadline, loop_window[0] = True, time.monotonic() + 60 * minutes, time.time()
            time.sleep(0.5)
    loop_window[1] = time.time()
    if process.poll() is None:
        memory.sample()  # the high-water marks up to the stop
        stop(process, stop_with)
    elif process.returncode != 0:
        raise failure(cmd, log, f"training ended early with status {process.returncode}")
    if not loop_seen:
        raise failure(cmd, log, f"no training loop within {STARTUP_ALLOWANCE} s")
    return {"peak_rss_gb": memory.gb, "wall_s": time.monotonic() - started, "loop_window": loop_window}


# attnmt's line right before its first training step (attnmt.translation.training.summary).
ATTNMT_LOOP = re.compile(r"parameters; [\d,]+ training pairs")


def attnmt_command(
    out: Path,
    minutes: float,
    device: str = "cpu",
    data: Path = MULTI30K,
    batch_tokens: int | None = None,
    precision: str | None = None,
) -> list:
    """benchmarks/run.py with the reference configuration, the budget and the benchmark's options."""
    cmd = [
        sys.executable,
        REPO / "benchmarks" / "run.py",
        "--config",
        REPO / "configs" / "rnn-bahdanau.yaml",
        "--minutes",
        str(minutes),
        "--threads",
        str(THREADS),
        "--out",
        out,
        "--validate-every",
        str(intervals(minutes, device)["validate"]),
    ]
    if device != "cpu" or Path(data).resolve() != MULTI30K.resolve():
        cmd += ["--device", device, "--data", Path(data).resolve()]
    if batch_tokens:
        cmd += ["--batch-tokens", str(batch_tokens)]
    if precision:
        cmd += ["--precision", precision]
    return cmd


def train_attnmt(
    work: Path,
    minutes: float,
    device: str = "cpu",
    data: Path = MULTI30K,
    name: str = "attnmt",
    batch_tokens: int | None = None,
    precision: str | None = None,
) -> dict:
    """benchmarks/run.py does attnmt's training, decoding and scoring: its results.json is the column.
    On a GPU, with the GPU's samples of its training loop (from the line before its first step, for
    the seconds its loop took) and of its two decodings (their windows, from run.py)."""
    out = work / name.replace("_", "-")
    shutil.rmtree(out, ignore_errors=True)  # run.py refuses an existing model folder
    cmd = attnmt_command(out, minutes, device, data, batch_tokens, precision)
    log, timeout = work / "logs" / f"{name}.log", 60 * minutes + DECODE_TIMEOUT + 1800
    gpu = {}
    if device == "cuda":
        # PYTHONUNBUFFERED: attnmt's lines reach the log as they are written (the loop's start is read there).
        with GpuSampler(csv=work / "logs" / f"gpu-{name}.csv") as sampler:
            run = run_watched(cmd, log, thread_env(PYTHONUNBUFFERED="1"), timeout, ATTNMT_LOOP)
    else:
        run_logged(cmd, log, env=thread_env(), timeout=timeout)
    results = json.loads((out / "results.json").read_text())
    ours, last_valid = results["attnmt"], results["validation"][-1]
    if device == "cuda":
        start = run["marker_at"]
        gpu = gpu_figures(sampler, "train", start, start and start + ours["train_seconds"])
        for search in ("greedy", "beam5"):
            gpu.update(gpu_figures(sampler, search, *results[search]["decoding_window"]))
        gpu["gpu_sampler_errors"] = sampler.errors
    return {
        "sentences_per_s": ours["sentences_per_s"],
        "tokens_per_s_reported": ours["tokens_per_s"],
        "steps": ours["steps"],
        "valid_bleu_end": last_valid["bleu"],
        "valid_step_end": last_valid["step"],
        "validation": [{"step": r["step"], "bleu": r["bleu"]} for r in results["validation"]],
        "bleu_greedy": ours["bleu_greedy"],
        "bleu_beam5": ours["bleu_beam5"],
        "chrf_beam5": ours["chrf_beam5"],
        "peak_rss_gb": ours["peak_rss_gb"],
        "precision": results["args"]["precision"],
        **{key: ours.get(key) for key in PEER_KEY if key.startswith("bleu_")},
        **loaded_and_decoding_only(ours),
        "checkpoint": "best.safetensors (best validation BLEU; attnmt also validates at the end)",
        "signature": results["beam5"]["signature"],
        "train_seconds": ours["train_seconds"],
        # sentences a step: 64, or with token batches their mean (sentences/s x seconds / steps)
        "sentences_per_s_steady": attnmt_steady(
            out / "model", ours["sentences_per_s"] * ours["train_seconds"] / ours["steps"]
        ),
        "batch_tokens": batch_tokens,
        "device": device,
        **gpu,
    }


def loaded_and_decoding_only(ours: dict) -> dict:
    """run.py's figures of decoding in its own process: decoding alone (decode_*_only) and with model
    loading (decode_*_loaded). The table's whole-command figures (decode_greedy, decode_beam5,
    decode_beam5_shortlist, ...: interpreter start-up and imports included, as for the peers' commands)
    come from decode_attnmt_commands; None until then (the token-batch run is not timed again)."""
    figures = {key: ours[key] for key in ours if key.startswith("decode_") and key.endswith("_only")}
    for key in [k for k in ours if k.startswith("decode_") and not k.endswith("_only")]:
        figures[f"{key}_loaded"], figures[key] = ours[key], None
    return figures


def cheaper_of(figures: dict) -> tuple[str, ...]:
    """The cheaper modes (CHEAPER_FLAGS) that run.py decoded with (bf16 only where the CPU has it)."""
    return tuple(q for q in CHEAPER_FLAGS if figures.get(f"bleu_beam5_{q}") is not None)


def attnmt_steady(model_dir: Path, sentences_per_step: float) -> float | None:
    """attnmt's training sentences/s from its first train record (metrics.jsonl, every log_every steps)
    to its last, as OpenNMT-py's from its first log line to its last (validations included)."""
    path = model_dir / "metrics.jsonl"
    if not path.exists():
        return None
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    train = [r for r in records if r.get("type") == "train"]
    if len(train) < 2 or train[-1]["seconds"] <= train[0]["seconds"]:
        return None
    return (train[-1]["step"] - train[0]["step"]) * sentences_per_step / (train[-1]["seconds"] - train[0]["seconds"])


CHEAPER_FLAGS = {"bf16": "--bf16", "int8": "--int8", "shortlist": "--shortlist"}  # attnmt translate's


def decode_attnmt_commands(
    work: Path, name: str = "attnmt", device: str = "cpu", cheaper: tuple[str, ...] = ()
) -> dict:
    """`python -m attnmt.cli translate` of test_2016_flickr, greedy and beam 5, batch 64 (and beam 5
    with each of attnmt's ``cheaper`` modes), each a fresh process timed whole (interpreter, imports,
    CUDA initialisation, model loading, decoding), as the peers' translate commands are; its output
    is scored too (the same as run.py's)."""
    folder = work / name.replace("_", "-")
    figures = {}
    runs = [("greedy", 1, []), ("beam5", 5, [])] + [(f"beam5_{q}", 5, [CHEAPER_FLAGS[q]]) for q in cheaper]
    for search, beam, flags in runs:
        hypotheses = folder / f"test_2016_flickr.{search}.command.en"
        cmd = [
            sys.executable,
            "-m",
            "attnmt.cli",
            "translate",
            folder / "model",
            "--device",
            device,
            "--beam",
            str(beam),
            "--batch-size",
            str(BATCH),
            *flags,
            "-i",
            work / "data" / "test_2016_flickr.de",
            "-o",
            hypotheses,
        ]
        sampler = GpuSampler(csv=work / "logs" / f"gpu-{name}-{search}-command.csv") if device == "cuda" else None
        with sampler or nullcontext():  # THREADS threads: thread_env's OMP_NUM_THREADS, which attnmt follows
            seconds = run_logged(
                cmd, work / "logs" / f"{name}-{search}-command.log", env=thread_env(), timeout=DECODE_TIMEOUT
            )
        if sampler is not None:
            figures[f"gpu_mem_{search}_command_gb"] = sampler.summary()["mem_gb"]
        scores = score(hypotheses, work)
        figures.update({f"decode_{search}": scores["sentences"] / seconds, f"bleu_{search}_command": scores["bleu"]})
    if device == "cuda":
        figures["gpu_mem_beam5_gb"] = figures["gpu_mem_beam5_command_gb"]  # the table's row: whole command
    return figures


def training_figures(parsed: dict, run: dict, log: Path) -> dict:
    if not parsed["steps"]:
        raise StepFailed(f"no training step in the log {log}:\n{tail(log)}")
    last = parsed["validation"][-1] if parsed["validation"] else {"step": None, "bleu": None}
    steady = parsed.get("steady_steps_per_s")
    return {
        "steps": parsed["steps"],
        "train_seconds": parsed["seconds"],
        "sentences_per_s": parsed["steps"] * BATCH / parsed["seconds"],
        "sentences_per_s_steady": steady * BATCH if steady else None,
        "tokens_per_s_reported": parsed["tokens_per_s"],
        "validation": parsed["validation"],
        "valid_bleu_end": last["bleu"],
        "valid_step_end": last["step"],
        **run,
    }


def onmt_env(work: Path | None = None, device: str = "cpu") -> dict:
    # OpenNMT-py's checkpoints are pickles (optimizer and options), which torch >= 2.6 refuses to load
    # by default: these are files this benchmark has just written itself, so the full load is safe.
    extra = {"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
    if device == "cuda":  # this python, with the stubs of spacy and fasttext first
        extra["PYTHONPATH"] = os.pathsep.join(p for p in (str(work / "stubs"), os.environ.get("PYTHONPATH")) if p)
    return thread_env(**extra)


def onmt_command(work: Path, program: str, device: str = "cpu") -> list:
    """OpenNMT-py's `onmt_train` or `onmt_translate`: its virtual environment's on the CPU; on a GPU
    `python -m onmt.bin.train|translate` with this python."""
    if device == "cuda":
        return [sys.executable, "-m", f"onmt.bin.{program}"]
    return [work / "venv-opennmt" / "bin" / f"onmt_{program}"]


def check_opennmt_importable(work: Path):
    """On a GPU: OpenNMT-py 3.5.1 must be importable by this python, with the stubs."""
    code = "import importlib.metadata as m, onmt.bin.train, onmt.bin.translate; print(m.version('OpenNMT-py'))"
    done = subprocess.run([sys.executable, "-c", code], env=onmt_env(work, "cuda"), capture_output=True, text=True)
    if done.returncode != 0 or done.stdout.strip().splitlines()[-1:] != ["3.5.1"]:
        raise StepFailed(
            f"OpenNMT-py 3.5.1 is not importable by {sys.executable} (found: {done.stdout.strip()!r}); "
            "install the wheels first (benchmarks/gpu_peers.sh): python3 -m pip install --no-index "
            "--no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site\n" + done.stderr[-3000:]
        )


def train_opennmt(work: Path, configs: dict, minutes: float, device: str = "cpu") -> dict:
    shutil.rmtree(work / "onmt" / "model", ignore_errors=True)  # no checkpoint of an earlier run
    log = work / "logs" / "opennmt-train.log"
    cmd = [*onmt_command(work, "train", device), "-config", configs["opennmt-train"]]
    # SIGTERM, as `timeout` sends: OpenNMT-py saves nothing then; its last checkpoint is used.
    if device == "cuda":
        with GpuSampler(csv=work / "logs" / "gpu-opennmt-train.csv") as sampler:
            run = train_for(
                cmd, log, onmt_env(work, device), minutes, re.compile("Start training loop"), signal.SIGTERM
            )
        gpu = {**gpu_figures(sampler, "train", *run["loop_window"]), "gpu_sampler_errors": sampler.errors}
    else:
        run, gpu = train_for(cmd, log, onmt_env(), minutes, re.compile("Start training loop"), signal.SIGTERM), {}
    run.pop("loop_window")
    return {**training_figures(parse_onmt_log(log.read_text(errors="replace")), run, log), **gpu}


def train_joeynmt(work: Path, configs: dict, minutes: float) -> dict:
    log = work / "logs" / "joeynmt-train.log"
    cmd = [work / "venv-joeynmt" / "bin" / "python", "-m", "joeynmt", "train", configs["joeynmt-train"], "--skip-test"]
    # SIGINT: JoeyNMT saves its weights at the budget (latest.ckpt), for when no validation made best.ckpt.
    run = train_for(cmd, log, thread_env(), minutes, JOEY_START, signal.SIGINT)
    return training_figures(parse_joey_log(log.read_text(errors="replace")), run, log)


# ---------------------------------------------------------------------------------------------- 4. decoding


def score(hypotheses_path: Path, work: Path) -> dict:
    from attnmt.data.corpus import read_lines
    from attnmt.translation.evaluation import corpus_scores

    hypotheses = read_lines(hypotheses_path)
    references = read_lines(work / "data" / "test_2016_flickr.en")
    scores = corpus_scores(hypotheses, references)
    return {
        "bleu": scores["bleu"].score,
        "chrf": scores["chrf"].score,
        "signature": scores["bleu"].signature,
        "sentences": len(references),
    }


def test_sentences(work: Path) -> int:
    from attnmt.data.corpus import read_lines

    return len(read_lines(work / "data" / "test_2016_flickr.de"))


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
    return {
        "bleu_greedy": greedy["bleu"],
        "bleu_beam5": beam5["bleu"],
        "chrf_beam5": beam5["chrf"],
        "decode_greedy": greedy["sentences"] / outputs["greedy"][1],
        "decode_beam5": beam5["sentences"] / outputs["beam5"][1],
        "signature": beam5["signature"],
    }


def decode_opennmt(work: Path, configs: dict, device: str = "cpu") -> dict:
    """Its translate command for greedy search and beam 5 (wall clock: the whole command), with
    -report_time: its own decoding seconds too (decode_*_only)."""
    checkpoint = complete_checkpoint(work / "onmt" / "model")
    outputs, extra = {}, {}
    for search in ("greedy", "beam5"):
        hypotheses, log = work / "onmt" / f"test_2016_flickr.{search}.en", work / "logs" / f"opennmt-{search}.log"
        log.unlink(missing_ok=True)  # its report of this run only
        cmd = [
            *onmt_command(work, "translate", device),
            "-config",
            configs[f"opennmt-{search}"],
            "-model",
            checkpoint,
            "-src",
            work / "data" / "test_2016_flickr.de",
            "-output",
            hypotheses,
            "-report_time",
        ]
        if device == "cuda":
            with GpuSampler(csv=work / "logs" / f"gpu-opennmt-{search}.csv") as sampler:
                outputs[search] = hypotheses, run_logged(cmd, log, env=onmt_env(work, device), timeout=DECODE_TIMEOUT)
        else:
            outputs[search] = hypotheses, run_logged(cmd, log, env=onmt_env(), timeout=DECODE_TIMEOUT)
        report = parse_onmt_translate_log(log.read_text(errors="replace"))
        if report["seconds"]:
            extra[f"decode_{search}_only"] = test_sentences(work) / report["seconds"]
        if device == "cuda":
            window = report["window"] or (None, None)
            extra.update(gpu_figures(sampler, search, *window, memory_over_all=True))
    return {"checkpoint": checkpoint.name, **decode_figures(outputs, work), **extra}


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
            outputs[search] = (
                hypotheses,
                run_logged(
                    cmd,
                    work / "logs" / f"joeynmt-{search}.log",
                    env=thread_env(),
                    stdin=source,
                    timeout=DECODE_TIMEOUT,
                    stdout=hypotheses,
                ),
            )
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
    # Like for like: each system's translate command timed whole (interpreter start-up, imports and
    # model loading included), and its decoding alone (attnmt: in benchmarks/run.py's process;
    # OpenNMT-py: its own -report_time; JoeyNMT reports none).
    ("decode sent/s greedy, batch 64, whole command", "decode_greedy", "{:.0f}"),
    ("decode sent/s beam 5, batch 64, whole command", "decode_beam5", "{:.0f}"),
    ("decode sent/s greedy, batch 64, decoding only", "decode_greedy_only", "{:.0f}"),
    ("decode sent/s beam 5, batch 64, decoding only", "decode_beam5_only", "{:.0f}"),
    # attnmt's opt-in cheaper inference (benchmarks/run.py decodes with both); the peers decode in
    # float32 only on CPUs, so their float32 figure stands in these rows and their ratios.
    ("test_2016 BLEU beam 5, attnmt --bf16 (bf16 output layer; peers: float32)", "bleu_beam5_bf16", "{:.1f}"),
    ("decode sent/s beam 5, batch 64, attnmt --bf16, whole command (peers: float32)", "decode_beam5_bf16", "{:.0f}"),
    ("decode sent/s beam 5, batch 64, attnmt --bf16, decoding only", "decode_beam5_bf16_only", "{:.0f}"),
    ("test_2016 BLEU beam 5, attnmt --int8 (int8 linear layers; peers: float32)", "bleu_beam5_int8", "{:.1f}"),
    ("decode sent/s beam 5, batch 64, attnmt --int8, whole command (peers: float32)", "decode_beam5_int8", "{:.0f}"),
    ("decode sent/s beam 5, batch 64, attnmt --int8, decoding only", "decode_beam5_int8_only", "{:.0f}"),
    (
        "test_2016 BLEU beam 5, attnmt --shortlist (float32, output layer on likely pieces; peers: full)",
        "bleu_beam5_shortlist",
        "{:.1f}",
    ),
    (
        "decode sent/s beam 5, batch 64, attnmt --shortlist, whole command (peers: full vocabulary)",
        "decode_beam5_shortlist",
        "{:.0f}",
    ),
    ("decode sent/s beam 5, batch 64, attnmt --shortlist, decoding only", "decode_beam5_shortlist_only", "{:.0f}"),
    ("training peak RSS GB (lower is better)", "peak_rss_gb", "{:.2f}"),
    ("machine speed before the system, GFLOP/s (64×512×1536 fp32 products)", "probe_gflops_before", "{:.0f}"),
    ("machine speed after the system, GFLOP/s", "probe_gflops_after", "{:.0f}"),
]


# On a GPU (--device cuda): the same figures, decoding twice (decoding only; the whole command), and
# nvidia-smi's (mean utilisation over the training loop and over the beam-5 decoding, peak memory).
GPU_ROWS = [
    ("training sentences/s", "sentences_per_s", "{:.0f}"),
    (
        "training sentences/s from the first log line on (the loop's start-up left out)",
        "sentences_per_s_steady",
        "{:.0f}",
    ),
    ("training target tokens/s, as the system reports", "tokens_per_s_reported", "{:,.0f}"),
    ("training target tokens/s, spm8k pieces + </s> of train.en", "tokens_per_s_counted", "{:,.0f}"),
    ("steps", "steps", "{:,}"),
    ("GPU utilisation while training, mean % (nvidia-smi every 0.5 s)", "gpu_util_train", "{:.0f}"),
    ("GPU memory while training, peak GB (nvidia-smi memory.used; lower is better)", "gpu_mem_train_gb", "{:.1f}"),
    ("validation BLEU at the end (last validation)", "valid_bleu_end", "{:.1f}"),
    ("test_2016 BLEU greedy", "bleu_greedy", "{:.1f}"),
    ("test_2016 BLEU beam 5", "bleu_beam5", "{:.1f}"),
    ("test_2016 chrF beam 5", "chrf_beam5", "{:.1f}"),
    ("decode sent/s greedy, batch 64, decoding only", "decode_greedy_only", "{:.0f}"),
    ("decode sent/s beam 5, batch 64, decoding only", "decode_beam5_only", "{:.0f}"),
    ("decode sent/s greedy, batch 64, whole command (start-up and model loading included)", "decode_greedy", "{:.0f}"),
    ("decode sent/s beam 5, batch 64, whole command (start-up and model loading included)", "decode_beam5", "{:.0f}"),
    ("GPU utilisation decoding beam 5, mean % (decoding only)", "gpu_util_beam5", "{:.0f}"),
    ("GPU memory decoding beam 5, peak GB (whole command; lower is better)", "gpu_mem_beam5_gb", "{:.1f}"),
    ("training peak RSS GB (lower is better)", "peak_rss_gb", "{:.2f}"),
]


PEER_KEY = {
    **{f"{figure}_beam5_{q}": f"{figure}_beam5" for q in CHEAPER_FLAGS for figure in ("bleu", "decode")},
    **{f"decode_beam5_{q}_only": "decode_beam5_only" for q in CHEAPER_FLAGS},
}


def ratio(ours, theirs) -> str:
    if ours is None or not theirs:
        return "—"
    return f"{ours / theirs:.2f}"


def title(name: str, figures: dict) -> str:
    if name == "attnmt_tokens" and figures.get("batch_tokens"):
        return f"attnmt, batch_tokens {figures['batch_tokens']:,}"
    return TITLES[name]


def table(systems: dict[str, dict], rows: list | None = None) -> str:
    """The markdown table: one row a figure; columns attnmt (and its token-batch run), the peers,
    then each attnmt column / each peer."""
    present = [s for s in SYSTEMS if s in systems]
    ours = [s for s in present if s.startswith("attnmt")]
    peers = [s for s in present if not s.startswith("attnmt")]
    header = [
        "figure",
        *(title(s, systems[s]) for s in present),
        *(f"{SHORT[o]} / {SHORT[p]}" for o in ours for p in peers),
    ]
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for label, key, fmt in rows or ROWS:
        values = [systems[s].get(key if s in ours else PEER_KEY.get(key, key)) for s in present]
        cells = [fmt.format(v) if v is not None else "—" for v in values]
        cells += [ratio(systems[o].get(key), systems[p].get(PEER_KEY.get(key, key))) for o in ours for p in peers]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def machine() -> dict:
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
    return {
        "nproc": os.cpu_count(),
        "cpu": model[1] if model else platform.processor(),
        "threads": THREADS,
        "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
    }


def versions(work: Path, systems: list[str], device: str = "cpu") -> dict:
    import sacrebleu
    import sentencepiece
    import torch

    import attnmt

    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    found = {
        "attnmt": {
            "version": attnmt.__version__,
            "commit": commit.stdout.strip() or None,
            "python": platform.python_version(),
            "torch": torch.__version__,
            "sacrebleu": sacrebleu.__version__,
            "sentencepiece": sentencepiece.__version__,
        }
    }
    if "opennmt" in systems:
        found["opennmt"] = venv_versions(
            work / "venv-opennmt",
            ["OpenNMT-py", "torch", "sentencepiece", "sacrebleu"],
            *((sys.executable, onmt_env(work, device)) if device == "cuda" else ()),
        )
    if "joeynmt" in systems:
        found["joeynmt"] = venv_versions(work / "venv-joeynmt", ["joeynmt", "torch", "sentencepiece", "sacrebleu"])
    return found


def earlier_systems(work: Path) -> dict:
    """The figures of the last run (WORK/results.json), updated by those of a run stopped since then
    (WORK/results.partial.json, written after each system)."""
    path, partial = work / "results.json", work / "results.partial.json"
    earlier = json.loads(path.read_text())["systems"] if path.exists() else {}
    if partial.exists() and (not path.exists() or partial.stat().st_mtime > path.stat().st_mtime):
        earlier.update(json.loads(partial.read_text())["systems"])
    return earlier


def save_results(work: Path, args, systems: dict, anchors: dict, ran: list[str]) -> dict:
    """WORK/results.json; the figures of systems not run this time (--only) are kept from the last one
    (or from a stopped run's results.partial.json, if that is newer)."""
    path, earlier = work / "results.json", earlier_systems(work)
    merged = {s: systems.get(s, earlier.get(s)) for s in SYSTEMS if s in systems or s in earlier}
    results = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join(["python", *sys.argv]),
        "minutes": args.minutes,
        "device": args.device,
        "intervals": intervals(args.minutes, args.device),
        "joey_config": JOEY_CONFIGS[args.joey_config],
        "machine": machine(),
        "versions": versions(work, ran, args.device),
        "anchors": anchors,
        "ran": ran,
        "data": str(args.data),
        "peer_configs": str(args.peer_configs),
        "systems": merged,
    }
    if args.device == "cuda":
        results["gpu"] = gpu_info()
        results["stubs"] = {
            "modules": sorted(STUBBED),
            "folder": str(work / "stubs"),
            "uses": stub_uses(*sorted((work / "logs").glob("opennmt-*.log"))),
        }
    path.write_text(json.dumps(results, indent=2))
    return results


# ---------------------------------------------------------------------------------------------- main


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--minutes",
        type=float,
        default=20.0,
        help="training budget of each system, wall clock of its training loop (default 20)",
    )
    parser.add_argument(
        "--only",
        default=None,
        help="comma-separated subset of attnmt,attnmt_tokens (the token-batch run),opennmt,joeynmt "
        "(default: all, attnmt_tokens if --batch-tokens; with --device cuda: no joeynmt)",
    )
    parser.add_argument(
        "--device",
        choices=DEVICES,
        default="cpu",
        help="cpu (default; 2 threads a system) or cuda: attnmt and OpenNMT-py on GPU 0, with this "
        "python and no virtual environments (see benchmarks/gpu_peers.sh)",
    )
    parser.add_argument(
        "--work", default=None, help="work folder (default runs/peers; with --device cuda runs/peers-cuda)"
    )
    parser.add_argument(
        "--data",
        default=str(MULTI30K),
        help="folder of the Multi30k files train, val, test_2016_flickr .de/.en .gz (default ../shared/data/multi30k)",
    )
    parser.add_argument(
        "--peer-configs",
        default=str(PEER_CONFIGS),
        help="folder of the peers' configurations (default ../shared/peers)",
    )
    parser.add_argument(
        "--batch-tokens",
        type=int,
        default=None,
        help="also train attnmt with data.batch_tokens N (a column beside its 64-sentence batches); "
        f"0: not (default {BATCH_TOKENS:,} with --device cuda, 0 on the CPU)",
    )
    parser.add_argument(
        "--attnmt-precision",
        choices=["fp32", "bf16"],
        default=None,
        help="attnmt's training precision (default: benchmarks/run.py's: bf16 on CPUs with bf16 units, else fp32)",
    )
    parser.add_argument("--skip-install", action="store_true", help="use the virtual environments as they are")
    parser.add_argument(
        "--decode-only",
        action="store_true",
        help="CPU: decode the models of the last run in WORK again, one system after the other "
        "(the training figures kept; decoding speed is the noisier figure)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="with --decode-only: decode N times, the systems taking turns in each round; each "
        "speed is the best of the N (each round's figures are kept in results.json)",
    )
    parser.add_argument(
        "--joey-config",
        choices=sorted(JOEY_CONFIGS),
        default="default",
        help="JoeyNMT's configuration: default (xavier init, as JoeyNMT ships) or uniform-init",
    )
    args = parser.parse_args(argv)
    if args.batch_tokens is None:
        args.batch_tokens = BATCH_TOKENS if args.device == "cuda" else 0
    if args.batch_tokens < 0:
        parser.error("--batch-tokens: 0 (no token-batch run) or more")
    allowed = [s for s in SYSTEMS if s in (CHOICES if args.device == "cpu" else GPU_SYSTEMS) or s == "attnmt_tokens"]
    if args.only is None:  # all, the token-batch run of attnmt if --batch-tokens
        args.only = ",".join(s for s in allowed if s != "attnmt_tokens" or args.batch_tokens)
    args.systems = [s.strip() for s in args.only.split(",") if s.strip()]
    if unknown := set(args.systems) - set(allowed):
        parser.error(
            f"--only: {', '.join(sorted(unknown))} not with --device {args.device}; choose among {', '.join(allowed)}"
        )
    if "attnmt_tokens" in args.systems and not args.batch_tokens:
        parser.error("--only attnmt_tokens: give --batch-tokens N")
    if args.decode_only and (args.device != "cpu" or "attnmt_tokens" in args.systems):
        parser.error("--decode-only: on the CPU, and not for attnmt_tokens")
    if args.rounds < 1 or (args.rounds > 1 and not args.decode_only):
        parser.error("--rounds: 1 or more, and more than 1 only with --decode-only")
    args.work = args.work or str(REPO / "runs" / ("peers" if args.device == "cpu" else "peers-cuda"))
    args.data, args.peer_configs = Path(args.data).resolve(), Path(args.peer_configs).resolve()
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


# run.py's scores of its outputs; its decoding speeds come through loaded_and_decoding_only
SCORE_KEYS = ("bleu_greedy", "bleu_beam5", "chrf_beam5", *(f"bleu_beam5_{q}" for q in CHEAPER_FLAGS))


def decode_again(name: str, work: Path, configs: dict, earlier: dict) -> dict:
    """--decode-only: the system's figures of the last run with its decoding measured anew (the same
    models, commands and test set), between two probes of the machine's speed."""
    if name not in earlier:
        raise StepFailed(f"--decode-only: {name} has no figures in {work}/results.json: train it first")
    print(f"{title(name, earlier[name])}: decoding test_2016_flickr again (logs in {work / 'logs'})", flush=True)
    probe_before = machine_speed()
    if name == "attnmt":
        out = work / "attnmt"
        run_logged(
            [
                sys.executable,
                REPO / "benchmarks" / "run.py",
                "--config",
                REPO / "configs" / "rnn-bahdanau.yaml",
                "--threads",
                str(THREADS),
                "--out",
                out,
                "--decode-only",
            ],
            work / "logs" / "attnmt-decode.log",
            env=thread_env(),
            timeout=DECODE_TIMEOUT * 6,
        )
        ours = json.loads((out / "results.json").read_text())["attnmt"]
        decoded = {**{key: ours[key] for key in SCORE_KEYS if key in ours}, **loaded_and_decoding_only(ours)}
        decoded.update(decode_attnmt_commands(work, name, "cpu", cheaper_of(decoded)))
    elif name == "opennmt":
        decoded = decode_opennmt(work, configs)
    else:
        decoded = decode_joeynmt(work, configs)
    return {
        **earlier[name],
        **decoded,
        "probe_gflops_before": probe_before,
        "probe_gflops_after": machine_speed(),
        "decoded_again": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def best_of_rounds(best: dict | None, latest: dict) -> dict:
    """--decode-only --rounds N: the latest round's figures, but each decoding speed (decode_*,
    sentences/s) the best of the rounds so far, as timeit keeps its best: on a shared machine a slow
    round measures the neighbours. Every round's speeds are kept under "rounds"."""
    speeds = {key: value for key, value in latest.items() if key.startswith("decode_") and value is not None}
    rounds = (best or {}).get("rounds", []) + [
        {
            **speeds,
            "probe_gflops_before": latest["probe_gflops_before"],
            "probe_gflops_after": latest["probe_gflops_after"],
        }
    ]
    merged = {**latest, "rounds": rounds}
    for key in speeds:
        merged[key] = max(r[key] for r in rounds if r.get(key) is not None)
    return merged


def run_system(name: str, work: Path, configs: dict, args, per_sentence: float) -> dict:
    minutes, device = args.minutes, args.device
    what = title(name, {"batch_tokens": args.batch_tokens})
    print(f"{what}: training {minutes:g} min, then decoding test_2016_flickr (logs in {work / 'logs'})", flush=True)
    started = time.monotonic()
    probe_before = machine_speed() if device == "cpu" else None  # the CPU's speed: not what a GPU run measures
    if name.startswith("attnmt"):
        tokens = args.batch_tokens if name == "attnmt_tokens" else None
        figures = train_attnmt(work, minutes, device, args.data, name, tokens, args.attnmt_precision)
        if name == "attnmt":  # the token-batch run decodes the same way: not timed again
            figures.update(decode_attnmt_commands(work, name, device, cheaper_of(figures)))
    elif name == "opennmt":
        figures = {**train_opennmt(work, configs, minutes, device), **decode_opennmt(work, configs, device)}
    else:
        figures = {**train_joeynmt(work, configs, minutes), **decode_joeynmt(work, configs)}
    if device == "cpu":
        figures["probe_gflops_before"], figures["probe_gflops_after"] = probe_before, machine_speed()
    figures["tokens_per_s_counted"] = figures["sentences_per_s"] * per_sentence
    figures["minutes"] = minutes
    figures["load_average"] = [round(x, 2) for x in os.getloadavg()]  # 1, 5, 15 min: others' work on the cores
    figures["measured"] = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    figures["step_seconds"] = round(time.monotonic() - started, 1)  # this system's part of the run, all in
    print(f"  {what}: done in {figures['step_seconds']:.0f} s", flush=True)
    return figures


def check_requirements(args, work: Path):
    """Everything the run needs, for the systems and options given, checked before anything starts
    (benchmarks/requirements.py): one message naming what to install, and exit status 2."""
    from requirements import check, cuda, distribution, extra, files, multi30k, path

    cpu, peers = args.device == "cpu", [s for s in args.systems if not s.startswith("attnmt")]
    configs = ["opennmt-rnn_de_en.yaml", "opennmt-translate_greedy.yaml", "opennmt-translate_beam5.yaml"]
    if "joeynmt" in args.systems:
        configs += [JOEY_CONFIGS[args.joey_config], "joeynmt-translate_beam5.yaml"]
    needs = [
        multi30k(args.data, [f"{split}.{lang}.gz" for split in SPLITS for lang in ("de", "en")]),
        files(
            args.peer_configs,
            configs,
            "the peers' configurations (--peer-configs)",
            f"the peers' configurations: see {PEER_CONFIGS / 'README.md'}",
        ),
    ]
    # On the CPU run.py also decodes with --shortlist, whose table `attnmt shortlist` builds first
    # (once: --decode-only finds it made), aligning the training corpus with eflomal.
    made = args.decode_only and (work / "attnmt" / "model" / "shortlist.json").is_file()
    if cpu and "attnmt" in args.systems and not made:
        needs.append(extra("experiments", "eflomal", "attnmt's decoding with --shortlist (`attnmt shortlist`)"))
    if cpu and args.skip_install:
        needs += [
            path(
                work / f"venv-{peer}" / "bin" / "python",
                f"{TITLES[peer]}'s virtual environment (--skip-install)",
                "run without --skip-install: it makes the peers' virtual environments",
            )
            for peer in peers
        ]
    if args.decode_only:
        trained = {
            "attnmt": work / "attnmt" / "results.json",
            "opennmt": work / "onmt" / "model",
            "joeynmt": work / "joey",
        }
        needs += [
            path(trained[name], f"{TITLES[name]}'s model (--decode-only)", "train first: run without --decode-only")
            for name in args.systems
        ]
    if not cpu:
        needs.append(cuda("--device cuda: attnmt and OpenNMT-py train on GPU 0"))
        if "opennmt" in peers:  # with this python, from the wheels of benchmarks/gpu_peers.sh
            needs.append(
                distribution(
                    "OpenNMT-py",
                    "3.5.1",
                    "--device cuda: OpenNMT-py runs with this python",
                    "install the wheels first (benchmarks/gpu_peers.sh): python3 -m pip install --no-index "
                    "--no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site",
                )
            )
    check("benchmarks/peers.py", *needs)


def main(argv=None):
    args = parse_args(argv)
    work = Path(args.work).resolve()
    check_requirements(args, work)
    began = time.monotonic()
    signal.signal(signal.SIGTERM, terminated)
    try:
        peers = [s for s in args.systems if not s.startswith("attnmt")]
        if args.device == "cuda":
            write_stubs(work)
            if peers:
                check_opennmt_importable(work)
        else:
            if peers and not args.skip_install:
                install_peers(work, peers)
            for peer in peers:
                if not (work / f"venv-{peer}" / "bin" / "python").exists():
                    raise StepFailed(f"{work}/venv-{peer} is missing: run without --skip-install")
        # On a GPU the machine is the run's own: sentencepiece learns on all its cores (not timed).
        anchors = prepare_anchors(work, args.data, THREADS if args.device == "cpu" else os.cpu_count() or THREADS)
        configs = render_configs(work, args.minutes, args.joey_config, args.peer_configs, args.device)
        print(
            f"prepared in {time.monotonic() - began:.0f} s (data, sentencepiece model, vocabularies, configs in "
            f"{work})",
            flush=True,
        )
        systems, carried = {}, earlier_systems(work)
        for _ in range(args.rounds):
            for name in (s for s in SYSTEMS if s in args.systems):
                if args.decode_only:
                    systems[name] = best_of_rounds(systems.get(name), decode_again(name, work, configs, carried))
                else:
                    systems[name] = run_system(name, work, configs, args, anchors["target_tokens_per_sentence"])
                # each system's figures as soon as they are measured (results.json comes at the end)
                (work / "results.partial.json").write_text(
                    json.dumps(
                        {"command": " ".join(["python", *sys.argv]), "systems": {**carried, **systems}}, indent=2
                    )
                )
    except StepFailed as e:
        sys.exit(f"peers.py: {e}")
    results = save_results(work, args, systems, anchors, args.systems)
    if args.device == "cuda":
        gpu = results["gpu"]
        print(
            f"\nMulti30k de-en, {args.minutes:g} min of training per system, on {gpu.get('gpu')} (driver "
            f"{gpu.get('driver')}, torch {gpu.get('torch')}, CUDA {gpu.get('cuda')}); {results['date']}; "
            f"{results['machine']['cpu']} ({results['machine']['nproc']} cores), {THREADS} threads; "
            f"{time.monotonic() - began:.0f} s in all"
        )
    else:
        print(
            f"\nMulti30k de-en, {args.minutes:g} min of training per system, {THREADS} threads; "
            f"{results['date']}; {results['machine']['cpu']} ({results['machine']['nproc']} cores)"
        )
    for name, figures in results["systems"].items():
        note = "" if name in args.systems else f"; from an earlier run ({figures['measured']})"
        print(
            f"  {title(name, figures)}: validation BLEU by step "
            + (", ".join(f"{v['step']}: {v['bleu']:.1f}" for v in figures["validation"]) or "none")
            + f"; decoded with {figures.get('checkpoint', 'its best checkpoint')}"
            + f"; load average at the end {figures['load_average'][0]:.1f}"
            + note
            + (f"; decoded again {figures['decoded_again']}" if figures.get("decoded_again") else "")
        )
    if args.device == "cuda" and "opennmt" in args.systems:
        uses = results["stubs"]["uses"]
        print(
            f"  stubs {', '.join(sorted(STUBBED))}: "
            + (
                "imported by OpenNMT-py, never used (no '" + STUB_USED + "' line in its logs)"
                if not uses
                else "USED, see the logs: " + "; ".join(uses)
            )
        )
    print(table(results["systems"], GPU_ROWS if args.device == "cuda" else ROWS))
    if args.rounds > 1:  # the spread behind each best-of figure
        for name in args.systems:
            rounds = results["systems"][name]["rounds"]
            print(
                f"  {name}, sentences/s by round (the table: the best): "
                + "; ".join(
                    f"{key} " + " / ".join(f"{r[key]:.0f}" if r.get(key) else "-" for r in rounds)
                    for key in rounds[0]
                    if key.startswith("decode_")
                )
            )
    print(
        f"\nratios: attnmt / peer; above 1 is better for attnmt except where lower is better. {work / 'results.json'}"
    )


if __name__ == "__main__":
    main()
