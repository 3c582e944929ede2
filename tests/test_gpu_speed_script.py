"""benchmarks/gpu_speed.py runs only on GPU leases, which are short and few: its paths run here on a
CPU (``--device cpu``, figures meaningless), so that a lease does not find it broken."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import shared_data

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_speed.py"


def gpu_speed(*argv) -> str:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--sentences", "6", *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_the_transformer_decodings_and_the_first_calls_run(tmp_path):
    data = shared_data("multi30k")
    out = gpu_speed("--transformer", "--steps", 2, "--data", data, "--work", tmp_path)
    assert "beam 5: fixed cache, graphs" in out and "training the Transformer, graphs / eager" in out
    results = json.loads((tmp_path / "transformer.json").read_text())
    assert {
        "train_transformer",
        "train_transformer-eager",
        "beam1_fixed_cache_graphs",
        "beam5_growing_cache_eager",
        "beam5_reference",
    } <= set(results)
    first = json.loads(gpu_speed("--first-calls", tmp_path / "transformer", "--data", data).splitlines()[-1])
    assert set(first) == {"load", "one_sentence", "greedy_1", "greedy_2", "beam5_1", "beam5_2"}
