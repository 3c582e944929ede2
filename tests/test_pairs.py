"""Sentence pairs (task: pairs): TSV pair corpora and their errors, the config, the classification
report, training through `attnmt train`, attnmt.load(...).classify, `attnmt classify` and
`attnmt evaluate` on a pair model."""

from __future__ import annotations

import json
from importlib.util import find_spec

import numpy as np
import pytest

from attnmt.cli import main
from attnmt.core.config import PairFiles, config_from_dict
from attnmt.core.errors import AttnmtError
from attnmt.pairs.data import encode_pairs, labels_of, read_pairs
from attnmt.pairs.evaluation import classification_report, format_classification_report
from attnmt.pairs.quickstart import make_pairs
from conftest import pair_config, require, write

LABELS = ["CONTRADICTION", "ENTAILMENT", "NEUTRAL"]


# ------------------------------------------------------------------------------ data


def test_columns_by_name_from_the_header(tmp_path):
    path = write(
        tmp_path / "sick.tsv",
        "id\tA\tB\tscore\tlabel\n1\ta dog runs\ta dog sleeps\t3.2\tCONTRADICTION\n2\ta cat\tan animal\t4\tENTAILMENT\n",
    )
    corpus = read_pairs(PairFiles(tsv=path, premise_column="A", hypothesis_column="B", label_column="label"))
    assert corpus.premises == ["a dog runs", "a cat"]
    assert corpus.hypotheses == ["a dog sleeps", "an animal"]
    assert corpus.labels == ["CONTRADICTION", "ENTAILMENT"]
    assert corpus.lines == [2, 3]


def test_columns_by_index_without_header(tmp_path):
    path = write(tmp_path / "p.tsv", "E\tpremise one\thypothesis one\n")
    corpus = read_pairs(PairFiles(tsv=path, premise_column=1, hypothesis_column=2, label_column=0))
    assert (corpus.premises, corpus.hypotheses, corpus.labels) == (["premise one"], ["hypothesis one"], ["E"])


@pytest.mark.parametrize(
    "text, files, message",
    [
        ("a\tb\tE\na b\tE\n", {}, "line 2 has 2 tab-separated column(s), expected at least 3"),
        ("a\tb\tE\nc\td\t \n", {}, "line 2 has an empty label"),
        ("A\tB\tgold\na\tb\tE\n", {"label_column": "label"}, "line 1 (the header) has no column named 'label'"),
    ],
)
def test_bad_lines_are_errors_naming_file_and_line(tmp_path, text, files, message):
    path = write(tmp_path / "bad.tsv", text)
    with pytest.raises(AttnmtError) as e:
        read_pairs(PairFiles(tsv=path, **{"premise_column": 0, "hypothesis_column": 1, **files}))
    assert str(path) in str(e.value) and message in str(e.value)


@pytest.mark.parametrize(
    "label, problem",
    [
        ("NOT SURE", "whitespace (U+0020)"),
        ("A\u00a0B", "whitespace (U+00A0)"),
        ("x=0.9", "contains '='"),
        ("E\u202eLEN", "U+202E (RIGHT-TO-LEFT OVERRIDE)"),
        ("E\u2066", "U+2066 (LEFT-TO-RIGHT ISOLATE)"),
        ("E\u200b", "U+200B (ZERO WIDTH SPACE)"),
        ("E\x1b[31m", "U+001B"),
        ("E\u2028N", "whitespace (U+2028)"),
        ("ERROR", "could not classify"),
    ],
)
def test_labels_that_would_make_classify_output_unreadable_are_refused(tmp_path, label, problem):
    """`attnmt classify` writes LABEL<TAB>LABEL=P LABEL=P ...: a label must split as it was written."""
    path = write(tmp_path / "labels.tsv", f"a\tb\tE\nc\td\t{label}\n")
    with pytest.raises(AttnmtError) as e:
        read_pairs(PairFiles(tsv=path))
    assert f"{path}: line 2: the label {label!r} (column 2) cannot be a class name" in str(e.value)
    assert problem in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(AttnmtError, match=r"data.labels: the label .* cannot be a class name"):
        labels_of(config_from_dict(pair_config(tmp_path, data={"labels": ["E", label]}), tmp_path))


def test_bad_utf8_is_an_error_naming_the_file(tmp_path):
    path = tmp_path / "latin1.tsv"
    path.write_bytes("caf\xe9\tb\tE\n".encode("latin-1"))
    with pytest.raises(AttnmtError, match="latin1.tsv"):
        read_pairs(PairFiles(tsv=path))


def test_empty_sentences_are_dropped_and_counted(tmp_path):
    path = write(tmp_path / "p.tsv", "a\tb\tE\n\tb\tE\n\nc\td\tN\n")
    corpus = read_pairs(PairFiles(tsv=path))
    assert corpus.premises == ["a", "c"] and corpus.dropped_empty == 2


def test_a_label_the_model_does_not_know_names_its_line(tmp_path):
    from attnmt.core.config import SubwordConfig
    from attnmt.data.subwords import train_subwords

    path = write(tmp_path / "p.tsv", "a b\tb a\tE\nc d\td c\tMAYBE\n")
    corpus = read_pairs(PairFiles(tsv=path))
    subwords = train_subwords(
        zip(corpus.premises, corpus.hypotheses), SubwordConfig(type="word", vocab_size=20), tmp_path, seed=1
    )[0]
    with pytest.raises(AttnmtError, match="p.tsv: line 2 has the label 'MAYBE'"):
        encode_pairs(corpus, subwords, ["E", "N"], str(path))


# ------------------------------------------------------------------------------ config


def test_pair_config_validates_the_pair_model_fields(tmp_path):
    config = config_from_dict(pair_config(tmp_path), tmp_path)
    assert config.task == "pairs" and config.training.early_stopping_metric == "accuracy"
    with pytest.raises(AttnmtError, match="hiden_size"):
        config_from_dict(pair_config(tmp_path, model={"hiden_size": 3}), tmp_path)
    with pytest.raises(AttnmtError, match="attention"):  # a translation field is not a pair model field
        config_from_dict(pair_config(tmp_path, model={"attention": "luong-dot"}), tmp_path)
    with pytest.raises(AttnmtError, match="attend"):  # dot or one-to-one
        config_from_dict(pair_config(tmp_path, model={"attend": "cosine"}), tmp_path)
    with pytest.raises(AttnmtError, match="temperature"):
        config_from_dict(pair_config(tmp_path, model={"attend": "one-to-one", "temperature": 0}), tmp_path)


def test_accuracy_is_a_metric_of_pairs_only(tmp_path):
    raw = pair_config(tmp_path)
    del raw["task"]
    raw["data"] = {"train": {"tsv": raw["data"]["train"]["tsv"]}}
    raw["model"] = {}
    raw["training"]["early_stopping_metric"] = "accuracy"
    with pytest.raises(AttnmtError, match="early_stopping_metric"):
        config_from_dict(raw, tmp_path)


def test_columns_must_differ_and_names_need_a_header(tmp_path):
    with pytest.raises(AttnmtError, match="three different columns"):
        config_from_dict(pair_config(tmp_path, data={"train": {"tsv": "t.tsv", "label_column": 0}}), tmp_path)
    with pytest.raises(AttnmtError, match="header"):
        config_from_dict(
            pair_config(tmp_path, data={"train": {"tsv": "t.tsv", "label_column": "gold", "header": False}}), tmp_path
        )


# ------------------------------------------------------------------------------ classification report


def test_classification_report_on_hand_made_predictions():
    gold = ["A", "A", "A", "B", "B", "C"]
    predicted = ["A", "A", "B", "B", "C", "C"]
    report = classification_report(gold, predicted, ["A", "B", "C"])
    assert report["accuracy"] == pytest.approx(4 / 6)
    assert report["confusion"] == [[2, 1, 0], [0, 1, 1], [0, 0, 1]]
    a, b = report["per_class"]["A"], report["per_class"]["B"]
    assert (a["precision"], a["recall"], a["support"]) == (1.0, pytest.approx(2 / 3), 3)
    assert (b["precision"], b["recall"]) == (0.5, 0.5) and b["f1"] == pytest.approx(0.5)
    text = format_classification_report(report)
    assert "accuracy 66.67%" in text and "confusion matrix" in text


# ------------------------------------------------------------------------------ a trained pair model


def test_training_writes_checkpoints_metrics_and_test_scores(pair_model):
    records = [json.loads(line) for line in (pair_model / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in records if r["type"] == "valid"]
    assert [r["step"] for r in valid] == [30, 60] and all(0 <= r["accuracy"] <= 1 for r in valid)
    assert (pair_model / "best.safetensors").is_file() and (pair_model / "last.safetensors").is_file()
    scores = json.loads((pair_model / "test-scores.json").read_text())
    assert scores["test"]["pairs"] == 100 and sum(map(sum, scores["test"]["confusion"])) == 100
    assert any(r["type"] == "test" and r["name"] == "test" for r in records)


def test_resume_continues_from_the_last_step(pair_model, tmp_path):
    import shutil

    from attnmt.core.config import load_config
    from attnmt.training import train

    folder = tmp_path / "resumed"
    shutil.copytree(pair_model, folder)
    config = load_config(folder / "config.yaml")
    config.training.max_steps = 70
    state = train(config, resume=True, log=lambda message: None, progress=False)
    assert state.step == 70


def test_load_classify_returns_label_probabilities_and_both_attentions(pair_model):
    import attnmt
    from attnmt.pairs.classifier import PairClassifier

    model = attnmt.load(pair_model)
    assert isinstance(model, PairClassifier) and model.labels == LABELS
    pairs = [
        ("three red dogs are running in the park", "three blue dogs are running in the park"),
        ("two cats are sleeping in the house", "two cats are sleeping"),
    ]
    results = model.classify(pairs)
    assert [(r.premise, r.hypothesis) for r in results] == pairs
    for r in results:
        assert r.label in LABELS and r.label == max(r.probabilities, key=r.probabilities.get)
        assert sum(r.probabilities.values()) == pytest.approx(1.0, abs=1e-5)
        rows, columns = len(r.premise_tokens), len(r.hypothesis_tokens)
        assert r.premise_tokens[-1] == "</s>" and r.premise_attention.shape == (rows, columns)
        assert np.allclose(r.attention("premise").sum(axis=1), 1, atol=1e-5)  # each premise word over the hypothesis
        assert np.allclose(r.attention("hypothesis").sum(axis=0), 1, atol=1e-5)  # each hypothesis word over the premise
        assert r.compared_premise.shape[0] == rows and r.compared_hypothesis.shape[0] == columns
        assert np.allclose(r.premise_summary, r.compared_premise.sum(axis=0), atol=1e-4)
        assert r.class_scores.shape == (3,)
    with pytest.raises(TypeError, match="list of"):
        model.classify(pairs[0])
    with pytest.raises(AttnmtError, match="direction"):
        results[0].attention("both")


def test_classify_keeps_one_output_line_per_input_line(pair_model, tmp_path, capsys):
    lines = [
        "three red dogs are running in the park\tthree red dogs are running",
        "no tab on this line",
        "\t",
        "two cats are sleeping in the house\ttwo cats are not sleeping in the house\textra column",
    ]
    path = write(tmp_path / "in.tsv", "\n".join(lines) + "\n")
    assert main(["classify", str(pair_model), "-i", str(path)]) == 2  # some lines are not pairs
    out, err = capsys.readouterr()
    outputs = out.splitlines()
    assert len(outputs) == len(lines)
    assert outputs[1].startswith("ERROR\tline 2: expected premise<TAB>hypothesis")
    assert outputs[2].startswith("ERROR\tline 3:")
    for line in (outputs[0], outputs[3]):
        label, probabilities = line.split("\t")
        assert label in LABELS
        assert [p.split("=")[0] for p in probabilities.split()] == LABELS
    assert "2 of 4 line(s) not classified" in err


def test_translate_refuses_a_pair_model(pair_model, tmp_path, capsys):
    assert main(["translate", str(pair_model), "-i", str(write(tmp_path / "in.txt", "a\n"))]) == 2
    assert "sentence-pair classifier" in capsys.readouterr().err


def test_evaluate_a_pair_model_text_and_json(pair_model, tmp_path, capsys):
    out_json = tmp_path / "report.json"
    assert main(["evaluate", str(pair_model), "--trust-config", "--json", str(out_json)]) == 0
    text = capsys.readouterr().out
    assert "accuracy" in text and "confusion matrix (rows: gold, columns: predicted)" in text
    report = json.loads(out_json.read_text())["test"]
    assert report["labels"] == LABELS and report["pairs"] == 100
    assert set(report["per_class"]["NEUTRAL"]) == {"precision", "recall", "f1", "support"}
    predictions = tmp_path / "labels.txt"
    assert (
        main(
            ["evaluate", str(pair_model), "--tsv", str(pair_model.parent / "dev.tsv"), "--hypotheses", str(predictions)]
        )
        == 0
    )
    assert "(100 pairs)" in capsys.readouterr().out
    assert len(predictions.read_text().splitlines()) == 100


def test_evaluate_cuts_over_long_sentences_to_max_tokens(pair_model, tmp_path, capsys):
    import attnmt

    long = " ".join(["three red dogs are running in the park"] * 1000)  # 8,000 words
    pairs = [
        ("two cats are sleeping", "two cats are sleeping", "ENTAILMENT"),
        (long, long, "ENTAILMENT"),
        ("a dog runs", long, "NEUTRAL"),
    ]
    tsv = write(tmp_path / "long.tsv", "".join("\t".join(p) + "\n" for p in pairs))
    assert (
        main(
            [
                "evaluate",
                str(pair_model),
                "--tsv",
                str(tsv),
                "--max-tokens",
                "20",
                "--hypotheses",
                str(tmp_path / "labels.txt"),
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert f"{tsv}, line 2: more than 20 subword tokens in a sentence; its first 20 were used" in err
    assert f"{tsv}, line 3: more than 20" in err and "line 1:" not in err
    # the labels of classify cutting the same way
    model = attnmt.load(pair_model)
    expected = [r.label for r in model.classify([p[:2] for p in pairs], max_tokens=20)]
    assert (tmp_path / "labels.txt").read_text().splitlines() == expected


def test_a_model_folder_with_unreadable_labels_is_refused(pair_model, tmp_path):
    import shutil

    import yaml

    import attnmt

    folder = tmp_path / "model"
    shutil.copytree(pair_model, folder)
    raw = yaml.safe_load((folder / "config.yaml").read_text())
    raw["data"]["labels"] = ["CONTRADICTION", "ENTAILMENT", "NEUTRAL=1.0000 ENTAILMENT"]
    (folder / "config.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(AttnmtError, match=r"config.yaml: data.labels: the label .* contains '='"):
        attnmt.load(folder)


# ------------------------------------------------------------------------------ figures


def test_plot_draws_attend_compare_aggregate(pair_model, tmp_path, capsys):
    import attnmt
    from attnmt.pairs.figures import pair_figure

    [r] = attnmt.load(pair_model).classify([("two red cats are sleeping", "two cats are sleeping")])
    fig = pair_figure(r, "hypothesis", max_dims=5)
    titles = [ax.get_title() for ax in fig.axes]
    assert any("softmax over the premise" in t for t in titles)
    assert any(t.startswith("compare: v1_i") for t in titles) and any(t.startswith("compare: v2_j") for t in titles)
    assert "aggregate" in titles and any("class probabilities" in t for t in titles)
    [attention] = [ax for ax in fig.axes if ax.get_title().startswith("attend")]
    assert np.allclose(attention.images[0].get_array(), r.hypothesis_attention)
    assert [t.get_text() for t in attention.get_yticklabels()] == [t.replace("\u2581", "") for t in r.premise_tokens]
    out = tmp_path / "pair.svg"
    assert (
        main(
            [
                "plot",
                str(pair_model),
                "two red cats are sleeping",
                "--hypothesis",
                "two cats are sleeping",
                "--out",
                str(out),
                "--direction",
                "hypothesis",
            ]
        )
        == 0
    )
    assert out.read_text().startswith("<?xml")
    html = tmp_path / "pair.html"
    assert main(["plot", str(pair_model), "two red cats", "--hypothesis", "two cats", "--out", str(html)]) == 0
    assert "rows: premise tokens; columns: hypothesis tokens" in html.read_text()
    assert "rows: premise tokens" in r._repr_html_()  # Jupyter


def test_plot_of_a_pair_model_needs_the_hypothesis(pair_model, tmp_path, capsys):
    assert main(["plot", str(pair_model), "two red cats", "--out", str(tmp_path / "x.png")]) == 2
    assert "--hypothesis" in capsys.readouterr().err
    gif = ["--gif", str(tmp_path / "x.gif")]
    assert main(["plot", str(pair_model), "two red cats", "--hypothesis", "two cats", *gif]) == 2
    assert "--gif: for translation models" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists() and not (tmp_path / "x.gif").exists()


# ------------------------------------------------------------------------------ initial embeddings


def test_word2vec_embeddings_replace_the_rows_of_the_corpus_pieces(tmp_path):
    import torch

    require(find_spec("gensim") is not None, "pip install gensim (attnmt[vectors])")

    from attnmt.core.config import SubwordConfig
    from attnmt.data.subwords import train_subwords
    from attnmt.pairs.embeddings import word2vec_embeddings

    sentences = [p for p, _, _ in make_pairs(200, seed=1)]
    subwords = train_subwords(
        zip(sentences + ["zebra"], sentences + ["zebra"]), SubwordConfig(type="word", vocab_size=100), tmp_path, seed=1
    )[0]
    corpus = write(tmp_path / "captions.txt", "\n".join(sentences) + "\n")
    start = torch.randn(len(subwords), 8)
    weights = word2vec_embeddings(corpus, subwords, start, epochs=1, window=2, seed=1, log=lambda m: None)
    assert weights.shape == start.shape
    pieces = subwords.pieces(range(len(subwords)))
    changed = {pieces[i] for i in range(len(pieces)) if not torch.equal(weights[i], start[i])}
    assert "\u2581dogs" in changed or "\u2581cats" in changed
    assert "\u2581zebra" not in changed  # not in the corpus: its random start
    again = word2vec_embeddings(corpus, subwords, start, epochs=1, window=2, seed=1, log=lambda m: None)
    assert torch.equal(weights, again)  # the same vectors at every run


def test_word2vec_streams_its_corpus_and_learns_the_vectors_of_the_lines_held_in_memory(tmp_path, monkeypatch):
    """The corpus read and encoded a few lines at a time at each of gensim's passes (ENCODE_LINES
    made small), never read whole: the vectors are those of gensim given the list of every
    non-blank line's pieces, as before it streamed."""
    import torch

    require(find_spec("gensim") is not None, "pip install gensim (attnmt[vectors])")
    from gensim.models import Word2Vec

    from attnmt.core.config import SubwordConfig
    from attnmt.data.subwords import train_subwords
    from attnmt.pairs import embeddings
    from test_streamed_corpus_commands import whole_reads_refused

    sentences = [p for p, _, _ in make_pairs(200, seed=1)]
    subwords = train_subwords(zip(sentences, sentences), SubwordConfig(type="word", vocab_size=100), tmp_path, seed=1)[
        0
    ]
    corpus = write(tmp_path / "captions.txt", "\n".join(s if k % 9 else " " for k, s in enumerate(sentences)) + "\n")
    kept = [s for k, s in enumerate(sentences) if k % 9]
    start = torch.randn(len(subwords), 8)
    vectors = Word2Vec(
        subwords.sp.encode(kept, out_type=str),
        vector_size=8,
        window=2,
        min_count=1,
        sg=1,
        workers=1,
        epochs=2,
        seed=1,
        hashfxn=embeddings._stable_hash,
    ).wv
    known = [(i, piece) for i, piece in enumerate(subwords.pieces(range(len(subwords)))) if piece in vectors]
    trained = torch.tensor(vectors[[piece for _, piece in known]])
    expected = start.clone()
    expected[[i for i, _ in known]] = trained * (start.std() / trained.std())
    monkeypatch.setattr(embeddings, "ENCODE_LINES", 7)
    whole_reads_refused(monkeypatch, corpus)
    messages = []
    weights = embeddings.word2vec_embeddings(corpus, subwords, start, epochs=2, window=2, seed=1, log=messages.append)
    assert torch.equal(weights, expected)
    assert messages[-1].startswith(f"word2vec on {len(kept):,} sentences of {corpus}")
    blank = write(tmp_path / "blank.txt", "\n \n")
    with pytest.raises(AttnmtError, match="blank.txt: no sentences to train word2vec on"):
        embeddings.word2vec_embeddings(blank, subwords, start, epochs=1, window=2, seed=1)


def test_embeddings_from_a_translation_model(reverse_model, tmp_path):
    """model.embeddings.model: the pair model starts from the translation model's embeddings, in
    its subwords; a size that does not match is an error naming model.embedding_size."""
    import torch
    from safetensors.torch import load_file

    from attnmt.pairs.training import prepare_pair_data, setup_pairs

    translator, _ = reverse_model
    size = translator.config.model.embedding_size
    raw = pair_config(
        tmp_path,
        model={
            "embedding_size": size,
            "hidden_size": 8,
            "embeddings": {"model": str(translator.folder), "side": "src"},
        },
        data={"subwords": {"type": "char", "vocab_size": 40}},
    )
    config = config_from_dict(raw, tmp_path)
    data = prepare_pair_data(config, log=lambda m: None)
    assert len(data.subwords) == len(translator.src_subwords)
    model = setup_pairs(config, data, torch.device("cpu"), log=lambda m: None).model
    source = load_file(translator.folder / "best.safetensors")["encoder.embed.weight"]
    assert torch.equal(model.embed.weight[1:], source[1:])  # (row 0: padding, zero)
    raw["model"]["embedding_size"] = size + 1
    raw["experiment_dir"] = str(tmp_path / "other")
    with pytest.raises(AttnmtError, match=f"model.embedding_size: {size}"):
        other = config_from_dict(raw, tmp_path)
        setup_pairs(other, prepare_pair_data(other, log=lambda m: None), torch.device("cpu"), log=lambda m: None)


def test_prepare_a_pair_experiment_writes_subwords_and_labels(tmp_path, capsys):
    import yaml

    raw = pair_config(tmp_path)
    path = write(tmp_path / "pairs.yaml", yaml.safe_dump(raw))
    assert main(["prepare", str(path)]) == 0
    written = yaml.safe_load((tmp_path / "exp" / "config.yaml").read_text())
    assert written["data"]["labels"] == LABELS  # the training labels, sorted
    assert (tmp_path / "exp" / "spm").is_dir()


def test_classify_refuses_a_translation_model(reverse_model, tmp_path, capsys):
    translator, _ = reverse_model
    assert main(["classify", str(translator.folder), "-i", str(write(tmp_path / "in.tsv", "a\tb\n"))]) == 2
    assert "is a translation model: use attnmt translate" in capsys.readouterr().err
