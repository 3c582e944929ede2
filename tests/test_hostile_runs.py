"""Run folders bent by hand or by a hostile copy (issue 27): held-out splits edited after they were
drawn, compare variants and results.json files, model folders whose config names test sets
elsewhere, sentence-pair labels that would break the output of `attnmt classify`."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from attnmt.cli import main
from attnmt.compare import ALIGNMENT_ROWS, STATISTICAL_SCORES, Comparison, Variant, locked, read_results
from attnmt.core.config import CorpusFiles, load_config
from attnmt.core.errors import AttnmtError
from attnmt.data.test_sets import config_test_sets
from attnmt.translation.prepare import training_lines
from conftest import random_strings, reverse, write_tsv
from test_compare import toy_experiment

PAIRS = [(s, reverse(s)) for s in random_strings(300, 3, 8, seed=5)]


def run(*argv) -> int:
    return main([str(a) for a in argv])


def split_config(folder: Path, **training) -> Path:
    """A tiny translation experiment whose dev and test sets are held out of its one corpus."""
    write_tsv(folder / "corpus.tsv", PAIRS)
    raw = {
        "experiment_dir": "exp",
        "data": {
            "train": {"tsv": "corpus.tsv"},
            "dev": {"split": 20},
            "test": {"split": 30},
            "subwords": {"type": "char", "vocab_size": 30, "joint": True},
            "batch_size": 16,
        },
        "model": {"embedding_size": 8, "encoder_hidden": 8, "decoder_hidden": 8, "attention_size": 8, "dropout": 0.0},
        "training": {
            "max_steps": 2,
            "validate_every": 2,
            "log_every": 1,
            "threads": 1,
            "early_stopping_metric": "loss",
            **training,
        },
        "decoding": {"beam": 1, "batch_size": 16},
    }
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def quiet(message):
    pass


# ------------------------------------------------------------------------------ point 5: held-out splits


def shifted(record):
    record["sets"]["test"] = [i + 1 for i in record["sets"]["test"]]


def dev_as_test(record):
    record["sets"]["test"] = record["sets"]["dev"] + record["sets"]["test"][:10]


def duplicated(record):
    record["sets"]["test"][1] = record["sets"]["test"][0]


def past_the_end(record):
    record["sets"]["test"][-1] = len(PAIRS)


def negative(record):
    record["sets"]["test"][0] = -1


def strings(record):
    record["sets"]["test"] = [str(i) for i in record["sets"]["test"]]


def floats(record):
    record["sets"]["test"] = [i + 0.0 for i in record["sets"]["test"]]


def emptied(record):
    record["sets"]["test"] = []


def missing_set(record):
    del record["sets"]["test"]


def missing_field(record):
    del record["sets"]


def training_pairs_as_test(record):  # the test pairs swapped for others, sizes kept
    record["sets"]["test"] = sorted(set(range(len(PAIRS))) - set(record["sets"]["dev"]))[:30]


BENT_RECORDS = [
    (shifted, "not those seed 42 draws|is in another set too|outside the corpus"),
    (dev_as_test, "is in another set too"),
    (duplicated, "appears twice"),
    (past_the_end, "outside the corpus"),
    (negative, "outside the corpus"),
    (strings, "sets.test.0: Input should be a valid integer"),
    (floats, "sets.test.0: Input should be a valid integer"),
    (emptied, "sets.test: 0 line numbers for a set of 30"),
    (missing_set, "name different sets"),
    (missing_field, "sets: Field required"),
    (training_pairs_as_test, "not those seed 42 draws"),
]
BENT_FILES = [
    ("[1, 2, 3]", "Input should be an object"),
    ("{not json", "Invalid JSON"),
    ("", "Invalid JSON"),
    ("[" * 100_000 + "]" * 100_000, "held-out.json"),
]


def drawn_experiment(tmp_path):
    """The config of a fresh experiment whose held-out sets have just been drawn."""
    config = load_config(split_config(tmp_path))
    list(training_lines(config, quiet))
    return config, config.experiment_dir / "splits" / "held-out.json"


@pytest.mark.parametrize("bend, message", BENT_RECORDS, ids=[bend.__name__ for bend, _ in BENT_RECORDS])
def test_a_bent_held_out_record_is_refused(tmp_path, bend, message):
    config, path = drawn_experiment(tmp_path)
    record = json.loads(path.read_text())
    bend(record)
    path.write_text(json.dumps(record))
    with pytest.raises(AttnmtError, match=message) as error:
        list(training_lines(config, quiet))
    assert str(path) in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("text, message", BENT_FILES, ids=["list", "invalid", "empty", "deep"])
def test_a_held_out_record_that_is_not_one_is_refused(tmp_path, text, message):
    config, path = drawn_experiment(tmp_path)
    path.write_text(text)
    with pytest.raises(AttnmtError, match=message) as error:
        list(training_lines(config, quiet))
    assert str(path) in str(error.value) and "\n" not in str(error.value)


def test_an_edited_held_out_set_file_is_refused(tmp_path):
    config, _ = drawn_experiment(tmp_path)
    tsv = config.experiment_dir / "splits" / "test.tsv"
    tsv.write_text(tsv.read_text().replace("a", "b"))
    with pytest.raises(AttnmtError, match="the held-out set was changed after it was drawn") as error:
        list(training_lines(config, quiet))
    assert str(tsv) in str(error.value)


def test_a_record_written_before_the_checksums_is_checked_by_its_line_numbers(tmp_path):
    config, path = drawn_experiment(tmp_path)
    record = json.loads(path.read_text())
    del record["files"]  # as written before issue 27
    path.write_text(json.dumps(record))
    assert len(list(training_lines(config, quiet))) == len(PAIRS) - 50
    training_pairs_as_test(record)
    path.write_text(json.dumps(record))
    with pytest.raises(AttnmtError, match="not those seed 42 draws"):
        list(training_lines(config, quiet))


@pytest.fixture(scope="module")
def split_run(tmp_path_factory):
    """A tiny experiment trained for two steps, its dev and test sets held out (a few seconds)."""
    folder = tmp_path_factory.mktemp("split-run")
    assert run("train", split_config(folder), "--no-progress") == 0
    return folder


@pytest.mark.slow
def test_resume_and_evaluate_refuse_a_bent_split(split_run, capsys):
    exp = split_run / "exp"
    assert run("evaluate", exp) == 0
    path = exp / "splits" / "held-out.json"
    good = path.read_text()
    record = json.loads(good)
    dev_as_test(record)
    path.write_text(json.dumps(record))
    capsys.readouterr()
    resume = ("train", split_config(split_run, max_steps=4), "--resume", "--no-progress")
    for argv in (resume, ("evaluate", exp)):
        assert run(*argv) == 2
        [error] = [line for line in capsys.readouterr().err.splitlines() if line.startswith("attnmt: error")]
        assert f"{path}: sets." in error and "is in another set too" in error
    path.write_text(good)
    assert run(*resume) == 0
    assert run("evaluate", exp) == 0


# ------------------------------------------------------------------------------ point 7: evaluate stays in the folder


def with_test_sets(folder, tests: dict):
    """The model folder's config.yaml with these test sets added (as a hostile copy would)."""
    path = folder / "config.yaml"
    raw = yaml.safe_load(path.read_text())
    raw["data"]["test"] = {**raw["data"]["test"], **tests}
    path.write_text(yaml.safe_dump(raw))


@pytest.mark.slow
def test_evaluate_reads_no_test_set_outside_the_model_folder(split_run, tmp_path, capsys):
    folder = tmp_path / "model"
    shutil.copytree(split_run / "exp", folder)
    outside = write_tsv(tmp_path / "outside.tsv", PAIRS[:5])
    (folder / "link.tsv").symlink_to(outside)
    hypotheses = tmp_path / "hyp"
    for tests, named in (
        ({"passwd": {"tsv": "/etc/passwd"}}, "/etc/passwd"),
        ({"up": {"tsv": "../outside.tsv"}}, str(outside)),
        ({"link": {"tsv": "link.tsv"}}, str(outside)),
        ({"two": {"src": str(outside), "tgt": "/etc/hostname"}}, str(outside)),
    ):
        shutil.copy(split_run / "exp" / "config.yaml", folder / "config.yaml")
        with_test_sets(folder, tests)
        capsys.readouterr()
        assert run("evaluate", folder, "--hypotheses", hypotheses) == 2
        [error] = [line for line in capsys.readouterr().err.splitlines() if line.startswith("attnmt: error")]
        assert f"test set {next(iter(tests))} names {named}, outside the model folder" in error
        assert not list(tmp_path.glob("hyp*"))  # nothing read, nothing written
    # the user's own files stay allowed: --tsv, --src/--ref, or the config's sets with --trust-config
    assert run("evaluate", folder, "--tsv", outside, "--hypotheses", hypotheses) == 0
    assert len(hypotheses.read_text().splitlines()) == 5
    shutil.copy(split_run / "exp" / "config.yaml", folder / "config.yaml")
    with_test_sets(folder, {"up": {"tsv": "../outside.tsv"}})
    assert run("evaluate", folder, "--trust-config", "--json", tmp_path / "r.json") == 0
    assert set(json.loads((tmp_path / "r.json").read_text())) == {"test", "up"}


def test_the_sound_files_of_a_speech_test_set_must_lie_in_the_folder_too(tmp_path):
    folder = tmp_path / "model"
    (folder / "test").mkdir(parents=True)
    tsv = folder / "test" / "test.tsv"
    from attnmt.speech.recognizer import Recognizer

    model = SimpleNamespace(
        folder=folder,
        config=SimpleNamespace(task="speech", data=SimpleNamespace(held_out={})),
        test_sets={"test": CorpusFiles(tsv=tsv)},
        files_of_test_set=lambda files: Recognizer.files_of_test_set(None, files),
    )
    tsv.write_text("a.wav\tone\n../b.wav\ttwo\n")
    assert config_test_sets(model) == model.test_sets
    tsv.write_text("a.wav\tone\n../../b.wav\ttwo\n/etc/passwd\tthree\n")
    with pytest.raises(AttnmtError, match="test set test names .*b.wav, outside the model folder"):
        config_test_sets(model)
    assert config_test_sets(model, trust=True) == model.test_sets


# ------------------------------------------------------------------------------ point 6: attnmt compare


@pytest.mark.parametrize("name", ["..", ".", "", " ", "../escape", "a/b", ".hidden", "a\\b"])
def test_variant_names_that_are_not_plain_file_names_are_refused(tmp_path, capsys, name):
    config, out = toy_experiment(tmp_path), tmp_path / "out"
    before = set(tmp_path.iterdir())
    assert run("compare", config, "--variant", f"{name}:model.attention=none", "--steps", 1, "--out", out) == 2
    assert "must be a plain file name" in capsys.readouterr().err
    assert set(tmp_path.iterdir()) == before  # nothing written, in --out or beside it
    with pytest.raises(AttnmtError, match="plain file name"):
        Comparison(config, [Variant(name, {})], out)


HOLD_THE_LOCK = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)  # as attnmt.compare.locked does (without importing attnmt: faster)
os.write(fd, f"{os.getpid()}\\n".encode())
print("locked", flush=True)
sys.stdin.read()
"""


def test_two_compares_on_one_out_folder_cannot_run_at_once(tmp_path, capsys):
    config, out = toy_experiment(tmp_path), tmp_path / "out"
    out.mkdir()
    lock = out / "compare.lock"
    other = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_LOCK, str(lock)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert other.stdout.readline() == "locked\n"
        assert run("compare", config, "--variant", "b:model.attention=none", "--steps", 1, "--out", out) == 2
        [error] = [line for line in capsys.readouterr().err.splitlines() if line.startswith("attnmt: error")]
        assert f"{lock}: another attnmt compare (process {other.pid}) is working in {out}" in error
        assert sorted(p.name for p in out.iterdir()) == ["compare.lock"]  # nothing prepared or trained
    finally:
        other.communicate("")
    with locked(lock):  # free once the other process has ended
        assert lock.read_text() == f"{os.getpid()}\n"


BENT_RESULTS = [
    ("{not json", "Invalid JSON"),
    ("", "Invalid JSON"),
    ("[]", "Input should be an object"),
    ("[" * 100_000 + "]" * 100_000, "recursion limit"),
    ('"steps": 2,', '"steps": "2",', "steps: Input should be a valid integer"),
    ('"reverse": false', '"reverse": 0', "reverse: Input should be a valid boolean"),
    ('"score": ', '"score": NaN, "x": ', "tests.test.bleu.score: Input should be a finite number"),
    ('"score": ', '"score": 1e999, "x": ', "tests.test.bleu.score: Input should be a finite number"),
    ('"score": ', '"score": "high", "x": ', "tests.test.bleu.score: Input should be a valid number"),
    ('"by_length": [', '"by_length": [{}, ', "tests.test.by_length.0.low: Field required"),
    ('"seed": 42', '"seed": 7', "seed: 7, but the run in this folder has 42"),
]


@pytest.mark.slow
def test_hand_edited_results_are_refused_naming_the_file_and_field(tmp_path, capsys):
    config, out = toy_experiment(tmp_path), tmp_path / "out"
    argv = ("compare", config, "--variant", "b:model.attention=bahdanau", "--steps", 2, "--out", out, "--no-progress")
    assert run(*argv) == 0
    path = out / "b" / "seed42" / "results.json"
    good = path.read_text()
    for *edit, message in BENT_RESULTS:
        assert len(edit) == 1 or edit[0] in good, edit
        path.write_text(edit[0] if len(edit) == 1 else good.replace(edit[0], edit[1], 1))
        capsys.readouterr()
        assert run(*argv) == 2, edit
        [error] = [line for line in capsys.readouterr().err.splitlines() if line.startswith("attnmt: error")]
        assert error.startswith(f"attnmt: error: {path}: ") and message in error, error
    path.write_text(good)
    assert run(*argv) == 0
    # the held-out test set that every run is scored on, edited: refused too
    test_set = out / "shared" / "splits" / "test.tsv"
    test_set.write_text(test_set.read_text().replace("a", "b"))
    assert run(*argv) == 2
    assert f"{test_set}: the held-out set was changed after it was drawn" in capsys.readouterr().err


@pytest.mark.parametrize(
    "schema, text, message",
    [
        (ALIGNMENT_ROWS, '{"a": 1}', "Input should be a valid array"),
        (
            ALIGNMENT_ROWS,
            '[{"attention": "x", "shift": false, "links": "argmax", "scores": {"forward": {"aer": Infinity, '
            '"precision": 1, "recall": 1, "sentences": 2}}}]',
            "0.scores.forward.aer: .* finite number",
        ),
        (
            ALIGNMENT_ROWS,
            '[{"attention": "x", "shift": false, "links": "argmax", "scores": {"forward": {"aer": 1e400, '
            '"precision": 1, "recall": 1, "sentences": 2}}}]',
            "0.scores.forward.aer: Input should be a",
        ),
        (
            STATISTICAL_SCORES,
            '{"IBM1": {"forward": {"aer": "0.3"}}}',
            "IBM1.forward.aer: Input should be a valid number",
        ),
        (STATISTICAL_SCORES, "[" * 50_000, "Invalid JSON"),
    ],
)
def test_alignment_results_are_validated_too(tmp_path, schema, text, message):
    path = tmp_path / "scores.json"
    path.write_text(text)
    with pytest.raises(AttnmtError, match=message) as error:
        read_results(path, schema)
    assert str(error.value).startswith(f"{path}: ")
