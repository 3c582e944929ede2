"""benchmarks/scale.py's pieces that run in seconds: the generated corpora, the measured command, the
table (the benchmark itself takes hours at its large sizes: docs/data.md)."""

import re
import sys

import pytest

from conftest import REPO, shared_data


@pytest.fixture
def scale(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import scale

    return scale


def test_a_generated_corpus_is_two_multi30k_pairs_a_line_the_same_for_a_size(scale, tmp_path):
    shared_data("multi30k")
    de, en = scale.corpus(tmp_path, 200)
    lines = de.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 200 == len(en.read_text(encoding="utf-8").splitlines())
    again = scale.corpus(tmp_path / "again", 200)[0].read_text(encoding="utf-8").splitlines()
    assert again == lines and len(lines[0].split()) > 10


def test_a_measured_command_has_its_time_memory_and_first_step(scale, tmp_path):
    code = "import time; print('model: 5 parameters; 1,000 training pairs', flush=True); time.sleep(0.6)"
    run = scale.measured([sys.executable, "-c", code], tmp_path / "run.log", None, scale.ATTNMT_FIRST_STEP)
    assert run["wall_s"] >= 0.6 and run["first_step_s"] is not None and run["first_step_s"] <= run["wall_s"]
    assert run["peak_rss_mb"] > 0 and 0 < run["peak_anon_mb"] <= run["peak_rss_mb"]
    with pytest.raises(RuntimeError, match="ended with status 3"):
        scale.measured([sys.executable, "-c", "raise SystemExit(3)"], tmp_path / "fails.log", None)


def test_the_table_has_a_column_for_each_system_and_size(scale):
    figures = {"prepare": {"wall_s": 6.5, "lines_per_s": 4587}, "train_1": {"peak_rss_mb": 1352, "peak_anon_mb": 1156}}
    text = scale.table({"attnmt": {30_000: figures}, "opennmt": {30_000: {}}})
    assert "| | attnmt 30,000 pairs | opennmt 30,000 pairs |" in text
    assert re.search(r"\| training, peak RSS / RssAnon, MB \| 1,352 / 1,156 \| — \|", text)


def test_every_attnmt_command_runs_this_interpreter_even_under_torchrun(scale, tmp_path, monkeypatch):
    """A `torchrun` found on PATH may belong to another Python, without attnmt: the benchmark runs
    torch.distributed.run of the interpreter that runs it."""
    commands = []
    monkeypatch.setattr(scale, "measured", lambda cmd, *args: commands.append(cmd) or {"wall_s": 1.0})
    monkeypatch.setattr(scale, "attnmt_tokens_per_s", lambda folder: None)
    scale.run_attnmt(tmp_path, 100, (tmp_path / "a.de", tmp_path / "a.en"), 5, 1, [1, 2])
    assert len(commands) == 3  # prepare, one process, two processes
    assert all(cmd[0] == sys.executable for cmd in commands)
    assert commands[2][1:3] == ["-m", "torch.distributed.run"] and "--nproc-per-node" in commands[2]


@pytest.mark.parametrize("keep", [False, True])
def test_a_sizes_store_is_deleted_at_the_end_unless_kept(scale, tmp_path, monkeypatch, keep):
    files = (tmp_path / "a.de", tmp_path / "a.en")
    monkeypatch.setattr(scale, "check_requirements", lambda *args: None)
    monkeypatch.setattr(scale, "corpus", lambda work, pairs: files)
    monkeypatch.setattr(scale.peers, "machine", lambda: {"cpu": "test", "nproc": 2})

    def run_attnmt(work, pairs, *args):
        (work / f"attnmt-{pairs}" / "store").mkdir(parents=True)
        return {}

    monkeypatch.setattr(scale, "run_attnmt", run_attnmt)
    options = ["--keep-stores"] if keep else []
    scale.main(["--sizes", "0.0001", "--systems", "attnmt", "--work", str(tmp_path), "--keep-corpora", *options])
    assert (tmp_path / "attnmt-100" / "store").is_dir() == keep
    assert (tmp_path / "scale.json").is_file()
