"""Every benchmark checks what it needs before any work (benchmarks/requirements.py): one message
naming what to install, exit status 2, no traceback, nothing started.

Something is taken away from each script: a Python module hidden (importlib.util.find_spec answers
None for it, as for a package not installed; in a child process by a sitecustomize), a program by a
PATH without it, a data folder by an option naming a folder that is not there. Each script would
train, install or write first if its check let it through: the folders it would make under tmp_path
must not be there afterwards, and its first steps fail the test if they are called. The scripts
whose start is light (peers.py, load_test.py, the shell scripts) run as commands; the others, which
import torch, run their main() in this process, where torch is imported already."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"

# Imported by every python of a child process whose PYTHONPATH holds its folder.
HIDING = """
import importlib.util, os

_hidden = set(filter(None, os.environ.get("HIDDEN_MODULES", "").split(",")))
_find_spec = importlib.util.find_spec


def find_spec(name, package=None):
    return None if name.split(".")[0] in _hidden else _find_spec(name, package)


importlib.util.find_spec = find_spec
"""


@pytest.fixture
def run(tmp_path):
    """run(script, *args, hidden=(), path=None, cwd=REPO): the script (benchmarks/X.py with this
    python, X.sh with bash) with the modules `hidden` and, if `path` is given, that PATH alone."""
    hiding = tmp_path / "hiding"
    hiding.mkdir()
    (hiding / "sitecustomize.py").write_text(HIDING)

    def run_script(script, *args, hidden=(), path=None, cwd=REPO, env=None):
        script = Path(script)
        pythonpath = os.pathsep.join(p for p in (str(hiding), os.environ.get("PYTHONPATH")) if p)
        environment = {**os.environ, "PYTHONPATH": pythonpath, "HIDDEN_MODULES": ",".join(hidden), **(env or {})}
        if path is not None:
            environment["PATH"] = os.pathsep.join(str(p) for p in path)
        command = [shutil.which("bash") if script.suffix == ".sh" else sys.executable, str(script), *map(str, args)]
        return subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=environment, timeout=300)

    return run_script


def stopped(done: subprocess.CompletedProcess, *expected: str) -> str:
    """Asserts that the run stopped in its check, in one message naming each of `expected`."""
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr[-3000:])
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("missing; nothing was started") == 1, done.stderr
    for text in expected:
        assert text in done.stderr, (text, done.stderr)
    return done.stderr


@pytest.fixture
def requirements(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import requirements

    return requirements


def script(name: str):
    """benchmarks/NAME.py loaded as a module, to call its main() in this process."""
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stops(main, argv: list, capsys, *expected: str) -> str:
    """main(argv) stops in its check with status 2 and one message naming each of `expected`."""
    with pytest.raises(SystemExit) as stop:
        main([str(a) for a in argv])
    assert stop.value.code == 2
    message = capsys.readouterr().err
    assert message.count("missing; nothing was started") == 1, message
    for text in expected:
        assert text in message, (text, message)
    return message


def work_started(*args, **kwargs):
    pytest.fail("work started before the check")


def hide(monkeypatch, *names):
    """importlib.util.find_spec of this process answers None for `names`, as for packages not installed."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in names else real(name, *a))


# ---------------------------------------------------------------------------------------------- the module


def test_everything_missing_is_said_in_one_message_with_one_command_of_each_kind(
    requirements, tmp_path, monkeypatch, capsys
):
    hide(monkeypatch, "eflomal", "gensim")
    monkeypatch.setenv("PATH", str(tmp_path))  # no program at all
    (tmp_path / "present.gz").write_text("")
    with pytest.raises(SystemExit) as stop:
        requirements.check(
            "benchmarks/x.py",
            requirements.extra("experiments", "eflomal", "aligns"),
            requirements.extra("vectors", "gensim", "word2vec"),
            requirements.module("json"),  # there: not named
            requirements.program("espeak-ng", "speaks", apt="espeak-ng"),
            requirements.program("chromium", "draws the explorer", apt="chromium"),
            requirements.files(tmp_path / "nowhere", ["a.gz", "b.gz"], "the corpus (--data)"),
            [requirements.files(tmp_path, ["present.gz", "absent.gz"], "the test set"), None],
        )
    assert stop.value.code == 2
    message = capsys.readouterr().err
    assert message.splitlines()[0] == "benchmarks/x.py: 6 things missing; nothing was started:"
    assert "  - the Python package eflomal: aligns" in message and "the Python package json" not in message
    assert "  - the program espeak-ng (not on the PATH): speaks" in message
    assert f"  - the folder {tmp_path / 'nowhere'}: the corpus (--data)" in message
    assert "a.gz" not in message  # the folder, not each of its files
    assert f"  - {tmp_path / 'absent.gz'}: the test set" in message and "present.gz" not in message
    assert "  pip install 'attnmt[experiments,vectors]'" in message  # one command for all
    assert "  sudo apt-get install espeak-ng chromium" in message


def test_nothing_missing_nothing_said(requirements, tmp_path, capsys):
    requirements.check("benchmarks/x.py", requirements.module("json"), requirements.files(tmp_path, []), None, [])
    assert capsys.readouterr().err == ""


def test_shared_data_points_to_its_readme_and_a_distribution_needs_its_version(requirements, monkeypatch):
    [missing] = requirements.files(requirements.SHARED_DATA / "no-such-corpus", ["x.gz"], "a corpus")
    assert missing.advice == requirements.SHARED_README and "README.md" in missing.advice
    assert requirements.path(Path("/no/such/file"), "--src").advice is None  # a user's own file: no README
    assert requirements.distribution("pytest", "0.0.1").what.startswith("pytest 0.0.1 (found ")
    assert requirements.distribution("no-such-distribution-here", "1.0").pip == "no-such-distribution-here==1.0"


def test_a_trained_model_is_a_config_and_weights(requirements, tmp_path):
    (tmp_path / "config.yaml").write_text("")  # a quick start's folder, say: its model is in model/
    assert "no trained model there" in requirements.trained_model(tmp_path, "the model").what
    (tmp_path / "best.safetensors").write_bytes(b"")
    assert requirements.trained_model(tmp_path, "the model") is None


def test_cuda_needs_the_driver_and_a_torch_that_sees_a_gpu(requirements, monkeypatch):
    import torch

    monkeypatch.setattr(requirements.shutil, "which", lambda name: None)
    assert "nvidia-smi" in requirements.cuda().what
    monkeypatch.setattr(requirements.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    missing = requirements.cuda("--device cuda", in_child=False)
    assert "torch.cuda.is_available() is False" in missing.what and "pytorch.org" in missing.advice


@pytest.mark.slow  # (a python that imports torch: two seconds)
def test_cuda_is_asked_of_torch_in_a_child_process(requirements, monkeypatch):
    monkeypatch.setattr(requirements.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU for the child's torch, on any machine
    assert "torch.cuda.is_available() is False; torch 2." in requirements.cuda().what


# ---------------------------------------------------------------------------------------------- peers.py


def test_peers_with_a_missing_extra_stops_before_training_attnmt(run, tmp_path):
    """The issue's run: it trained attnmt for 4 minutes, then died in `attnmt shortlist`."""
    work = tmp_path / "work"
    done = run(BENCHMARKS / "peers.py", "--minutes", 4, "--only", "attnmt,opennmt", "--work", work, hidden=["eflomal"])
    stopped(done, "the Python package eflomal", "pip install 'attnmt[experiments]'")
    assert not work.exists() and "training" not in done.stdout


def test_peers_names_the_data_folder_and_the_environments_it_lacks_together(run, tmp_path):
    work, nowhere = tmp_path / "work", tmp_path / "nowhere"
    done = run(
        BENCHMARKS / "peers.py",
        *("--only", "opennmt,joeynmt", "--skip-install", "--data", nowhere, "--work", work),
    )
    stopped(
        done,
        f"the folder {nowhere}: Multi30k (--data)",
        f"{work}/venv-opennmt/bin/python",
        f"{work}/venv-joeynmt/bin/python",
        "run without --skip-install",
        "README.md",
    )
    assert not work.exists()


def test_peers_on_a_gpu_needs_its_driver_and_no_eflomal(run, tmp_path):
    work = tmp_path / "work"
    done = run(
        BENCHMARKS / "peers.py",
        *("--device", "cuda", "--only", "attnmt", "--work", work),
        hidden=["eflomal"],
        path=[tmp_path / "bin"],  # no nvidia-smi, on any machine
    )
    message = stopped(done, "an NVIDIA GPU (nvidia-smi")
    assert "eflomal" not in message  # no --shortlist decoding on a GPU
    assert not work.exists()


def test_peers_main_checks_before_installing_or_preparing_anything(requirements, tmp_path, monkeypatch, capsys):
    peers = script("peers")
    for step in ("install_peers", "prepare_anchors", "render_configs", "run_system", "machine_speed", "write_stubs"):
        monkeypatch.setattr(peers, step, work_started)
    hide(monkeypatch, "eflomal")
    argv = ["--minutes", 4, "--only", "attnmt,opennmt", "--work", tmp_path / "work"]
    stops(peers.main, argv, capsys, "pip install 'attnmt[experiments]'")


# ---------------------------------------------------------------------------------------------- run.py


@pytest.fixture
def run_py(requirements, monkeypatch):
    run_py = script("run")
    monkeypatch.setattr(run_py, "train", work_started)
    monkeypatch.setattr(run_py, "in_fresh_process", work_started)
    return run_py


def test_run_names_the_missing_extra_and_data_folder_before_training(run_py, tmp_path, monkeypatch, capsys):
    hide(monkeypatch, "eflomal")
    out, nowhere = tmp_path / "out", tmp_path / "nowhere"
    expected = ("the Python package eflomal", "pip install 'attnmt[experiments]'", f"the folder {nowhere}", "README")
    stops(run_py.main, ["--data", nowhere, "--out", out], capsys, *expected)
    assert not out.exists()


def test_run_asks_for_what_its_options_need_only(run_py, tmp_path, monkeypatch, capsys):
    """--decode-only of a model whose shortlist is made needs no eflomal; --device cuda needs a GPU."""
    hide(monkeypatch, "eflomal")
    out, nowhere = tmp_path / "out", tmp_path / "nowhere"
    (out / "model").mkdir(parents=True)
    (out / "model" / "shortlist.json").write_text("{}")
    message = stops(run_py.main, ["--decode-only", "--data", nowhere, "--out", out], capsys, f"the folder {nowhere}")
    assert "eflomal" not in message
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no nvidia-smi, on any machine
    message = stops(run_py.main, ["--device", "cuda", "--out", tmp_path / "gpu"], capsys, "an NVIDIA GPU (nvidia-smi")
    assert "eflomal" not in message  # no --shortlist decoding on a GPU
    assert not (tmp_path / "gpu").exists() and sorted(p.name for p in out.iterdir()) == ["model"]


# ---------------------------------------------------------------------------------------------- the others


def test_decomposable_with_word2vec_needs_gensim_and_its_text(requirements, tmp_path, monkeypatch, capsys):
    decomposable = script("decomposable")
    monkeypatch.setattr(decomposable, "run", work_started)
    hide(monkeypatch, "gensim")
    out, text = tmp_path / "out", tmp_path / "no.en.gz"
    argv = ["--embeddings", "both", "--multi30k", text, "--out", out]
    stops(decomposable.main, argv, capsys, "the Python package gensim", "pip install 'attnmt[vectors]'", str(text))
    assert not out.exists()


def test_int8_with_a_transformer_needs_ctranslate2_and_both_models(requirements, tmp_path, monkeypatch, capsys):
    int8 = script("int8")
    monkeypatch.setattr(int8, "measure", work_started)
    hide(monkeypatch, "ctranslate2")
    rnn, transformer, src = tmp_path / "rnn", tmp_path / "transformer", tmp_path / "src.gz"
    argv = ["--model", rnn, "--transformer", transformer, "--src", src]
    stops(int8.main, argv, capsys, "pip install 'attnmt[ct2]'", str(rnn), str(transformer), f"{src}: --src")


def test_speech_length_without_espeak_ng_stops_before_synthesizing(requirements, tmp_path, monkeypatch, capsys):
    speech_length = script("speech_length")
    monkeypatch.setattr(speech_length, "corpora", work_started)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    out = tmp_path / "out"
    expected = ("the program espeak-ng (not on the PATH)", "sudo apt-get install espeak-ng")
    stops(speech_length.main, ["--out", out], capsys, *expected)
    assert not out.exists()


def test_gpu_speed_needs_the_gpu_and_its_data(requirements, tmp_path, monkeypatch, capsys):
    gpu_speed = script("gpu_speed")
    monkeypatch.setattr(gpu_speed, "train", work_started)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    work, nowhere = tmp_path / "work", tmp_path / "nowhere"
    expected = ("an NVIDIA GPU (nvidia-smi", f"the folder {nowhere}: Multi30k (--data)")
    stops(gpu_speed.main, ["--data", nowhere, "--work", work], capsys, *expected)
    assert not work.exists()


def test_load_test_without_httpx_stops_before_training_its_model(run, tmp_path):
    done = run(BENCHMARKS / "load_test.py", "--model", tmp_path / "model", hidden=["httpx"])
    stopped(done, "the Python package httpx", "pip install httpx", str(tmp_path / "model"))


# ---------------------------------------------------------------------------------------------- shell scripts


def copied(tmp_path: Path, *names: str) -> Path:
    """A checkout of the benchmarks `names` (and requirements.py) in tmp_path/checkout: what they
    would make, they would make there, beside no shared data."""
    root = tmp_path / "checkout"
    (root / "benchmarks").mkdir(parents=True)
    for name in ("requirements.py", *names):
        shutil.copy(BENCHMARKS / name, root / "benchmarks" / name)
    return root


def test_experiments_check_before_the_first_one(run, tmp_path):
    root = copied(tmp_path, "experiments.sh")
    python_first = [Path(sys.executable).parent, os.environ["PATH"]]  # the script's `python`: this one
    done = run(
        root / "benchmarks" / "experiments.sh", "e4", hidden=["eflomal", "sacremoses"], path=python_first, cwd=tmp_path
    )
    stopped(
        done,
        "the Python package sacremoses",
        "the Python package eflomal: the statistical aligner beside attention (e4)",
        "pip install 'attnmt[experiments]'",
        f"the folder {tmp_path / 'shared' / 'data' / 'multi30k'}",
    )
    assert sorted(p.name for p in root.iterdir()) == ["benchmarks"]  # no runs/


def test_gpu_peers_checks_the_machine_before_installing_the_wheels(run, tmp_path):
    root, bin_ = copied(tmp_path, "gpu_peers.sh"), tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "dirname").symlink_to(shutil.which("dirname"))  # the script's first command; no nvidia-smi
    site, work = tmp_path / "site", tmp_path / "peers-cuda"
    done = run(
        root / "benchmarks" / "gpu_peers.sh",
        "1",
        path=[bin_],
        env={"PYTHON": sys.executable, "SITE": str(site), "WORK": str(work)},
    )
    stopped(done, "the program nvidia-smi", f"{root / '.whl' / '*.whl'}", f"the folder {root / '.peers-data'}")
    assert not site.exists() and not work.exists()
