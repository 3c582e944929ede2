"""What a benchmark needs, checked before it does anything: Python packages (attnmt's extras among
them), data files and folders, programs, trained models, the peers' environments, a CUDA GPU.

A benchmark that finds out half-way that something is missing has wasted its hour (peers.py trained
attnmt for 20 minutes, then died in `attnmt shortlist` for want of eflomal). So each script lists
what it needs at the start of its main(), after parsing its options (they decide what it needs) and
before any download, install, training or decoding:

    from requirements import check, extra, multi30k, program

    check(
        "benchmarks/peers.py",
        multi30k(args.data, ["train.de.gz", "train.en.gz"]),
        extra("experiments", "eflomal", "`attnmt shortlist` aligns the training corpus with it"),
        program("espeak-ng", "synthesizes the spoken corpus", apt="espeak-ng") if speech else None,
    )

Each declaration returns what is missing (a `Missing`, a list of them, or None when all is there);
`check` gathers everything missing into one message on standard error, naming what to install, and
exits with status 2 (as argparse does for wrong options), without a traceback. Only the standard
library: the GPU scripts run it with a bare python3 before they install their wheels.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
# Where a corpus of the shared data comes from (also for a user without that folder)
SHARED_README = f"the shared data (Multi30k, Hansards, SICK, spoken digits): see {SHARED_DATA / 'README.md'}"


@dataclass(frozen=True)
class Missing:
    """One thing a benchmark needs and does not find: what it is, what the benchmark does with it,
    and how to get it: a pip requirement, a Debian package, or a sentence of advice."""

    what: str
    why: str = ""
    pip: str | None = None
    apt: str | None = None
    advice: str | None = None


def module(name: str, why: str = "", pip: str | None = None) -> Missing | None:
    """A Python module, importable by this python (found, not imported: importing may take long);
    installed with `pip install <pip>` (default: its name)."""
    # importlib.util.find_spec looked up at each call, so that a test can hide a module.
    if importlib.util.find_spec(name) is None:
        return Missing(f"the Python package {name}", why, pip=pip or name)
    return None


def extra(name: str, module_name: str, why: str = "") -> Missing | None:
    """A module of one of attnmt's optional extras (pyproject.toml): `pip install 'attnmt[name]'`."""
    return module(module_name, why, pip=f"attnmt[{name}]")


def distribution(name: str, version: str, why: str = "", advice: str | None = None) -> Missing | None:
    """An installed distribution of exactly this version (its metadata read, nothing imported)."""
    try:
        found = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        found = None
    if found == version:
        return None
    seen = f" (found {found})" if found else ""
    return Missing(f"{name} {version}{seen}", why, pip=None if advice else f"{name}=={version}", advice=advice)


def program(name: str, why: str = "", apt: str | None = None, advice: str | None = None) -> Missing | None:
    """A program on the PATH; from the Debian package `apt` if given."""
    if shutil.which(name) is None:
        return Missing(f"the program {name} (not on the PATH)", why, apt=apt, advice=advice)
    return None


def data_advice(place: Path, advice: str | None) -> str | None:
    """`advice`, or for a place in the shared data its README (where each corpus comes from)."""
    return advice or (SHARED_README if place.is_relative_to(SHARED_DATA) else None)


def path(place: str | Path, why: str = "", advice: str | None = None) -> Missing | None:
    """A file or folder."""
    place = Path(place).resolve()
    if place.exists():
        return None
    return Missing(str(place), why, advice=data_advice(place, advice))


def files(folder: str | Path, names: Iterable[str], why: str = "", advice: str | None = None) -> list[Missing]:
    """Files of one folder: the folder alone if it is not there (not each of its files), else each
    file that is not."""
    folder = Path(folder).resolve()
    advice = data_advice(folder, advice)
    if not folder.is_dir():
        return [Missing(f"the folder {folder}", why, advice=advice)]
    return [Missing(str(folder / name), why, advice=advice) for name in names if not (folder / name).is_file()]


def multi30k(folder: str | Path, names: Iterable[str], option: str = "--data") -> list[Missing]:
    """Multi30k's files (train, val, test_2016_flickr .gz) in the folder of `option`: the shared
    data's README says where they come from, wherever that folder is."""
    return files(folder, names, f"Multi30k ({option})", SHARED_README)


def any_file(folder: str | Path, pattern: str, why: str = "", advice: str | None = None) -> Missing | None:
    """At least one file of a folder matching a glob pattern ("*.whl")."""
    folder = Path(folder).resolve()
    if any(folder.glob(pattern)):
        return None
    return Missing(f"{folder / pattern} (no such file)", why, advice=data_advice(folder, advice))


def trained_model(folder: str | Path, why: str = "a trained model", advice: str | None = None) -> Missing | None:
    """A trained model's folder, as attnmt.load reads it (config.yaml and best.safetensors or
    last.safetensors), made by an earlier command that `advice` names."""
    folder = Path(folder).resolve()
    weights = any((folder / name).is_file() for name in ("best.safetensors", "last.safetensors"))
    if weights and (folder / "config.yaml").is_file():
        return None
    return Missing(f"{folder} (no trained model there: config.yaml and weights)", why, advice=advice)


# Probed in a child process by default: peers.py and run.py make no CUDA call of their own before
# their timed commands (peers.py samples the GPU's memory, which a context of its own would count).
CUDA_PROBE = "import torch; print(torch.cuda.is_available(), torch.__version__, torch.version.cuda)"


def cuda(why: str = "--device cuda", in_child: bool = True) -> Missing | None:
    """An NVIDIA GPU that torch can use: torch of this python, asked in a child process (or in this
    one, for a script that uses the GPU itself anyway)."""
    if shutil.which("nvidia-smi") is None:
        return Missing(
            "an NVIDIA GPU (nvidia-smi, its driver's tool, is not on the PATH)",
            why,
            advice="run it on a machine with an NVIDIA GPU and its driver",
        )
    if in_child:
        try:
            done = subprocess.run([sys.executable, "-c", CUDA_PROBE], capture_output=True, text=True, timeout=300)
            answer = done.stdout.split() if done.returncode == 0 else ["False", "(does not import)"]
        except (OSError, subprocess.TimeoutExpired) as e:
            answer = ["False", f"({type(e).__name__})"]
    else:
        import attnmt  # noqa: F401 (before torch: attnmt.core.threads.configure_waiting)
        import torch

        answer = [str(torch.cuda.is_available()), torch.__version__, str(torch.version.cuda)]
    if answer[0] == "True":
        return None
    return Missing(
        f"a GPU that torch can use (torch.cuda.is_available() is False; torch {' '.join(answer[1:])})",
        why,
        advice="a torch built for CUDA (https://pytorch.org/get-started/locally/), on a machine with an NVIDIA GPU",
    )


def gathered(needs: Iterable, missing: dict | None = None) -> list[Missing]:
    """The Missing of the declarations, lists (of lists) flattened, Nones (found) left out, each
    thing once (a folder that two declarations read is named once, with the first one's reason)."""
    missing = {} if missing is None else missing
    for need in needs:
        if isinstance(need, Missing):
            missing.setdefault(need.what, need)
        elif need is not None:
            gathered(need, missing)
    return list(missing.values())


def pip_command(requirements: list[str]) -> str:
    """One `pip install` of all the requirements, attnmt's extras as one: 'attnmt[ct2,experiments]'."""
    extras = sorted({r[len("attnmt[") : -1] for r in requirements if r.startswith("attnmt[")})
    others = [r for r in requirements if not r.startswith("attnmt[")]
    chosen = ([f"attnmt[{','.join(extras)}]"] if extras else []) + others
    return "pip install " + " ".join(shlex.quote(r) for r in chosen)


def message(script: str, missing: list[Missing]) -> str:
    """The one message: each thing missing (what for), then what to install or do."""
    lines = [f"{script}: {len(missing)} thing{'s' * (len(missing) > 1)} missing; nothing was started:"]
    lines += [f"  - {m.what}" + (f": {m.why}" if m.why else "") for m in missing]
    pips = list(dict.fromkeys(m.pip for m in missing if m.pip))
    apts = list(dict.fromkeys(m.apt for m in missing if m.apt))
    todo = [pip_command(pips)] if pips else []
    todo += [f"sudo apt-get install {' '.join(apts)}"] if apts else []
    todo += list(dict.fromkeys(m.advice for m in missing if m.advice))
    if todo:
        lines.append("To install (or make) them, then run the command again:")
        lines += [f"  {line}" for line in todo]
    return "\n".join(lines)


def check(script: str, *needs: Missing | None | Iterable):
    """Returns if nothing is missing; else prints the one message and exits with status 2."""
    if missing := gathered(needs):
        print(message(script, missing), file=sys.stderr, flush=True)
        raise SystemExit(2)
