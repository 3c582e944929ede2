"""Training on 2 processes (torchrun, gloo on the CPU) equals training on 1 with the same batches."""

import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from attnmt.core.config import config_to_yaml
from conftest import random_strings, reverse, toy_config

pytestmark = pytest.mark.slow  # every test here trains models (or starts processes that do)

PAIRS = [(s, reverse(s)) for s in random_strings(300, 3, 8, seed=7)]
DEV = [(s, reverse(s)) for s in random_strings(30, 3, 8, seed=8)]
# Dropout draws different masks on each process: without it the two runs compute the same sums.
MODEL = {"attention": "bahdanau", "dropout": 0.0}


def write_config(folder, **training):
    config = toy_config(
        folder, PAIRS, DEV, model=MODEL, training={"threads": 1, "validate_every": 6, "log_every": 3, **training}
    )
    path = folder / "train.yaml"
    path.write_text(config_to_yaml(config), encoding="utf-8")
    return config, path


def run(path, processes: int, resume: bool = False):
    launcher = (
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}"]
        if processes > 1
        else [sys.executable]
    )
    command = launcher + ["-m", "attnmt.cli", "train", str(path), "--no-progress"] + (["--resume"] if resume else [])
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


# `attnmt train` in this process, then the names of the threads left in it, in a file per rank.
TRAIN_THEN_NAME_THREADS = """
import os, sys
from attnmt.cli import main

code = main(["train", sys.argv[1], "--no-progress"])
names = [open(f"/proc/self/task/{task}/comm").read().strip() for task in os.listdir("/proc/self/task")]
with open(os.path.join(sys.argv[2], "threads-" + os.environ["RANK"]), "w") as f:  # a file each: stdout interleaves
    f.write(",".join(sorted(names)))
sys.exit(code)
"""


def weights(folder, name="last.safetensors"):
    return {k: v for k, v in load_file(str(folder / name)).items() if k.startswith("model.")}


def trainer_state(folder) -> dict:
    with safe_open(str(folder / "last.safetensors"), framework="pt") as f:
        return json.loads(f.metadata()["info"])["trainer"]


def assert_close(a: dict, b: dict):
    assert a.keys() == b.keys()
    for key in a:  # the sums of the gradients are taken in another order: equal up to rounding
        torch.testing.assert_close(a[key], b[key], rtol=1e-4, atol=1e-5, msg=key)


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    """12 steps on 2 processes (shared: resume compares against them), torchrun's output, and the
    names of the threads left in each process after training."""
    folder = tmp_path_factory.mktemp("double")
    double, path = write_config(folder, max_steps=12)
    script = folder / "train_then_name_threads.py"
    script.write_text(TRAIN_THEN_NAME_THREADS, encoding="utf-8")
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    done = subprocess.run(
        launcher + [str(script), str(path), str(folder)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return double, done, [(folder / f"threads-{rank}").read_text() for rank in (0, 1)]


def test_two_processes_train_the_model_of_one(tmp_path, two_processes):
    single, single_path = write_config(tmp_path / "single", max_steps=12)
    double, output, _ = two_processes
    run(single_path, 1)

    assert_close(weights(single.experiment_dir), weights(double.experiment_dir))
    # Each process read its share: together they saw each sentence and target token once.
    ours, theirs = trainer_state(double.experiment_dir), trainer_state(single.experiment_dir)
    assert (ours["sentences"], ours["target_tokens"]) == (theirs["sentences"], theirs["target_tokens"])
    # Only the main process writes: each step is logged once, and the report is printed once.
    records = [json.loads(line) for line in (double.experiment_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [(r["type"], r["step"]) for r in records]
    assert steps == sorted(set(steps), key=steps.index) and ("valid", 12) in steps
    assert output.stderr.count("finished at step 12") == 1
    # The losses of the whole batch, summed over both processes, are the single process's.
    single_records = [json.loads(line) for line in (single.experiment_dir / "metrics.jsonl").read_text().splitlines()]
    for ours, theirs in zip(records, single_records):
        assert ours["type"] == theirs["type"] and ours["step"] == theirs["step"]
        assert abs(ours["loss"] - theirs["loss"]) < 1e-3


def test_two_processes_resume(tmp_path, two_processes):
    straight, _, _ = two_processes
    first, first_path = write_config(tmp_path / "resumed", max_steps=6)
    run(first_path, 2)
    _, second_path = write_config(tmp_path / "resumed", max_steps=12)
    run(second_path, 2, resume=True)

    assert_close(weights(straight.experiment_dir), weights(first.experiment_dir))


def test_training_frees_the_process_group(two_processes):
    """At the end, the group's gloo threads are gone: left alive (torch._dynamo imported after the
    group was made kept it), they sometimes aborted a process at exit as they freed their last work."""
    _, _, reports = two_processes
    assert all("python" in report and "gloo" not in report for report in reports), reports


# One backward pass through setup_training's DistributedDataParallel, then how many separate
# storages hold the parameters' gradients, in a file per rank.
COUNT_GRADIENT_STORAGES = """
import os, sys
import torch
from torch import nn
from attnmt.core import distributed
from attnmt.core.config import TrainingConfig
from attnmt.training.optimization import setup_training

processes = distributed.start(torch.device("cpu"))
model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3))
setup = setup_training(model, model, TrainingConfig(max_steps=2), processes)
for _ in range(2):  # (the second after zero_grad: its gradients are made anew)
    setup.optimizer.zero_grad(set_to_none=True)
    setup.loss(torch.randn(8, 4)).square().sum().backward()
    setup.optimizer.step()
storages = {p.grad.untyped_storage().data_ptr() for p in model.parameters()}
with open(os.path.join(sys.argv[1], "storages-" + os.environ["RANK"]), "w") as f:
    f.write(f"{len(storages)} {len(list(model.parameters()))}")
torch.distributed.destroy_process_group()
"""


def test_gradients_live_in_the_exchange_buckets(tmp_path):
    """Each process keeps one copy of the gradients, not two: DistributedDataParallel sums them in
    its communication buckets, and the parameters' gradients are views of those buckets
    (gradient_as_bucket_view) rather than tensors of their own copied into and out of them. Measured
    on configs/rnn-bahdanau.yaml's model: 100 MB less a process."""
    script = tmp_path / "count_gradient_storages.py"
    script.write_text(COUNT_GRADIENT_STORAGES, encoding="utf-8")
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    done = subprocess.run(
        launcher + [str(script), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        storages, parameters = map(int, (tmp_path / f"storages-{rank}").read_text().split())
        assert parameters == 6 and storages == 1  # the six tensors' gradients in one bucket
