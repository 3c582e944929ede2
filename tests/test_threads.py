"""attnmt.core.threads: how threads wait, and how many there are on a busy machine."""

import json
import os
import subprocess
import sys
import time
import warnings

import pytest
import torch

from attnmt.core import threads


@pytest.fixture
def fresh(monkeypatch):
    """choose() as in a new process, and torch's thread count put back afterwards."""
    before = torch.get_num_threads()
    monkeypatch.setattr(threads, "_chosen", None)
    monkeypatch.setattr(threads, "_automatic", False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    yield
    torch.set_num_threads(before)


@pytest.mark.slow  # (a new interpreter)
def test_import_attnmt_makes_openmp_threads_sleep_after_a_short_spin():
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    code = "import attnmt, os; print(os.environ.get('GOMP_SPINCOUNT'))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == str(threads.SPIN_ROUNDS)
    assert "torch was imported" not in done.stderr  # attnmt first: nothing to warn of


@pytest.mark.slow  # (a new interpreter)
def test_torch_imported_before_attnmt_is_warned_of():
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    done = subprocess.run([sys.executable, "-c", "import torch, attnmt"], env=env, capture_output=True, text=True)
    assert done.returncode == 0 and "torch was imported before attnmt" in done.stderr, done.stderr


@pytest.mark.parametrize("environment", [{}, {"GOMP_SPINCOUNT": "1000"}, {"OMP_WAIT_POLICY": "PASSIVE"}])
def test_the_warning_is_for_torch_first_without_a_setting_of_the_user(monkeypatch, environment):
    """(torch is imported in this process: configure_waiting comes after it, as in a script that
    imports torch first.)"""
    for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        threads.configure_waiting()
    said = [str(w.message) for w in caught if "torch was imported before attnmt" in str(w.message)]
    assert len(said) == (not environment), said


def test_a_wait_policy_of_the_user_is_kept(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    threads.configure_waiting()
    assert "GOMP_SPINCOUNT" not in os.environ
    monkeypatch.delenv("OMP_WAIT_POLICY")
    monkeypatch.setenv("GOMP_SPINCOUNT", "5")
    threads.configure_waiting()
    assert os.environ["GOMP_SPINCOUNT"] == "5"


@pytest.mark.parametrize(
    "usable, busy, cpus, expected",
    [
        (2, 0.1, 2, 2),  # idle: every usable core
        (2, 1.0, 2, 1),  # one core busy elsewhere
        (2, 1.9, 2, 1),  # both busy: one thread all the same
        (2, 6.0, 2, 1),  # more work than cores
        (2, 3.0, 8, 2),  # an affinity of 2 on a machine of 8 with 5 free: 2
        (8, 5.2, 8, 3),
    ],
)
def test_the_fair_share_is_the_free_usable_cores_and_at_least_one(usable, busy, cpus, expected):
    assert threads.fair_share(usable, busy, cpus) == expected


def test_busy_cpus_sees_a_busy_process():
    loop = subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 5\nwhile time.time() < end: pass"])
    try:
        time.sleep(0.3)
        assert threads.busy_cpus(0.3) >= 0.5
    finally:
        loop.kill()
        loop.wait()


def test_choose_takes_a_fair_share_once_and_says_so(fresh, monkeypatch):
    monkeypatch.setattr(threads, "usable_cpus", lambda: 2)
    monkeypatch.setattr(threads, "busy_cpus", lambda: 1.8)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    said = []
    assert threads.choose(None, said.append) == 1 == torch.get_num_threads()
    assert "1.8 of the machine's CPUs are busy" in said[0]
    monkeypatch.setattr(threads, "busy_cpus", lambda: pytest.fail("measured twice"))
    assert threads.choose(None) == 1  # kept: the trainer asks again after the command line


def test_a_requested_number_wins_and_stays(fresh, monkeypatch):
    monkeypatch.setattr(threads, "busy_cpus", lambda: pytest.fail("no measure when the number is given"))
    assert threads.choose(1) == 1 == torch.get_num_threads()
    assert threads.choose(None) == 1  # a later call without a request keeps it


def test_omp_num_threads_is_left_as_the_user_set_it(fresh, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr(threads, "busy_cpus", lambda: pytest.fail("no measure under OMP_NUM_THREADS"))
    torch.set_num_threads(1)
    assert threads.choose(None) == 1


def test_the_command_line_chooses_the_threads(monkeypatch):
    from attnmt import cli

    chosen = []
    monkeypatch.setattr(cli.quickstart, "run", lambda args: None)
    monkeypatch.setattr(threads, "choose", lambda requested, log=None: chosen.append(requested))
    assert cli.main(["quickstart", "--threads", "1"]) == 0
    assert cli.main(["quickstart"]) == 0
    assert chosen == [1, None]  # None: a fair share of the machine


def test_a_resumed_run_takes_the_thread_count_of_the_run_it_continues(fresh, monkeypatch):
    monkeypatch.setattr(threads, "usable_cpus", lambda: 2)
    monkeypatch.setattr(threads, "busy_cpus", lambda: 1.9)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert threads.choose(None) == 1  # a fair share: the machine is busy now
    said = []
    threads.resume_with(2, said.append)  # the checkpoint's run computed with 2
    assert torch.get_num_threads() == 2 and threads.choose(None) == 2
    assert said and said[0].startswith("2 CPU threads, as the run being resumed")
    threads.resume_with(None)  # a checkpoint written before the count was stored: no change
    assert torch.get_num_threads() == 2


def test_a_number_the_user_chose_stays_on_resume(fresh):
    threads.choose(1)
    threads.resume_with(2)
    assert torch.get_num_threads() == 1


def test_the_checkpoint_holds_the_thread_count_and_resume_restores_it(fresh, monkeypatch, tmp_path):
    from attnmt.core.checkpoint import read_checkpoint
    from attnmt.training import train
    from conftest import reverse, toy_config

    pairs = [(w, reverse(w)) for w in ["abc", "bca", "cab", "abd"]]
    monkeypatch.setattr(threads, "usable_cpus", lambda: 2)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(threads, "busy_cpus", lambda: 0.0)
    config = toy_config(tmp_path, pairs, training={"max_steps": 2, "validate_every": 100, "threads": None})
    train(config, log=lambda line: None, progress=False)
    _, metadata = read_checkpoint(config.experiment_dir / "last.safetensors")
    assert json.loads(metadata["info"])["threads"] == 2

    monkeypatch.setattr(threads, "_chosen", None)  # a new process, on a busy machine
    monkeypatch.setattr(threads, "busy_cpus", lambda: 1.9)
    config.training.max_steps = 4
    said = []
    train(config, resume=True, log=said.append, progress=False)
    assert torch.get_num_threads() == 2
    assert any(line.startswith("2 CPU threads, as the run being resumed (instead of 1") for line in said)
