"""Shared helpers: toy experiments built through the real pipeline (TSV -> subwords -> model);
the ``slow`` marker; what the tests need from outside the checkout.

``pytest -m "not slow"`` runs the fast subset (under a minute): every test that trains a model,
uses a trained one, drives a browser or starts a process it waits seconds for is marked slow, by
the fixtures it uses (SLOW_FIXTURES)
or by hand. ``.ci/run`` runs everything. Tests marked ``gpu`` (tests/test_gpu.py) need a CUDA GPU:
``pytest -m gpu`` on a machine with one; elsewhere they are skipped with a message, even under
ATTNMT_STRICT=1 (CI has no GPU).

The shared data (../shared/data) and Debian's Chromium are needed by some tests: a developer
without them sees those tests skipped with a message that says what is missing and how to get it;
with ATTNMT_STRICT=1 (set by .ci/run) or CI=true they fail instead, so CI cannot pass without them.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

import attnmt  # noqa: F401 (before torch, as a user's program should: attnmt.core.threads.configure_waiting)
import torch
from attnmt.core.config import config_from_dict
from attnmt.pairs.quickstart import make_pairs

# The tests' models are tiny: one OpenMP thread computes them faster than two, whose hand-off at
# every operation costs more than the arithmetic they share (150 training steps of a toy model:
# 3.1-3.5 s against 4.0-4.7 s on a 2-core AMD EPYC; two hyperthreads of one core share even less).
# For this process and the commands the tests start; a test about threads sets its own.
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
MULTI30K = SHARED_DATA / "multi30k"
STRICT = os.environ.get("ATTNMT_STRICT") == "1" or os.environ.get("CI", "").lower() in ("1", "true")
ALPHABET = "abcdefghij"
# Seconds to wait for what takes well under one: long enough that a loaded machine never fails a
# test by being slow; where a test checks that something does NOT wait, the wait it must not do is
# this long, so a test fails only on the behaviour it is about.
WAIT = 60


def random_strings(n: int, low: int, high: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(low, high))) for _ in range(n)]


def write_tsv(path: Path, pairs) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    return path


def copy_model(folder: Path, steps: int, training: dict | None = None, log=None, **model):
    """A model with ``model``'s fields (and ``training``'s) trained to copy random strings for
    ``steps`` steps (seconds), saved and loaded through the usual code; ``log`` gets training's lines."""
    from attnmt.api import load
    from attnmt.training import train

    train_src = random_strings(300, 3, 8, seed=1)
    config = toy_config(
        folder,
        [(s, s) for s in train_src],
        model=model,
        training={"max_steps": steps, "validate_every": steps, "threads": 1, **(training or {})},
    )
    torch.manual_seed(0)
    train(config, log=log or (lambda m: None), progress=False)
    return load(config.experiment_dir)


TOY_RNN = {"embedding_size": 32, "encoder_hidden": 32, "decoder_hidden": 64, "attention_size": 32}


def toy_config(folder: Path, train_pairs, dev_pairs=None, model=None, training=None, data=None, decoding=None):
    """A config for a character-level toy task, with small sizes unless overridden."""
    raw = {
        "experiment_dir": str(folder / "exp"),
        "data": {
            "train": {"tsv": str(write_tsv(folder / "train.tsv", train_pairs))},
            "subwords": {"type": "char", "vocab_size": 40, "joint": True},
            "batch_size": 32,
            "max_length": 100,
            **(data or {}),
        },
        "model": {  # (an RNN's sizes unless it is a Transformer)
            **({} if (model or {}).get("type") == "transformer" else TOY_RNN),
            "dropout": 0.0,
            **(model or {}),
        },
        "training": {
            "max_steps": 20,
            "validate_every": 10,
            "log_every": 5,
            "learning_rate": 0.005,
            "early_stopping_patience": None,
            "threads": 1,  # (see OMP_NUM_THREADS above)
            **(training or {}),
        },
        "decoding": {"beam": 3, "batch_size": 16, **(decoding or {})},
    }
    if dev_pairs is not None:
        raw["data"]["dev"] = {"tsv": str(write_tsv(folder / "dev.tsv", dev_pairs))}
    return config_from_dict(raw, folder)


SLOW_FIXTURES = {
    "reverse_model",
    "tiny_transformer",
    "served",
    "browser",
    "trained",
    "copy_model",
    "run_dir",
    "pair_model",
    "speech_model",
    "scramble",
    "marian",  # tests/test_hub.py: a small Marian model built, trained a few steps and imported
    "both_ways",  # tests/test_agreement.py (and test_aligner_links.py): two scramble models, 100 steps each
    "first_rounds",  # tests/test_guided_alignment.py: two first rounds, 40 steps each
}


NO_GPU = "needs a CUDA GPU: torch.cuda.is_available() is False here (run pytest -m gpu on a machine with one)"


def pytest_collection_modifyitems(items):
    gpu = None  # asked once, and only if a gpu test was collected
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("gpu") is not None:
            gpu = torch.cuda.is_available() if gpu is None else gpu
            if not gpu:  # also under ATTNMT_STRICT: CI has no GPU
                item.add_marker(pytest.mark.skip(reason=NO_GPU))


def local_client(app, base_url: str = "http://localhost", **kwargs):
    """FastAPI's test client for ``app``, as a client on this machine: Host localhost (the server
    answers no other Host by default, see docs/security.md)."""
    import warnings

    with warnings.catch_warnings():  # starlette warns about httpx on import; the client works
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    return TestClient(app, base_url=base_url, **kwargs)


CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# Starting the browser is far slower than any page action on a fresh or busy machine (its first start
# builds caches): CI once took over 20 s to launch a Chromium that starts in under 1 s here.
CHROMIUM_LAUNCH_TIMEOUT_MS = 120_000


def launch_chromium(playwright):
    """Debian's Chromium under Playwright, headless; the test fails (skips outside CI) without it."""
    require(
        CHROMIUM.is_file(),
        f"Chromium not found at {CHROMIUM}: the browser tests need a real browser (Debian: "
        "apt-get install chromium, as .ci/run does); Playwright cannot download one here",
    )
    return playwright.chromium.launch(
        executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, timeout=CHROMIUM_LAUNCH_TIMEOUT_MS
    )


def require(available: bool, message: str):
    """Skips the test (fails it under ATTNMT_STRICT=1 or CI) unless ``available``."""
    if not available:
        if STRICT:
            pytest.fail(f"{message} (ATTNMT_STRICT/CI: required)", pytrace=False)
        pytest.skip(message)


def shared_data(*parts: str) -> Path:
    """A path under ../shared/data, the real corpora beside the checkout (see its README)."""
    path = SHARED_DATA.joinpath(*parts)
    require(
        path.exists(),
        f"{path} not found: these tests read the shared data beside the checkout "
        "(../shared/data: Multi30k, the Hansards alignments, SICK, spoken digits)",
    )
    return path


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    yield


def assert_beam_of_one_equals_greedy(model, batch, window=None):
    """Beam search with one hypothesis is greedy search: same tokens, scores and attention."""
    from attnmt.seq2seq.decoding import beam_search, greedy_search, max_output_lengths

    limits = max_output_lengths(batch.src_lengths, 1.5, 5)
    greedy = greedy_search(model, batch.src, batch.src_lengths, limits, window=window)
    beam = beam_search(model, batch.src, batch.src_lengths, limits, beam=1, window=window)
    for g, b in zip(greedy, beam):
        assert g[0].tokens == b[0].tokens
        assert g[0].score == pytest.approx(b[0].score, abs=1e-4)
        if g[0].attention is not None:
            torch.testing.assert_close(g[0].attention, b[0].attention)


def reverse(s: str) -> str:
    return s[::-1]


@pytest.fixture(scope="session")
def reverse_model(tmp_path_factory):
    """A small Bahdanau model trained to reverse strings (about 20 s); shared by several tests.

    These settings (best of 6 validations by dev loss) reached 100% exact match with every seed
    tried (1, 2, 42); smaller ones (decoder 64, 400 steps, last checkpoint) ranged from 34% to
    99% depending on the seed."""
    from attnmt.api import load
    from attnmt.training import train

    folder = tmp_path_factory.mktemp("reverse")
    train_src, dev_src = random_strings(4000, 3, 8, seed=1), random_strings(200, 3, 8, seed=2)
    config = toy_config(
        folder,
        [(s, reverse(s)) for s in train_src],
        [(s, reverse(s)) for s in dev_src],
        model={"attention": "bahdanau", "decoder_hidden": 128},
        training={
            "max_steps": 600,
            "validate_every": 100,
            "learning_rate": 0.003,
            # BLEU of one-"word" outputs is 0 whatever their quality: keep
            # the checkpoint with the best dev loss instead.
            "early_stopping_metric": "loss",
        },
    )
    torch.manual_seed(0)
    train(config, log=lambda m: None, progress=False)
    return load(config.experiment_dir), dev_src


@pytest.fixture(scope="session")
def tiny_transformer(tmp_path_factory):
    """A Transformer folder (3 encoder layers, 2 decoder layers, 4 heads, d_model 32) trained for
    a few steps to copy strings (a few seconds): enough for the shapes of its attention (serve,
    views), not to translate well. Encoder and decoder depths differ so that a view mixing them up
    fails."""
    from attnmt.api import load
    from attnmt.training import train

    folder = tmp_path_factory.mktemp("tiny-transformer")
    train_src = random_strings(400, 3, 8, seed=1)
    config = toy_config(
        folder,
        [(s, s) for s in train_src],
        model={
            "type": "transformer",
            "d_model": 32,
            "heads": 4,
            "feed_forward": 64,
            "encoder_layers": 3,
            "decoder_layers": 2,
            "dropout": 0.0,
            "attention_dropout": 0.0,
        },
        training={"max_steps": 30, "validate_every": 30, "log_every": 10, "threads": 1},
        decoding={"beam": 2, "batch_size": 16, "max_length_ratio": 1.5, "max_length_offset": 3},
    )
    config.experiment_dir = folder / "tiny-transformer"  # a model's name in the server is its folder's
    torch.manual_seed(0)
    train(config, log=lambda m: None, progress=False)
    return load(config.experiment_dir)


# ------------------------------------------------------------------------------ sentence pairs (task: pairs)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def pair_config(tmp_path, **sections) -> dict:
    train = tmp_path / "train.tsv"
    if not train.exists():
        write(train, "".join("\t".join(t) + "\n" for t in make_pairs(200, seed=1)))
    raw = {
        "experiment_dir": str(tmp_path / "exp"),
        "task": "pairs",
        "data": {"train": {"tsv": str(train)}, "subwords": {"type": "word", "vocab_size": 100}},
        "model": {"embedding_size": 8, "hidden_size": 8},
        "training": {"max_steps": 5},
    }
    for name, values in sections.items():
        raw[name] = {**raw.get(name, {}), **values}
    return raw


@pytest.fixture(scope="session")
def pair_model(tmp_path_factory):
    """A small pair model trained on the synthetic task, with a dev and a test set."""
    from attnmt.training import train

    folder = tmp_path_factory.mktemp("pairs")
    for name, n, seed in (("train", 2000, 1), ("dev", 100, 2), ("test", 100, 3)):
        write(folder / f"{name}.tsv", "".join("\t".join(t) + "\n" for t in make_pairs(n, seed)))
    raw = pair_config(
        folder,
        data={"dev": {"tsv": str(folder / "dev.tsv")}, "test": {"tsv": str(folder / "test.tsv")}, "batch_size": 32},
        model={"embedding_size": 16, "hidden_size": 16, "dropout": 0.0},
        training={
            "max_steps": 60,
            "validate_every": 30,
            "learning_rate": 0.005,
            "early_stopping_patience": None,
            "threads": 1,
        },
    )
    config = config_from_dict(raw, folder)
    train(config, log=lambda message: None, progress=False)
    return config.experiment_dir


@pytest.fixture(scope="session")
def marian_imports(tmp_path_factory):
    """The small Marian models of tests/test_hub*.py, each built (trained 150 steps) and imported once
    a session, whichever of those files asks first: ``marian_imports("shared")`` (one vocabulary for
    both sides, tied embeddings) or ``("separate")`` (a decoder vocabulary of its own, a few source
    pieces left out of vocab.json, untied) -> (the folder save_pretrained wrote, its attnmt import's
    folder). The tests read both and write elsewhere."""
    from attnmt.cli import main
    from marian_helpers import marian_folder

    built = {}

    def build(layout: str) -> tuple[Path, Path]:
        if layout not in built:
            folder = tmp_path_factory.mktemp(f"marian-{layout}")
            separate = layout == "separate"
            source = marian_folder(folder, separate_vocabs=separate, leave_out=5 if separate else 0, tie=not separate)
            assert main(["import", str(source), str(folder / "imported")]) == 0
            built[layout] = source, folder / "imported"
        return built[layout]

    return build
