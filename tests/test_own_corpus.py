"""One corpus file in, a model and its scores out: dev and test sets held out of the training
corpus, named test sets scored at the end of training and by `attnmt evaluate`, TSV test sets,
per-line bounds and the device option of the command line."""

import json

import pytest
import torch
import yaml

from attnmt.cli import main
from attnmt.core.config import load_config
from attnmt.core.errors import AttnmtError
from attnmt.data.corpus import read_tsv
from attnmt.translation.prepare import training_lines
from conftest import random_strings, reverse, write_tsv

PAIRS = [(s, reverse(s)) for s in random_strings(600, 3, 8, seed=11)]


def config_file(folder, **data):
    raw = {
        "experiment_dir": "exp",
        "data": {
            "train": {"tsv": "corpus.tsv"},
            "subwords": {"type": "char", "vocab_size": 40},
            "batch_size": 32,
            **data,
        },
        "model": {
            "embedding_size": 16,
            "encoder_hidden": 16,
            "decoder_hidden": 32,
            "attention_size": 16,
            "dropout": 0.0,
        },
        "training": {
            "max_steps": 40,
            "validate_every": 20,
            "log_every": 10,
            "threads": 1,
            "learning_rate": 0.01,
            "early_stopping_metric": "loss",
        },
        "decoding": {"beam": 2, "batch_size": 50},
    }
    write_tsv(folder / "corpus.tsv", PAIRS)
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


HELD_OUT = {"dev": {"split": 50}, "test": {"held-out": {"split": 80}, "extra": {"tsv": "extra.tsv"}}}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("own-corpus")
    write_tsv(folder / "extra.tsv", [(s, reverse(s)) for s in random_strings(30, 3, 8, seed=12)])
    path = config_file(folder, **HELD_OUT)
    assert main(["train", str(path), "--no-progress"]) == 0
    return folder, path, folder / "exp"


@pytest.mark.slow
def test_held_out_sets_are_drawn_once_disjoint_and_never_trained_on(run_dir):
    folder, path, exp = run_dir
    record = json.loads((exp / "splits" / "held-out.json").read_text())
    sets = record["sets"]
    assert {name: len(lines) for name, lines in sets.items()} == {"dev": 50, "held-out": 80}
    assert not set(sets["dev"]) & set(sets["held-out"])
    for name, lines in sets.items():  # the files hold exactly those pairs
        held = read_tsv(exp / "splits" / f"{name}.tsv")
        assert list(zip(held.sources, held.targets)) == [PAIRS[i] for i in lines]
    config = load_config(path)
    train = [(s, t) for _, s, t in training_lines(config, log=lambda m: None)]  # read back, not drawn again
    assert len(train) == len(PAIRS) - 130
    assert not {p for i in sets["dev"] + sets["held-out"] for p in [PAIRS[i]]} & set(train)
    config.training.seed = 7  # another seed, same folder: refused, not a silent new split
    with pytest.raises(AttnmtError, match="held-out sets were drawn from another corpus or with other settings"):
        list(training_lines(config, log=lambda m: None))


@pytest.mark.slow
def test_training_ends_by_scoring_every_test_set(run_dir):
    _, _, exp = run_dir
    scores = json.loads((exp / "test-scores.json").read_text())
    assert set(scores) == {"held-out", "extra"}
    assert scores["held-out"]["sentences"] == 80 and scores["extra"]["sentences"] == 30
    records = [json.loads(line) for line in (exp / "metrics.jsonl").read_text().splitlines()]
    tests = {r["name"]: r for r in records if r["type"] == "test"}
    assert set(tests) == {"held-out", "extra"}
    assert tests["extra"]["bleu"] == pytest.approx(scores["extra"]["bleu"]["score"])


@pytest.mark.slow
def test_evaluate_scores_the_configs_test_sets_by_default(run_dir, tmp_path, capsys):
    _, _, exp = run_dir
    report = tmp_path / "report.json"
    # (--trust-config: the extra set lies beside the experiment folder, not in it)
    assert (
        main(["evaluate", str(exp), "--trust-config", "--json", str(report), "--hypotheses", str(tmp_path / "hyp")])
        == 0
    )
    out = capsys.readouterr().out
    assert "== test set held-out (beam 2)" in out and "== test set extra (beam 2)" in out
    reports = json.loads(report.read_text())
    scores = json.loads((exp / "test-scores.json").read_text())
    assert {name: r["bleu"]["score"] for name, r in reports.items()} == {
        name: r["bleu"]["score"] for name, r in scores.items()
    }
    assert len((tmp_path / "hyp.extra").read_text().splitlines()) == 30


@pytest.mark.slow
def test_evaluate_a_tsv_test_set_with_chosen_columns(run_dir, tmp_path, capsys):
    _, _, exp = run_dir
    swapped = tmp_path / "swapped.tsv"
    swapped.write_text("".join(f"{t}\tx\t{s}\n" for s, t in PAIRS[:20]))
    assert (
        main(
            [
                "evaluate",
                str(exp),
                "--tsv",
                str(swapped),
                "--src-column",
                "2",
                "--tgt-column",
                "0",
                "--json",
                str(tmp_path / "r.json"),
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "r.json").read_text())["sentences"] == 20
    assert main(["evaluate", str(exp), "--tsv", str(swapped), "--src-column", "5"]) == 2
    assert "line 1 has 3 tab-separated column(s)" in capsys.readouterr().err


@pytest.mark.slow
def test_a_tsv_given_as_source_is_warned_about(run_dir, tmp_path, capsys):
    folder, _, exp = run_dir
    tsv = folder / "corpus.tsv"
    assert main(["evaluate", str(exp), "--src", str(tsv), "--ref", str(tsv)]) == 0
    assert "WARNING: 600 of the 600 lines of" in capsys.readouterr().err


@pytest.mark.slow
def test_over_long_lines_are_cut_with_a_warning_and_every_line_is_written(run_dir, tmp_path, capsys):
    _, _, exp = run_dir
    lines = ["abc", "abcdefghij" * 300, "", "hgf"]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    assert (
        main(
            [
                "translate",
                str(exp),
                "-i",
                str(tmp_path / "in.txt"),
                "-o",
                str(tmp_path / "out.txt"),
                "--max-tokens",
                "50",
                "--beam",
                "3",
            ]
        )
        == 0
    )
    assert len((tmp_path / "out.txt").read_text().splitlines()) == 4
    err = capsys.readouterr().err
    assert "line 2: more than 50 subword tokens; its first 50 were translated" in err
    assert "line 1" not in err and "line 4" not in err


@pytest.mark.slow
def test_beam_and_device_are_checked_on_the_command_line(run_dir, tmp_path, capsys):
    _, _, exp = run_dir
    (tmp_path / "in.txt").write_text("abc\n")
    with pytest.raises(SystemExit) as usage_error:
        main(["translate", str(exp), "-i", str(tmp_path / "in.txt"), "--beam", "101"])
    assert usage_error.value.code == 2 and "must be at most 100" in capsys.readouterr().err
    assert (
        main(
            ["translate", str(exp), "-i", str(tmp_path / "in.txt"), "--device", "cpu", "-o", str(tmp_path / "out.txt")]
        )
        == 0
    )
    if not torch.cuda.is_available():
        for command in (
            ["translate", str(exp), "-i", str(tmp_path / "in.txt")],
            ["evaluate", str(exp)],
            ["plot", str(exp), "abc", "--out", str(tmp_path / "a.png")],
            ["align", str(exp), "--src", str(tmp_path / "in.txt"), "--tgt", str(tmp_path / "in.txt")],
        ):
            assert main([*command, "--device", "cuda"]) == 2
            assert "CUDA is not available here" in capsys.readouterr().err


def test_held_out_sets_larger_than_the_corpus_are_refused(tmp_path):
    path = config_file(tmp_path, dev={"split": 400}, test={"split": 300})
    assert main(["prepare", str(path)]) == 2


def test_subwords_trained_before_the_sets_were_held_out_are_refused(tmp_path, capsys):
    path = config_file(tmp_path)
    assert main(["prepare", str(path)]) == 0
    raw = yaml.safe_load(path.read_text())
    raw["data"]["dev"] = {"split": 20}
    path.write_text(yaml.safe_dump(raw))
    assert main(["prepare", str(path)]) == 2
    assert "trained before the held-out sets" in capsys.readouterr().err
    assert main(["prepare", str(path), "--force"]) == 0
    assert (tmp_path / "exp" / "splits" / "dev.tsv").is_file()
