"""benchmarks/gpu_speed.py runs only on GPU leases, which are short and few: its paths run here on a
CPU (``--device cpu``, figures meaningless), so that a lease does not find it broken."""

import gzip
import json
import subprocess
import sys
from itertools import islice
from pathlib import Path

import pytest

from conftest import shared_data

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_speed.py"


def gpu_speed(*argv) -> str:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--sentences", "2", *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def multi30k_sample(folder: Path, train: int = 2000, others: int = 8) -> Path:
    """The Multi30k files the script reads, cut to their first lines: ``train`` training pairs (the
    subwords' text) and ``others`` of the validation and test sets, so that the script's paths run
    the same without validating an untrained model on 1,014 sentences decoded to their length limits."""
    multi30k = shared_data("multi30k")
    folder.mkdir()
    for name, lines in (("train", train), ("val", others), ("test_2016_flickr", others)):
        for lang in ("de", "en"):
            with gzip.open(multi30k / f"{name}.{lang}.gz", "rt", encoding="utf-8") as f:
                head = "".join(islice(f, lines))
            with gzip.open(folder / f"{name}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write(head)
    return folder


@pytest.mark.slow
def test_the_transformer_decodings_and_the_first_calls_run(tmp_path):
    data = multi30k_sample(tmp_path / "multi30k")
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
