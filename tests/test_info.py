"""`attnmt info MODEL_DIR`: a model folder's task, sizes, data, training and scores (issue 28)."""

import contextlib
import io
import json
import re

from attnmt.cli import main


def run(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def records(folder) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]


def test_info_shows_task_sizes_data_training_and_scores(reverse_model):
    model, _ = reverse_model
    code, out, err = run("info", model.folder)
    assert code == 0, err
    parameters = sum(p.numel() for p in model.model.parameters())
    best = [r for r in records(model.folder) if r["type"] == "valid" and r.get("best")][-1]
    lines = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in out.splitlines())  # name  value
    assert lines["task"] == "translation"
    assert lines["parameters"] == f"{parameters:,}"
    assert lines["vocabularies"].startswith(f"source {len(model.src_subwords):,}, target {len(model.tgt_subwords):,}")
    assert lines["model"].startswith("rnn, bahdanau attention")
    train = model.config.data.train
    assert lines["data train"] == (str(train.tsv) if train.tsv else f"{train.src} + {train.tgt}")
    assert lines["best validation"].startswith(f"step {best['step']}, loss ")
    assert lines["trained"].startswith(f"{max(r['step'] for r in records(model.folder)):,} steps")

    code, out, _ = run("info", model.folder, "--json")
    info = json.loads(out)
    assert info["parameters"] == parameters and info["task"] == "translation"
    assert info["scores"]["best validation"]["loss"] == best["loss"]


def test_info_of_a_folder_that_is_not_a_model(tmp_path):
    code, _, err = run("info", tmp_path)
    assert code == 2 and "attnmt: error:" in err and "not a model folder" in err and "Traceback" not in err
