"""The command line end to end on a slice of Multi30k, and its handling of bad data and bad input."""

import contextlib
import gzip
import io
import json
import re
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from attnmt.api import load
from attnmt.cli import main
from conftest import random_strings, reverse, shared_data

TRAIN_PAIRS, DEV_PAIRS, TEST_PAIRS = 2000, 100, 40


def head(path: Path, n: int) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(n)]


def write_lines(path: Path, lines) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def write_config(path: Path, raw: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def run(*argv) -> tuple[int, str, str]:
    """Runs the CLI in-process; returns (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def assert_ok(result):
    code, _, err = result
    assert code == 0, err
    assert "Traceback" not in err


def assert_user_error(result, *fragments) -> str:
    """Exit code 2, one 'attnmt: error:' message naming every fragment, no traceback."""
    code, _, err = result
    assert code == 2, err
    assert "Traceback" not in err
    message = err[err.index("attnmt: error:") :] if "attnmt: error:" in err else err
    assert message.startswith("attnmt: error:"), err
    for fragment in fragments:
        assert str(fragment) in message, (fragment, message)
    return message


def metrics(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


# ---------------------------------------------------------------- end to end on Multi30k


def multi30k_config(folder: Path, max_steps: int = 30, experiment_dir: str = "exp") -> dict:
    return {
        "experiment_dir": experiment_dir,
        "data": {
            "train": {"src": "train.de", "tgt": "train.en"},
            "dev": {"src": "val.de", "tgt": "val.en"},
            "subwords": {"type": "bpe", "vocab_size": 500, "joint": True},
            "batch_size": 32,
        },
        "model": {
            "embedding_size": 32,
            "encoder_hidden": 32,
            "decoder_hidden": 64,
            "attention_size": 32,
            "dropout": 0.0,
        },
        "training": {
            "max_steps": max_steps,
            "validate_every": 30,
            "log_every": 10,
            "threads": 1,
            "learning_rate": 0.005,
            "early_stopping_patience": None,
        },
        "decoding": {"beam": 2, "batch_size": 50, "max_length_ratio": 1.0, "max_length_offset": 3},
    }


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """`attnmt prepare` and `attnmt train` on 2000 Multi30k pairs (de->en), with plain-text files."""
    folder = tmp_path_factory.mktemp("multi30k")
    multi30k = shared_data("multi30k")
    for lang in ("de", "en"):
        write_lines(folder / f"train.{lang}", head(multi30k / f"train.{lang}.gz", TRAIN_PAIRS))
        write_lines(folder / f"val.{lang}", head(multi30k / f"val.{lang}.gz", DEV_PAIRS))
        write_lines(folder / f"test.{lang}", head(multi30k / f"test_2016_flickr.{lang}.gz", TEST_PAIRS))
    config = write_config(folder / "config.yaml", multi30k_config(folder))
    prepared = run("prepare", config)
    trained = run("train", config, "--no-progress")
    return SimpleNamespace(
        folder=folder,
        config=config,
        model=folder / "exp",
        prepared=prepared,
        trained=trained,
        test_src=(folder / "test.de").read_text().splitlines(),
    )


def test_prepare_and_train(trained):
    assert_ok(trained.prepared)
    assert_ok(trained.trained)
    assert "trained joint bpe subwords (500) on 2000 pairs" in trained.prepared[2]
    assert "subword model(s) already in" in trained.trained[2]  # train reuses what prepare made
    assert "finished at step 30" in trained.trained[2]
    for name in ("config.yaml", "spm/joint.model", "best.safetensors", "last.safetensors", "metrics.jsonl"):
        assert (trained.model / name).is_file(), name
    records = metrics(trained.model)
    assert [r["step"] for r in records if r["type"] == "valid"] == [30]
    assert [r["step"] for r in records if r["type"] == "train"] == [10, 20, 30]
    # The copy of the config in the model folder has absolute paths: the folder works from anywhere.
    saved = yaml.safe_load((trained.model / "config.yaml").read_text())
    assert Path(saved["data"]["train"]["src"]) == trained.folder / "train.de"
    assert Path(saved["experiment_dir"]) == trained.model


def test_translate_file_keeps_lines_in_order_and_empty_lines_empty(trained, tmp_path):
    lines = trained.test_src[:3] + [""] + trained.test_src[3:6] + ["   "]
    source = write_lines(tmp_path / "in.de", lines)
    out = tmp_path / "out.en"
    code, stdout, err = run("translate", trained.model, "-i", source, "-o", out)
    assert_ok((code, stdout, err))
    assert stdout == ""
    written = out.read_text(encoding="utf-8")
    assert written.endswith("\n")
    hypotheses = written.split("\n")[:-1]
    assert len(hypotheses) == len(lines)
    assert hypotheses[3] == "" and hypotheses[7] == ""
    # In order: each line is what the model gives for that sentence alone.
    model = load(trained.model)
    alone = [model.translate([line], batch_size=1)[0].text for line in lines]
    assert hypotheses == alone


def test_translate_nbest_format_and_order(trained, tmp_path):
    lines = trained.test_src[:6]
    source = write_lines(tmp_path / "in.de", lines)
    code, stdout, err = run("translate", trained.model, "-i", source, "--n-best", 2, "--beam", 2)
    assert_ok((code, stdout, err))
    rows = stdout.splitlines()
    assert len(rows) == 2 * len(lines)
    pattern = re.compile(r"^(\d+) \|\|\| (.*) \|\|\| (-?\d+\.\d{4})$")
    parsed = []
    for row in rows:
        match = pattern.match(row)
        assert match, row
        parsed.append((int(match[1]), match[2], float(match[3])))
    assert [i for i, _, _ in parsed] == [i for i in range(len(lines)) for _ in range(2)]
    for i in range(len(lines)):
        (_, text1, score1), (_, text2, score2) = parsed[2 * i : 2 * i + 2]
        assert score1 >= score2  # best first
        # Scores depend on the sentence, so they show that sentence i really is line i.
        alone = load(trained.model).translate([lines[i]], beam=2, n_best=2, batch_size=1)[0]
        assert [c.text for c in alone.candidates] == [text1, text2]
        assert [c.score for c in alone.candidates] == pytest.approx([score1, score2], abs=2e-4)
    assert len({round(s, 4) for _, _, s in parsed[::2]}) > 1


def test_translate_from_stdin_to_stdout(trained, monkeypatch, tmp_path):
    lines = trained.test_src[:4]
    data = ("\r\n".join(lines[:2]) + "\r\n\n" + "\n".join(lines[2:])).encode("utf-8")  # CRLF, no final newline
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=io.BytesIO(data)))
    code, stdout, err = run("translate", trained.model)
    assert_ok((code, stdout, err))
    expected = [t.text for t in load(trained.model).translate(lines[:2] + [""] + lines[2:])]
    assert stdout.split("\n")[:-1] == expected
    assert expected[2] == ""


def test_translate_n_best_larger_than_beam_is_refused(trained, tmp_path):
    source = write_lines(tmp_path / "in.de", trained.test_src[:2])
    assert_user_error(run("translate", trained.model, "-i", source, "--n-best", 3, "--beam", 2), "--n-best")
    # Without --beam, the beam of the model's config (2) is the limit.
    assert_user_error(run("translate", trained.model, "-i", source, "--n-best", 3), "--n-best", "beam")


def test_translate_to_an_unwritable_output(trained, tmp_path):
    source = write_lines(tmp_path / "in.de", trained.test_src[:2])
    out = tmp_path / "missing" / "out.en"
    assert_user_error(run("translate", trained.model, "-i", source, "-o", out), out)
    assert_user_error(run("translate", trained.model, "-i", source, "-o", tmp_path), tmp_path)


def test_evaluate_writes_json_report(trained, tmp_path):
    report_path, hyp_path = tmp_path / "report.json", tmp_path / "hyp.en"
    code, stdout, err = run(
        "evaluate",
        trained.model,
        "--src",
        trained.folder / "test.de",
        "--ref",
        trained.folder / "test.en",
        "--json",
        report_path,
        "--hypotheses",
        hyp_path,
    )
    assert_ok((code, stdout, err))
    report = json.loads(report_path.read_text())
    assert "tok:13a" in report["bleu"]["signature"]
    assert 0 <= report["bleu"]["score"] <= 100
    assert 0 < report["chrf"]["score"] <= 100 and "chrF" in report["chrf"]["detail"]
    assert report["sentences"] == TEST_PAIRS and report["beam"] == 2
    assert isinstance(report["by_length"], list) and report["by_length"]
    assert sum(b["sentences"] for b in report["by_length"]) == TEST_PAIRS
    assert len(hyp_path.read_text().split("\n")[:-1]) == TEST_PAIRS
    assert stdout.startswith("BLEU ") and "chrF" in stdout and "source words" in stdout


def test_evaluate_with_misaligned_files(trained, tmp_path):
    ref = write_lines(tmp_path / "ref.en", ["one line"])
    assert_user_error(
        run("evaluate", trained.model, "--src", trained.folder / "test.de", "--ref", ref),
        "line counts differ",
        "test.de",
        TEST_PAIRS,
        "ref.en",
        1,
    )


def test_train_resume_continues(trained, tmp_path):
    # A copy of the trained folder, so the other tests keep theirs.
    model = tmp_path / "exp"
    shutil.copytree(trained.model, model)
    raw = multi30k_config(trained.folder, max_steps=40, experiment_dir=str(model))
    config = write_config(trained.folder / "resume.yaml", raw)
    # Without --resume the trained folder is not overwritten.
    assert_user_error(run("train", config, "--no-progress"), "--resume")
    code, _, err = run("train", config, "--resume", "--no-progress")
    assert_ok((code, _, err))
    assert "resumed from" in err and "at step 30" in err
    assert "finished at step 40" in err
    records = metrics(model)
    assert [r["step"] for r in records if r["type"] == "train"] == [10, 20, 30, 40]
    assert [r["step"] for r in records if r["type"] == "valid"] == [30, 40]
    assert metrics(trained.model) == records[: len(metrics(trained.model))]


def test_translate_a_folder_that_is_not_a_model(tmp_path):
    assert_user_error(
        run("translate", tmp_path, "-i", write_lines(tmp_path / "in", ["a"])), "not a model folder", tmp_path
    )
    assert_user_error(
        run("evaluate", tmp_path / "nothing", "--src", tmp_path / "in", "--ref", tmp_path / "in"), "not a model folder"
    )


def test_the_folder_around_a_model_names_the_model_inside(tmp_path):
    """attnmt quickstart's layout: data, config.yaml and the model in model/ (issue 28)."""
    (tmp_path / "model").mkdir()
    for name in ("config.yaml", "best.safetensors"):
        (tmp_path / "model" / name).write_text("", encoding="utf-8")
    (tmp_path / "config.yaml").write_text("experiment_dir: model\n", encoding="utf-8")
    message = assert_user_error(
        run("translate", tmp_path, "-i", write_lines(tmp_path / "in", ["a"])), f"did you mean {tmp_path / 'model'}?"
    )
    assert "prepare" not in message


def test_translate_a_prepared_but_untrained_folder(tmp_path):
    config = toy_files(tmp_path, [("abc", "cba")] * 10)
    assert_ok(run("prepare", config))
    assert_user_error(run("translate", tmp_path / "exp", "-i", tmp_path / "train.src"), "no such checkpoint")


# ---------------------------------------------------------------- bad data through the CLI


def toy_files(folder: Path, pairs=None, src_text=None, tgt_text=None, suffix="", **data) -> Path:
    """Writes a training corpus (from pairs, or raw bytes/text per side) and a tiny char-level config."""
    if pairs is not None:
        src_text = "".join(s + "\n" for s, _ in pairs)
        tgt_text = "".join(t + "\n" for _, t in pairs)
    for name, content in ((f"train.src{suffix}", src_text), (f"train.tgt{suffix}", tgt_text)):
        if content is not None:
            (folder / name).write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    raw = {
        "experiment_dir": "exp",
        "data": {
            "train": {"src": f"train.src{suffix}", "tgt": f"train.tgt{suffix}"},
            "subwords": {"type": "char", "vocab_size": 30},
            "batch_size": 16,
            **data,
        },
        "model": {"embedding_size": 8, "encoder_hidden": 8, "decoder_hidden": 8, "attention_size": 8},
        "training": {"max_steps": 2, "validate_every": 2, "threads": 1},
    }
    return write_config(folder / "config.yaml", raw)


TOY = [(s, reverse(s)) for s in random_strings(60, 3, 8, seed=11)]


@pytest.mark.parametrize("argv", [["prepare"], ["train", "--no-progress"]])
def test_line_counts_differ(tmp_path, argv):
    config = toy_files(tmp_path, src_text="a\nb\nc\n", tgt_text="x\ny\n")
    message = assert_user_error(
        run(argv[0], config, *argv[1:]), "line counts differ", "train.src", "has 3 lines", "train.tgt", "has 2"
    )
    assert message.count("\n") == 1  # one line, no dump


def test_invalid_utf8_names_file_and_line(tmp_path):
    config = toy_files(tmp_path, src_text="abc\ndef\n", tgt_text=b"cba\nf\xe9d\n")
    assert_user_error(run("train", config, "--no-progress"), "train.tgt", "line 2", "UTF-8")


def test_invalid_utf8_in_gzip_file(tmp_path):
    config = toy_files(
        tmp_path, src_text=gzip.compress(b"a\nb\n\xff\n"), tgt_text=gzip.compress(b"x\ny\nz\n"), suffix=".gz"
    )
    assert_user_error(run("train", config, "--no-progress"), "train.src.gz", "line 3", "UTF-8")


def test_empty_corpus(tmp_path):
    config = toy_files(tmp_path, src_text="", tgt_text="")
    assert_user_error(run("prepare", config), "empty corpus", "train.src", "train.tgt")


def test_corpus_of_blank_lines_is_empty(tmp_path):
    config = toy_files(tmp_path, src_text="a\n \nb\n", tgt_text="\nx\n\t\n")
    assert_user_error(run("train", config, "--no-progress"), "empty corpus")


def test_missing_corpus_file(tmp_path):
    config = toy_files(tmp_path, src_text="abc\n")  # no target file
    assert_user_error(run("train", config, "--no-progress"), "train.tgt", "no such file")


def test_corrupted_gzip(tmp_path):
    good = gzip.compress("".join(s + "\n" for s, _ in TOY).encode())
    config = toy_files(tmp_path, src_text=good, tgt_text=good[: len(good) // 2], suffix=".gz")
    assert_user_error(run("train", config, "--no-progress"), "train.tgt.gz", "gzip")


def test_missing_dev_file(tmp_path):
    config = toy_files(tmp_path, TOY, dev={"src": "dev.src", "tgt": "dev.tgt"})
    assert_user_error(run("train", config, "--no-progress"), "dev.src", "no such file")


def test_training_corpus_of_a_directory(tmp_path):
    (tmp_path / "train.src").mkdir()
    config = toy_files(tmp_path, tgt_text="abc\n")
    assert_user_error(run("prepare", config), "train.src", "directory")


def test_dropped_pairs_are_reported(tmp_path):
    long = "abcdefghij" * 5
    pairs = TOY[:20] + [("", "abc"), (long, reverse(long)), ("abc", "   ")] + TOY[20:]
    config = toy_files(tmp_path, pairs, max_length=20)
    code, _, err = run("train", config, "--no-progress")
    assert_ok((code, _, err))
    assert re.search(r"train\.src: dropped 1 pair\(s\) longer than 20 subwords", err), err
    assert re.search(r"train\.src: dropped 2 pair\(s\) with an empty side", err), err
    assert f"{len(TOY) + 1:,} training pairs" not in err and f"{len(TOY):,} training pairs" in err


def test_dropped_dev_pairs_are_reported(tmp_path):
    write_lines(tmp_path / "dev.src", ["abc", "", "de"])
    write_lines(tmp_path / "dev.tgt", ["cba", "x", "ed"])
    config = toy_files(tmp_path, TOY, dev={"src": "dev.src", "tgt": "dev.tgt"})
    code, _, err = run("train", config, "--no-progress")
    assert_ok((code, _, err))
    assert re.search(r"dev\.src: dropped 1 pair\(s\) with an empty side", err), err


def test_all_pairs_too_long_is_an_error_not_a_hang(tmp_path):
    config = toy_files(tmp_path, TOY, max_length=2)
    assert_user_error(run("train", config, "--no-progress"), "train.src", "max_length")


def test_all_pairs_too_long_with_a_token_budget(tmp_path):
    config = toy_files(tmp_path, TOY, max_length=2, batch_tokens=100)
    assert_user_error(run("train", config, "--no-progress"), "train.src", "max_length")


def test_translate_input_errors(tmp_path):
    config = toy_files(tmp_path, TOY)
    assert_ok(run("train", config, "--no-progress"))
    assert_user_error(run("translate", tmp_path / "exp", "-i", tmp_path / "nope.txt"), "nope.txt", "no such file")
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"abc\n\xc3(\n")
    assert_user_error(run("translate", tmp_path / "exp", "-i", bad), "bad.txt", "line 2")
    out = tmp_path / "out.txt"
    assert_ok(run("translate", tmp_path / "exp", "-i", write_lines(tmp_path / "ok.txt", ["abc", "", "de"]), "-o", out))
    assert len(out.read_text().split("\n")[:-1]) == 3


# ---------------------------------------------------------------- help and usage


@pytest.mark.parametrize("command", ["prepare", "train", "translate", "evaluate", "quickstart", "info"])
def test_help_exits_0(command, capsys):
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    assert "usage: attnmt " + command in capsys.readouterr().out


def test_help_names_the_explorer_and_every_figure_format(capsys):
    for command, words in (("serve", ["explorer", "/docs"]), ("plot", ["GIF", "HTML", "PNG", "SVG"])):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = capsys.readouterr().out
        assert all(word in text for word in words), (command, text)
    with pytest.raises(SystemExit):
        main(["--help"])
    summary = capsys.readouterr().out
    assert "explorer page" in summary and "GIF" in summary and "info" in summary


def test_usage_errors_exit_2(capsys):
    for argv in ([], ["bogus"], ["translate"], ["translate", "m", "--beam", "0"]):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2, argv
    assert "must be at least 1" in capsys.readouterr().err


def test_version(capsys):
    from attnmt import __version__

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.strip() == f"attnmt {__version__}"


def test_the_program_exits_without_its_last_garbage_collection(monkeypatch):
    """`attnmt` (the console script and `python -m attnmt.cli`) runs main, then freezes the garbage
    collector so that the interpreter's exit skips a pass over torch's objects (0.25 s)."""
    import gc

    import attnmt.cli as cli

    calls = []
    monkeypatch.setattr(cli, "main", lambda: calls.append("main") or 3)
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    assert cli.command_line() == 3 and calls == ["main", "freeze"]
    scripts = (Path(cli.__file__).parents[3] / "pyproject.toml").read_text()
    assert 'attnmt = "attnmt.cli:command_line"' in scripts
    assert "sys.exit(command_line())" in (Path(cli.__file__).parent / "__main__.py").read_text()
