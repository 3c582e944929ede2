"""attnmt compare: variants from a grid or a list, trained on the same data, subwords and budget,
scored in one table with figures; a finished run is not trained again."""

import json
from importlib.util import find_spec

import numpy as np
import pytest

from attnmt.cli import main
from attnmt.compare import Variant, compare, grid, merged, parse_variant
from attnmt.core.errors import AttnmtError
from conftest import random_strings, require, reverse, write_tsv


def test_grid_is_every_combination_with_values_read_as_yaml():
    variants = grid(["model.attention=none,luong-dot", "model.input_feeding=true,false"])
    assert [v.name for v in variants] == [
        "attention=none,input_feeding=true",
        "attention=none,input_feeding=false",
        "attention=luong-dot,input_feeding=true",
        "attention=luong-dot,input_feeding=false",
    ]
    assert variants[3].overrides == {"model": {"attention": "luong-dot", "input_feeding": False}}


def test_listed_variants_inline_or_from_a_file(tmp_path):
    inline = parse_variant(
        "dot-no-feed:model.attention=luong-dot,model.input_feeding=false,training.adam_betas=[0.9, 0.98]"
    )
    assert inline == Variant(
        "dot-no-feed",
        {"model": {"attention": "luong-dot", "input_feeding": False}, "training": {"adam_betas": [0.9, 0.98]}},
    )
    path = tmp_path / "t.yaml"
    path.write_text("model: {type: transformer, heads: 2}\n")
    assert parse_variant(f"tr={path}") == Variant("tr", {"model": {"type": "transformer", "heads": 2}})
    # a file and fields set over it
    assert parse_variant(f"tr-sparse={path}:model.heads=4,model.attention_normalizer=entmax15") == Variant(
        "tr-sparse", {"model": {"type": "transformer", "heads": 4, "attention_normalizer": "entmax15"}}
    )
    with pytest.raises(AttnmtError, match="FIELD=VALUE"):
        parse_variant("bad:model.attention")
    with pytest.raises(AttnmtError, match="cannot read"):
        parse_variant(f"tr={tmp_path / 'missing.yaml'}")


def test_merged_merges_sections_and_replaces_values():
    assert merged({"model": {"a": 1, "b": 2}, "x": 1}, {"model": {"b": 3}}) == {"model": {"a": 1, "b": 3}, "x": 1}


def toy_experiment(tmp_path):
    """A config file for a toy task (reverse strings of a few words), test set held out of it."""
    rows = []
    for s in dict.fromkeys(random_strings(400, 2, 9, seed=3)):  # (unique: the held-out pairs are not in train)
        words = [s[i : i + 3] for i in range(0, len(s), 3)]
        rows.append((" ".join(words), " ".join(reverse(w) for w in reversed(words))))
    write_tsv(tmp_path / "train.tsv", rows)
    (tmp_path / "gold.pairs").write_text("abc def ||| fed cba\nabc ||| cba\n")
    (tmp_path / "gold.links").write_text("1-2 2-1\n1-1\n")
    config = tmp_path / "base.yaml"
    config.write_text("""experiment_dir: exp
data:
  train: {tsv: train.tsv}
  dev: {split: 30}
  test: {split: 24}
  subwords: {type: char, vocab_size: 30, joint: true}
  batch_size: 32
model: {embedding_size: 16, encoder_hidden: 16, decoder_hidden: 32, attention_size: 16, dropout: 0.0}
training: {max_steps: 50, validate_every: 4, log_every: 2, threads: 1, early_stopping_patience: null}
decoding: {beam: 2, batch_size: 16}
""")
    return config


def run_cli(*argv):
    return main([str(a) for a in argv])


@pytest.mark.slow  # (trains the runs it compares)
def test_compare_writes_the_table_and_figures_and_skips_finished_runs(tmp_path, capsys):
    config, out = toy_experiment(tmp_path), tmp_path / "out"
    argv = [
        "compare",
        config,
        "--vary",
        "model.attention=none,bahdanau",
        "--steps",
        4,
        "--seeds",
        2,
        "--join",
        "2",
        "--out",
        out,
        "--no-progress",
    ]
    assert run_cli(*argv) == 0
    table = json.loads((out / "results.json").read_text())
    assert table["variants"] == ["attention=none", "attention=bahdanau"]
    assert table["test_sets"] == ["test", "test-x2"]
    metrics = table["metrics"]["attention=bahdanau"]
    assert len(metrics["tests/test/bleu/score"]["values"]) == 2  # two seeds
    assert metrics["steps"]["values"] == [4, 4]
    assert "tests/test-x2/perplexity" in metrics and "tests/test/failures/unattended" in metrics
    assert "tests/test/failures/unattended" not in table["metrics"]["attention=none"]  # no attention to count
    assert "tests/test/failures/repeated_trigrams" in table["metrics"]["attention=none"]  # (counted without)
    markdown = (out / "results.md").read_text()
    assert "| attention=bahdanau |" in markdown and "BLEU test-x2" in markdown and "repeated 3-grams %" in markdown
    for figure in ("bleu-by-length.png", "attention.png"):
        assert (out / figure).read_bytes().startswith(b"\x89PNG")
    # the same subwords in every run, trained once
    models = [p.read_bytes() for p in out.glob("*/seed*/spm/joint.model")]
    assert len(models) == 4 and all(m == (out / "shared/spm/joint.model").read_bytes() for m in models)
    # the same held-out test pairs, never trained on
    train = (out / "shared/train.tsv").read_text().splitlines()
    test = (out / "shared/splits/test.tsv").read_text().splitlines()
    assert len(test) == 24 and not set(test) & set(train)

    checkpoint = out / "attention=bahdanau/seed43/last.safetensors"
    stamp = checkpoint.stat().st_mtime_ns
    old = out / "attention=bahdanau/seed42/results.json"  # scored before repeated trigrams were counted
    record = json.loads(old.read_text())
    for report in record["tests"].values():
        del report["failures"]["trigrams"], report["failures"]["repeated_trigrams"]
    old.write_text(json.dumps(record))
    capsys.readouterr()
    assert run_cli(*argv) == 0
    assert checkpoint.stat().st_mtime_ns == stamp
    assert capsys.readouterr().err.count("done before") == 4


@pytest.mark.slow  # (trains the runs it compares)
def test_an_unfinished_run_continues_only_with_resume(tmp_path, capsys):
    config, out = toy_experiment(tmp_path), tmp_path / "out"
    argv = ["compare", config, "--variant", "b:model.attention=bahdanau", "--steps", 4, "--out", out, "--no-progress"]
    assert run_cli(*argv) == 0
    (out / "b/seed42/results.json").unlink()  # as if it had stopped before it was scored
    assert run_cli(*argv) == 2
    assert "--resume" in capsys.readouterr().err
    assert run_cli(*argv, "--resume") == 0
    assert (out / "b/seed42/results.json").is_file()
    # another budget in the same folder is refused, not silently mixed in
    assert run_cli("compare", config, "--variant", "b:model.attention=bahdanau", "--steps", 6, "--out", out) == 2
    assert "training.max_steps" in capsys.readouterr().err


@pytest.mark.slow  # (trains the runs it compares)
def test_alignment_against_gold_with_both_directions_and_the_statistical_aligner(tmp_path):
    require(find_spec("eflomal") is not None, "pip install eflomal (attnmt[experiments])")
    config, out = toy_experiment(tmp_path), tmp_path / "out"
    table = compare(
        config,
        out,
        variants=["b:model.attention=bahdanau"],
        steps=3,
        both_directions=True,
        align_pairs=tmp_path / "gold.pairs",
        align_gold=tmp_path / "gold.links",
        one_based=True,
        log=lambda m: None,
    )
    [*rows] = table["alignment"]["b"]
    assert {(r["shift"], r["links"]) for r in rows} == {(s, k) for s in (False, True) for k in ("argmax", "threshold")}
    assert set(rows[0]["scores"]) == {"forward", "backward", "intersection", "union", "grow-diag-final"}
    assert set(table["statistical"]) == {"eflomal IBM1", "eflomal HMM", "eflomal HMM+fertility"}
    assert (out / "b/seed42-reverse/last.safetensors").is_file()
    assert (
        "gold" not in (out / "shared/train.tsv").read_text()[-40:]
        and "abc def\tfed cba" in (out / "shared/train.tsv").read_text()
    )  # the gold text (not its links) appended to the training text
    assert (out / "alignment.png").read_bytes().startswith(b"\x89PNG")
    assert "## Word alignment" in (out / "results.md").read_text()


@pytest.mark.slow  # (trains the runs it compares)
def test_a_comparison_trains_every_run_on_the_extra_corpora_too(tmp_path, capsys):
    """data.extra_train (here a tagged corpus, as back-translations are): the shared subwords learn
    its text and its tag, and every run trains on it beside data.train."""
    config, out = toy_experiment(tmp_path), tmp_path / "out"
    write_tsv(tmp_path / "extra.tsv", [("zzz yyy", "yyy zzz"), ("yyy xxx zzz", "zzz xxx yyy")] * 10)
    config.write_text(
        config.read_text().replace(
            "  train: {tsv: train.tsv}\n", "  train: {tsv: train.tsv}\n  extra_train: [{tsv: extra.tsv, tag: '<BT>'}]\n"
        )
    )
    argv = ["compare", config, "--variant", "b:model.attention=bahdanau", "--steps", 2, "--out", out, "--no-progress"]
    assert run_cli(*argv) == 0
    from attnmt.api import load

    model = load(out / "b/seed42")
    assert model.tags == ["<BT>"] and model.src_subwords.sp.piece_to_id("<BT>") != model.src_subwords.sp.unk_id()
    assert "z" in model.src_subwords.sp.id_to_piece(list(range(model.src_subwords.sp.get_piece_size())))
    assert "extra.tsv: 20 extra training pairs, tagged <BT>" in capsys.readouterr().err
    assert run_cli(*argv[:-1], "--both-directions", "--out", tmp_path / "both") == 2
    assert "data.extra_train's corpora" in capsys.readouterr().err


def test_bad_requests_are_errors_before_any_training(tmp_path, capsys):
    config, out = toy_experiment(tmp_path), tmp_path / "out"
    assert run_cli("compare", config, "--variant", "x:model.atention=bahdanau", "--steps", 2, "--out", out) == 2
    assert "atention" in capsys.readouterr().err
    assert run_cli("compare", config, "--variant", "x:data.train.tsv=other.tsv", "--steps", 2, "--out", out) == 2
    assert "same for every variant" in capsys.readouterr().err
    assert run_cli("compare", config, "--steps", 2, "--out", out) == 2
    assert "nothing to compare" in capsys.readouterr().err
    assert not list(out.glob("*/seed*"))


@pytest.mark.slow  # (trains the runs it compares)
def test_transformer_alignments_are_read_from_each_cross_attention_layer(tmp_path):
    require(
        find_spec("eflomal") is not None, "pip install eflomal (attnmt[experiments]): the table's statistical aligner"
    )
    from attnmt.api import load
    from attnmt.translation.align import force_attention

    config, out = toy_experiment(tmp_path), tmp_path / "out"
    small = {
        "model": {
            "type": "transformer",
            "d_model": 16,
            "heads": 2,
            "encoder_layers": 2,
            "decoder_layers": 3,
            "feed_forward": 32,
        }
    }
    table = compare(
        config,
        out,
        variants=[Variant("t", small)],
        steps=2,
        align_pairs=tmp_path / "gold.pairs",
        align_gold=tmp_path / "gold.links",
        one_based=True,
        log=lambda m: None,
    )
    assert {r["attention"] for r in table["alignment"]["t"]} == {"layer 1", "layer 2", "layer 3"}
    [maps] = force_attention(load(out / "t/seed42"), ["abc def"], ["fed cba"], layers=True)
    assert maps.shape[0] == 3 and np.allclose(maps.sum(axis=-1), 1)  # each layer's heads averaged: rows sum to 1
