"""Crash-safe training: checksummed atomic checkpoints under SIGKILL, Ctrl-C, a full disk or an
unwritable folder; and reproducibility, bit for bit."""

import errno
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from attnmt.api import load
from attnmt.core.checkpoint import read_checkpoint
from attnmt.core.config import config_to_yaml
from attnmt.core.errors import AttnmtError
from attnmt.training import train
from conftest import random_strings, reverse, toy_config

pytestmark = pytest.mark.slow  # every test here trains models (or starts processes that do)

PAIRS = [(s, reverse(s)) for s in random_strings(200, 3, 8, seed=5)]
DEV = [(s, reverse(s)) for s in random_strings(20, 3, 8, seed=6)]
TINY = {"embedding_size": 8, "encoder_hidden": 8, "decoder_hidden": 16, "attention_size": 8}
QUIET = {"log": lambda message: None, "progress": False}


def tiny_config(folder, dev=False, model=None, **training):
    """About 30 ms a step; one log record per step, a checkpoint every 4 steps."""
    return toy_config(
        folder,
        PAIRS,
        DEV if dev else None,
        model={**TINY, **(model or {})},
        data={"batch_size": 8},
        training={
            "max_steps": 40,
            "checkpoint_every": 4,
            "validate_every": 1000,
            "log_every": 1,
            "threads": 1,
            **training,
        },
    )


def config_file(config):
    path = config.experiment_dir.parent / "config.yaml"
    path.write_text(config_to_yaml(config), encoding="utf-8")
    return path


def start_training(path, resume: bool) -> subprocess.Popen:
    command = [sys.executable, "-m", "attnmt.cli", "train", str(path), "--no-progress"]
    return subprocess.Popen(
        command + (["--resume"] if resume else []),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def wait_for_training_loop(process: subprocess.Popen):
    for line in process.stderr:
        if line.startswith("model:"):  # logged right before the first step
            return
    raise AssertionError(f"training did not start (exit code {process.wait()})")


def checkpoint_step(path) -> int:
    with safe_open(str(path), framework="pt") as f:
        return json.loads(f.metadata()["info"])["trainer"]["step"]


def train_records(folder) -> list[dict]:
    # Complete lines only: a kill may cut the last one short (a resumed run drops it).
    lines = (folder / "metrics.jsonl").read_text(encoding="utf-8").split("\n")[:-1]
    return [r for r in map(json.loads, lines) if r["type"] == "train"]


def assert_same_tensors(path_a, path_b):
    a, b = load_file(str(path_a)), load_file(str(path_b))
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), f"{path_b.name}: {key} differs"


def assert_consistent_after_crash(folder, checkpoint_every: int):
    for path in folder.glob("*.safetensors"):
        read_checkpoint(path)  # parses and passes its checksum, or raises
    logged = max((r["step"] for r in train_records(folder)), default=0)
    last = folder / "last.safetensors"
    saved = checkpoint_step(last) if last.exists() else 0
    assert saved >= logged - checkpoint_every, f"lost steps {saved + 1}..{logged}"
    # A temporary file left by the kill is never read: make sure resuming ignores a bad one.
    tmp = folder / "last.safetensors.tmp"
    if not tmp.exists():
        tmp.write_bytes(b"half a checkpoint")


def wait_for_step(folder, step: int, process: subprocess.Popen):
    """Returns once the training in ``process`` has logged ``step`` (one record per step)."""
    metrics = folder / "metrics.jsonl"
    while process.poll() is None:
        lines = metrics.read_text(encoding="utf-8").splitlines() if metrics.exists() else []
        if lines and lines[-1].endswith("}") and json.loads(lines[-1])["step"] >= step:
            return
        time.sleep(0.005)
    raise AssertionError(
        f"training ended (exit code {process.returncode}) before step {step}: {process.communicate()[1]}"
    )


def test_training_killed_at_random_moments_resumes_to_the_same_model(tmp_path):
    reference = tiny_config(tmp_path / "reference")
    train(reference, **QUIET)
    config = tiny_config(tmp_path / "killed")
    path, folder = config_file(config), config.experiment_dir
    # Random moments, seeded: a random step, then a random fraction of a step (about 30 ms),
    # which may fall in the middle of writing a checkpoint.
    rng = random.Random(6)
    for step in sorted(rng.sample(range(3, config.training.max_steps - 5), 3)):
        process = start_training(path, resume=(folder / "last.safetensors").exists())
        wait_for_step(folder, step, process)
        time.sleep(rng.uniform(0, 0.03))
        process.kill()
        process.communicate()
        assert process.returncode == -signal.SIGKILL
        assert_consistent_after_crash(folder, config.training.checkpoint_every)
    train(config, resume=(folder / "last.safetensors").exists(), **QUIET)  # to the end, in this process
    for name in ("last.safetensors", "best.safetensors"):
        assert_same_tensors(reference.experiment_dir / name, folder / name)
    # The log tells one story: each step once, with the loss of the uninterrupted run.
    expected = [(r["step"], r["loss"]) for r in train_records(reference.experiment_dir)]
    assert [(r["step"], r["loss"]) for r in train_records(folder)] == expected


def test_ctrl_c_saves_a_checkpoint_and_exits_cleanly(tmp_path):
    # No periodic checkpoint within the run: the one on disk comes from the interruption.
    config = tiny_config(tmp_path / "run", max_steps=100_000, checkpoint_every=100_000)
    process = start_training(config_file(config), resume=False)
    wait_for_training_loop(process)
    try:
        process.wait(timeout=0.5)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "--resume" in stderr
    folder = config.experiment_dir
    step = checkpoint_step(folder / "last.safetensors")
    assert step == train_records(folder)[-1]["step"] > 0  # saved at the step reached: nothing lost
    # ... and exactly: resuming from it gives the model of a run that was never interrupted.
    train(tiny_config(tmp_path / "run", max_steps=step + 3), resume=True, **QUIET)
    reference = tiny_config(tmp_path / "reference", max_steps=step + 3, checkpoint_every=100_000)
    train(reference, **QUIET)
    assert_same_tensors(reference.experiment_dir / "last.safetensors", folder / "last.safetensors")


def test_full_disk_gives_a_clear_error_and_keeps_the_last_checkpoint(tmp_path):
    config = tiny_config(tmp_path, max_steps=4)
    train(config, **QUIET)
    folder = config.experiment_dir
    before = (folder / "last.safetensors").read_bytes()
    (folder / "last.safetensors.tmp").symlink_to("/dev/full")  # writing there fails with ENOSPC
    with pytest.raises(AttnmtError, match=f"cannot write last.safetensors in {folder}: No space left"):
        train(tiny_config(tmp_path, max_steps=8), resume=True, **QUIET)
    assert (folder / "last.safetensors").read_bytes() == before
    assert not (folder / "last.safetensors.tmp").exists()
    assert checkpoint_step(folder / "last.safetensors") == 4


def test_unwritable_folder_gives_a_clear_error_and_keeps_the_last_checkpoint(tmp_path, monkeypatch):
    config = tiny_config(tmp_path, max_steps=4)
    train(config, **QUIET)
    folder = config.experiment_dir
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}

    def refuse(path, *args, **kwargs):  # what a read-only folder does (tests run as root, which may write anyway)
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr("attnmt.core.files.open", refuse, raising=False)
    with pytest.raises(AttnmtError, match=f"cannot write .* in {folder}: Permission denied"):
        train(tiny_config(tmp_path, max_steps=8), resume=True, **QUIET)
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before


def test_damaged_or_truncated_checkpoint_is_refused_naming_the_file(tmp_path):
    config = tiny_config(tmp_path, max_steps=4)
    train(config, **QUIET)
    folder = config.experiment_dir
    best = folder / "best.safetensors"
    good = best.read_bytes()
    assert read_checkpoint(best)[1]["sha256"]  # written with its checksum

    flipped = bytearray(good)
    flipped[-5] ^= 0x01  # one bit of one weight
    best.write_bytes(bytes(flipped))
    with pytest.raises(AttnmtError, match=f"{best}: checksum mismatch"):
        load(folder)

    header = good.replace(b'{\\"step\\": 4}', b'{\\"step\\": 9}')  # the metadata, same length
    assert header != good
    best.write_bytes(header)
    with pytest.raises(AttnmtError, match=f"{best}: checksum mismatch"):
        load(folder)

    best.write_bytes(good[: len(good) // 2])
    with pytest.raises(AttnmtError, match=f"{best}: not a readable safetensors checkpoint: truncated"):
        load(folder)

    best.write_bytes(good)
    assert load(folder).translate(["abc"])[0].tokens  # the intact file loads


def vocabulary(folder) -> list[tuple[str, float]]:
    # The model file itself also records the temporary folder it was trained in.
    sp = load(folder).src_subwords.sp
    return [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]


def test_same_config_and_seed_give_the_same_model_bit_for_bit(tmp_path):
    # Dropout and a dev set: random numbers and validation (best checkpoint, LR decay) play a part.
    runs = [
        tiny_config(tmp_path / name, dev=True, model={"dropout": 0.3}, max_steps=24, validate_every=8, seed=seed)
        for name, seed in (("a", 7), ("b", 7), ("other-seed", 8))
    ]
    for config in runs:
        train(config, **QUIET)
    a, b, other = (config.experiment_dir for config in runs)
    for name in ("last.safetensors", "best.safetensors"):
        assert_same_tensors(a / name, b / name)
    assert vocabulary(a) == vocabulary(b)
    # The comparison can tell models apart: another seed gives other weights.
    with pytest.raises(AssertionError, match="differs"):
        assert_same_tensors(a / "last.safetensors", other / "last.safetensors")


def test_an_experiment_folder_that_cannot_be_created_is_an_error_naming_it(tmp_path, capsys):
    from attnmt.cli import main

    (tmp_path / "a-file").write_text("not a folder")
    config = tiny_config(tmp_path)
    config.experiment_dir = tmp_path / "a-file" / "exp"
    path = tmp_path / "train.yaml"
    path.write_text(config_to_yaml(config), encoding="utf-8")
    assert main(["train", str(path), "--no-progress"]) == 2
    assert (
        f"attnmt: error: cannot create the folder {config.experiment_dir / 'spm'}: Not a directory"
        in capsys.readouterr().err
    )


def test_prepare_that_died_before_writing_its_settings_is_done_again(tmp_path):
    # settings.yaml is written after the subword model: a model without it is from a prepare that
    # was killed in between, and is trained again instead of being refused as "other settings".
    from attnmt.translation.prepare import prepare

    config = tiny_config(tmp_path)
    prepare(config, log=lambda m: None)
    settings = config.experiment_dir / "spm" / "settings.yaml"
    settings.unlink()
    logged = []
    prepare(config, log=logged.append)
    assert settings.is_file() and any(m.startswith("trained joint char subwords") for m in logged)
    assert not list(config.experiment_dir.rglob("*.tmp"))
