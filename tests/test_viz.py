"""attnmt.viz: word merging, matplotlib figures, GIF, training curves, HTML views and `attnmt plot`.

Most tests draw handmade matrices and traces; those marked with the `reverse_model` fixture draw
a real model (a small Bahdanau model trained to reverse strings, shared with other test files).
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from attnmt.cli import main
from attnmt.core.errors import AttnmtError
from attnmt.seq2seq.trace import CoverageUse, DecodingTrace, StepTrace
from attnmt.viz import (
    attention_grid,
    attention_heatmap,
    decoder_step_figure,
    decoding_animation,
    encoder_states_figure,
    head_view_figure,
    heatmap_html,
    merge_pieces,
    save,
    select_dimensions,
    show,
    show_step,
    step_html,
    training_curves,
    word_spans,
)
from attnmt.viz.plan import FigureRequest, plan_figures

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def axis(fig, name: str):
    [ax] = [a for a in fig.axes if a.get_label() == name]
    return ax


def tick_texts(labels) -> list[str]:
    return [label.get_text() for label in labels]


def random_attention(rows: int, columns: int, seed: int = 0) -> np.ndarray:
    a = np.random.default_rng(seed).random((rows, columns)) ** 4
    return a / a.sum(axis=1, keepdims=True)


def fake_trace(source_tokens, target_tokens, dims: int = 40, k: int = 3, seed: int = 0) -> DecodingTrace:
    rng = np.random.default_rng(seed)
    attention = random_attention(len(target_tokens), len(source_tokens), seed)
    states = rng.normal(size=(len(source_tokens), dims))
    steps = []
    for t, token in enumerate(target_tokens):
        top = [(token, 0.7)] + [(f"alt{i}", 0.3 / k) for i in range(k - 1)]
        steps.append(
            StepTrace(
                token=token,
                token_id=t,
                probability=0.7,
                scores=np.log(attention[t]) + 1.0,
                weights=attention[t],
                context=attention[t] @ states,
                state=rng.normal(size=8),
                top_k=top,
            )
        )
    return DecodingTrace("src", list(source_tokens), states, steps, "out")


def run(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


# --- merging pieces into words -------------------------------------------------------------------


def test_word_spans():
    assert word_spans(["▁Ein", "▁Sch", "iff", "▁fährt", ".", "</s>"]) == [(0, 1), (1, 3), (3, 5), (5, 6)]
    assert word_spans(["ab", "▁c", "</s>"]) == [(0, 1), (1, 2), (2, 3)]  # the first piece always starts a word
    assert word_spans(["▁", "a", "b", "▁", "c", "</s>"]) == [(0, 3), (3, 5), (5, 6)]  # char-level pieces
    assert word_spans([]) == []


def test_merge_pieces_sums_source_columns_and_averages_target_rows():
    source = ["▁Sch", "iff", "▁da", "</s>"]  # words: Schiff, da, </s>
    target = ["▁a", "▁sh", "ip", "</s>"]  # words: a, ship, </s>
    attention = np.array([[0.1, 0.2, 0.6, 0.1], [0.5, 0.3, 0.1, 0.1], [0.2, 0.6, 0.0, 0.2], [0.0, 0.1, 0.1, 0.8]])
    source_words, target_words, merged = merge_pieces(source, target, attention)
    assert source_words == ["Schiff", "da", "</s>"]
    assert target_words == ["a", "ship", "</s>"]
    expected = np.array(
        [
            [0.3, 0.6, 0.1],  # "a": columns 0+1 summed
            [(0.8 + 0.8) / 2, (0.1 + 0.0) / 2, (0.1 + 0.2) / 2],  # "ship": mean of 2 rows
            [0.1, 0.1, 0.8],
        ]
    )
    np.testing.assert_allclose(merged, expected)
    np.testing.assert_allclose(merged.sum(axis=1), 1.0)


def test_merged_rows_still_sum_to_one():
    source = ["▁a", "b", "c", "▁d", "▁e", "f", "</s>"]
    target = ["▁x", "y", "▁z", "w", "v", "</s>"]
    _, _, merged = merge_pieces(source, target, random_attention(len(target), len(source), seed=3))
    assert merged.shape == (3, 4)
    np.testing.assert_allclose(merged.sum(axis=1), 1.0)


def test_merge_pieces_rejects_a_matrix_of_the_wrong_shape():
    with pytest.raises(ValueError, match="shape"):
        merge_pieces(["▁a", "</s>"], ["▁b", "</s>"], np.ones((2, 3)) / 3)


# --- heatmap -------------------------------------------------------------------------------------


def test_heatmap_has_one_cell_per_pair_and_the_tokens_as_labels():
    source = ["▁Ein", "▁Sch", "iff", "$x$", "</s>"]
    target = ["▁A", "▁ship", "</s>"]
    attention = random_attention(3, 5)
    fig = attention_heatmap(source, target, attention, title="a title")
    ax = axis(fig, "attention")
    [image] = ax.get_images()
    assert image.get_array().shape == (3, 5)
    np.testing.assert_allclose(image.get_array(), attention)
    assert tick_texts(ax.get_xticklabels()) == source
    assert tick_texts(ax.get_yticklabels()) == target
    assert len(fig.axes) == 2  # the heatmap and its colour bar
    stripped = axis(attention_heatmap(source, target, attention, space_marker=""), "attention")
    assert tick_texts(stripped.get_xticklabels()) == ["Ein", "Sch", "iff", "$x$", "</s>"]


def test_heatmap_of_merged_words():
    source, target = ["▁Sch", "iff", "▁da", "</s>"], ["▁a", "▁sh", "ip", "</s>"]
    attention = random_attention(4, 4)
    ax = axis(attention_heatmap(source, target, attention, merge_words=True), "attention")
    assert ax.get_images()[0].get_array().shape == (3, 3)
    assert tick_texts(ax.get_xticklabels()) == ["Schiff", "da", "</s>"]
    assert tick_texts(ax.get_yticklabels()) == ["a", "ship", "</s>"]


def test_heatmap_without_attention_is_a_clear_error():
    with pytest.raises(AttnmtError, match="attention 'none'"):
        attention_heatmap(["a", "</s>"], ["b", "</s>"], None)


def test_a_50_token_sentence_keeps_every_label_and_grows_the_figure():
    source = [f"▁src{i}" for i in range(49)] + ["</s>"]
    target = [f"▁tgt{i}" for i in range(49)] + ["</s>"]
    big = attention_heatmap(source, target, random_attention(50, 50))
    ax = axis(big, "attention")
    assert tick_texts(ax.get_xticklabels()) == source
    assert tick_texts(ax.get_yticklabels()) == target
    assert ax.get_images()[0].get_array().shape == (50, 50)
    small = attention_heatmap(source[:5], target[:4], random_attention(4, 5))
    assert big.get_size_inches()[0] > 2.5 * small.get_size_inches()[0]
    assert big.get_size_inches()[1] > 2.5 * small.get_size_inches()[1]
    big_font = ax.get_xticklabels()[0].get_fontsize()
    assert big_font < axis(small, "attention").get_xticklabels()[0].get_fontsize()
    assert abs(ax.get_xticklabels()[0].get_rotation()) >= 60  # long labels are rotated


def test_save_writes_png_and_svg(tmp_path):
    fig = attention_heatmap(["▁a", "b", "</s>"], ["▁c", "</s>"], random_attention(2, 3))
    png = save(fig, tmp_path / "sub" / "heat.png")
    svg = save(fig, tmp_path / "heat.svg")
    assert png.read_bytes().startswith(PNG_MAGIC)
    assert png.stat().st_size > 1000
    assert b"<svg" in svg.read_bytes()[:2000]
    with Image.open(png) as image:
        assert image.size[0] > 100 and image.size[1] > 100
    with pytest.raises(AttnmtError, match="use .png or .svg"):
        save(fig, tmp_path / "heat.jpg")


# --- encoder states, decoder step, animation -------------------------------------------------------


def test_select_dimensions_keeps_the_most_varying_ones_in_order():
    states = np.zeros((4, 6))
    states[:, 4] = [0, 5, -5, 1]
    states[:, 1] = [0, 1, 2, 3]
    states[:, 3] = [0, 0, 0, 0.1]
    assert list(select_dimensions(states, 2)) == [1, 4]
    assert list(select_dimensions(states, None)) == list(range(6))
    assert list(select_dimensions(states, 10)) == list(range(6))


def test_encoder_states_figure_has_a_row_per_source_token_and_per_step():
    source, target = ["▁a", "b", "c", "</s>"], ["▁x", "y", "</s>"]
    trace = fake_trace(source, target, dims=40)
    fig = encoder_states_figure(trace)
    states, contexts = axis(fig, "encoder_states"), axis(fig, "contexts")
    assert states.get_images()[0].get_array().shape == (4, 32)
    assert contexts.get_images()[0].get_array().shape == (3, 32)
    assert tick_texts(states.get_yticklabels()) == source
    assert tick_texts(contexts.get_yticklabels()) == target
    everything = encoder_states_figure(trace, max_dims=None)
    assert axis(everything, "encoder_states").get_images()[0].get_array().shape == (4, 40)


def test_step_figure_has_one_bar_per_source_token_and_per_candidate():
    source = ["▁a", "b", "c", "d", "</s>"]
    trace = fake_trace(source, ["▁x", "y", "</s>"], k=4)
    fig = decoder_step_figure(trace, 1)
    assert len(axis(fig, "scores").patches) == 5
    assert len(axis(fig, "weights").patches) == 5
    heights = [bar.get_height() for bar in axis(fig, "weights").patches]
    np.testing.assert_allclose(heights, trace.steps[1].weights)
    assert tick_texts(axis(fig, "weights").get_xticklabels()) == source
    assert len(axis(fig, "top_k").patches) == 4
    assert tick_texts(axis(fig, "top_k").get_yticklabels()) == ["y", "alt0", "alt1", "alt2"]
    assert axis(fig, "context").get_images()[0].get_array().shape == (1, 40)
    with pytest.raises(AttnmtError, match="3 steps"):
        decoder_step_figure(trace, 3)


@pytest.mark.parametrize("use", [CoverageUse(in_score=True, fertility=2), CoverageUse(bound=1.5)])
def test_step_figure_draws_the_coverage_a_model_reads(use):
    """Coverage attention, csparsemax: the coverage before step 2 (the sum of steps 0 and 1) with the
    step's weights stacked on it; csparsemax's bound as a dashed line; nothing for other models."""
    trace = fake_trace(["▁a", "b", "c", "</s>"], ["▁x", "y", "z", "</s>"])
    assert "coverage" not in [ax.get_label() for ax in decoder_step_figure(trace, 2).axes]
    trace.coverage = use
    ax = axis(decoder_step_figure(trace, 2), "coverage")
    before, this = ax.patches[:4], ax.patches[4:]
    np.testing.assert_allclose([b.get_height() for b in before], trace.steps[0].weights + trace.steps[1].weights)
    np.testing.assert_allclose([b.get_y() for b in this], [b.get_height() for b in before])
    np.testing.assert_allclose([b.get_height() for b in this], trace.steps[2].weights, atol=1e-12)
    assert tick_texts(ax.get_xticklabels()) == ["▁a", "b", "c", "</s>"]
    lines = [line.get_ydata()[0] for line in ax.get_lines()]
    assert lines == ([] if use.bound is None else [1.5])
    assert ("fertility" in ax.get_title()) == bool(use.fertility)
    first = axis(decoder_step_figure(trace, 0), "coverage")  # nothing before the first step
    assert [b.get_height() for b in first.patches[:4]] == [0, 0, 0, 0]
    page = step_html(trace, 2)  # the notebook's step: the same coverage, as a row of the table
    before = trace.steps[0].weights + trace.steps[1].weights
    assert "coverage C_j" in page and f"c: C = {before[2]:.3f} before, + a = {trace.steps[2].weights[2]:.3f}" in page
    trace.coverage = None
    assert "coverage C_j" not in step_html(trace, 2)


def test_step_figure_without_attention_draws_no_bars():
    trace = fake_trace(["▁a", "</s>"], ["▁x", "</s>"])
    for step in trace.steps:
        step.scores = step.weights = None
    fig = decoder_step_figure(trace, 0)
    assert len(axis(fig, "weights").patches) == 0
    assert len(axis(fig, "top_k").patches) == 3


def test_animation_has_one_frame_per_step(tmp_path):
    trace = fake_trace(["▁a", "b", "c", "</s>"], ["▁x", "y", "z", "w", "</s>"])
    path = decoding_animation(trace, tmp_path / "decoding.gif", fps=2)
    with Image.open(path) as gif:
        assert gif.format == "GIF"
        assert gif.n_frames == 5
    with pytest.raises(AttnmtError, match=".gif"):
        decoding_animation(trace, tmp_path / "decoding.png")


# --- training curves -----------------------------------------------------------------------------


def write_metrics(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_training_curves_from_a_handmade_log(tmp_path):
    records = [{"type": "train", "step": s, "epoch": 0, "loss": 5.0 / s} for s in (10, 20, 30, 40)]
    records += [
        {"type": "valid", "step": 20, "loss": 0.4, "perplexity": 1.5, "bleu": 10.0},
        {"type": "valid", "step": 40, "loss": 0.2, "perplexity": 1.2, "bleu": 30.0},
    ]
    path = write_metrics(tmp_path / "metrics.jsonl", records)
    for source in (path, tmp_path):  # the file or the experiment folder holding it
        fig = training_curves(source)
        train, dev = axis(fig, "loss").get_lines()
        assert list(train.get_xdata()) == [10, 20, 30, 40]
        np.testing.assert_allclose(train.get_ydata(), [0.5, 0.25, 5 / 30, 0.125])
        assert list(dev.get_xdata()) == [20, 40] and list(dev.get_ydata()) == [0.4, 0.2]
        assert list(axis(fig, "perplexity").get_lines()[0].get_ydata()) == [1.5, 1.2]
        assert list(axis(fig, "bleu").get_lines()[0].get_ydata()) == [10.0, 30.0]
    assert save(fig, tmp_path / "curves.png").read_bytes().startswith(PNG_MAGIC)


def test_training_curves_errors(tmp_path):
    with pytest.raises(AttnmtError, match="no such file"):
        training_curves(tmp_path / "missing.jsonl")
    with pytest.raises(AttnmtError, match="empty"):
        training_curves(write_metrics(tmp_path / "empty.jsonl", []))
    (tmp_path / "bad.jsonl").write_text('{"type": "train", "step": 1, "loss": 2}\nnot json\n')
    with pytest.raises(AttnmtError, match="line 2"):
        training_curves(tmp_path / "bad.jsonl")


# --- HTML ----------------------------------------------------------------------------------------


def test_heatmap_html_has_one_cell_per_pair_and_escapes_tokens():
    source = ["▁<b>", "x&y", "</s>"]
    target = ['▁"q"', "<script>", "z", "</s>"]
    page = heatmap_html(source, target, random_attention(4, 3), title="<i>title</i>")
    assert page.count("<td") == 4 * 3
    assert "<b>" not in page and "<script>" not in page and "<i>" not in page
    assert "&lt;b&gt;" in page and "&lt;script&gt;" in page and "x&amp;y" in page
    assert "<link" not in page and "<script" not in page  # self-contained
    merged = heatmap_html(["▁a", "b", "</s>"], ["▁c", "</s>"], random_attention(2, 3), merge_words=True)
    assert merged.count("<td") == 2 * 2


def test_heatmap_html_shades_cells_by_weight():
    page = heatmap_html(["a", "b"], ["c"], np.array([[1.0, 0.0]]))
    cells = page.split("<td")[1:]
    assert "background:rgb(8,48,107)" in cells[0] and "background:rgb(255,255,255)" in cells[1]


def test_step_html_and_notebook_wrappers(tmp_path):
    trace = fake_trace(["▁<b>", "c", "</s>"], ["▁x", "<i>", "</s>"], dims=12, k=3)
    page = step_html(trace, 1)
    assert "<b>" not in page and "&lt;b&gt;" in page and "&lt;i&gt;" in page
    assert page.count("dim ") == 12  # one cell per context dimension
    assert page.count("width:14px") == 3  # one weight bar per source token
    view = show_step(trace, 1)
    assert view._repr_html_() == page
    heat = show(trace)
    assert heat._repr_html_().count("<td") == 3 * 3
    saved = heat.save(tmp_path / "heat.html").read_text(encoding="utf-8")
    assert saved.startswith("<!DOCTYPE html>") and heat.html in saved
    with pytest.raises(AttnmtError):
        step_html(trace, 7)


# --- a real model --------------------------------------------------------------------------------


def test_heatmap_of_a_trained_model(reverse_model):
    model, _ = reverse_model
    [t] = model.translate(["abcdefg"], beam=3)
    assert t.attention is not None
    ax = axis(attention_heatmap(t), "attention")
    assert ax.get_images()[0].get_array().shape == (len(t.tokens), len(t.source_tokens))
    np.testing.assert_allclose(ax.get_images()[0].get_array(), t.attention)
    assert tick_texts(ax.get_xticklabels()) == t.source_tokens
    assert tick_texts(ax.get_yticklabels()) == t.tokens
    words, out_words, merged = merge_pieces(t.source_tokens, t.tokens, t.attention)
    assert words[-1] == "</s>" and len(words) == len(word_spans(t.source_tokens)) == merged.shape[1]
    np.testing.assert_allclose(merged.sum(axis=1), 1.0, atol=1e-5)


def test_step_figure_and_animation_of_a_trained_model(reverse_model, tmp_path):
    model, _ = reverse_model
    trace = model.trace("abcde", top_k=4)
    assert len(trace.steps) >= 2
    fig = decoder_step_figure(trace, 0)
    assert len(axis(fig, "weights").patches) == len(trace.source_tokens)
    assert len(axis(fig, "scores").patches) == len(trace.source_tokens)
    assert len(axis(fig, "top_k").patches) == 4
    with Image.open(decoding_animation(trace, tmp_path / "d.gif")) as gif:
        assert gif.n_frames == len(trace.steps)
    states = encoder_states_figure(trace, max_dims=16)
    assert axis(states, "encoder_states").get_images()[0].get_array().shape == (len(trace.source_tokens), 16)


def test_cli_plot_writes_the_files(reverse_model, tmp_path):
    model, _ = reverse_model
    out = tmp_path / "figs"
    code, stdout, err = run(
        "plot",
        model.folder,
        "abcdef",
        "--out",
        out / "heat.png",
        "--states",
        out / "states.svg",
        "--step",
        1,
        out / "step1.png",
        "--gif",
        out / "dec.gif",
        "--curves",
        out / "curves.png",
        "--merge-words",
        "--beam",
        2,
    )
    assert code == 0, err
    names = ["heat.png", "states.svg", "step1.png", "dec.gif", "curves.png"]
    assert sorted(Path(line).name for line in stdout.splitlines()) == sorted(names)
    for name in names:
        assert (out / name).stat().st_size > 0
    assert (out / "heat.png").read_bytes().startswith(PNG_MAGIC)
    assert b"<svg" in (out / "states.svg").read_bytes()[:2000]
    with Image.open(out / "dec.gif") as gif:
        assert gif.n_frames == len(model.trace("abcdef").steps)

    code, stdout, err = run("plot", model.folder / "metrics.jsonl", "--curves", tmp_path / "c.svg")
    assert code == 0, err
    assert (tmp_path / "c.svg").stat().st_size > 0

    code, stdout, err = run("plot", model.folder, "abc", "--out", tmp_path / "heat.html")
    assert code == 0, err
    assert (tmp_path / "heat.html").read_text(encoding="utf-8").count("<td") > 0


def test_cli_plot_draws_the_saliency_of_the_translation(reverse_model, tmp_path, monkeypatch):
    """--saliency: the heatmap of saliency_matrices for the model's translation (drawn as --out draws
    the attention), refused for a --tag."""
    from attnmt.translation.saliency import saliency_matrices
    from attnmt.viz import figures

    model, _ = reverse_model
    drawn = []
    heatmap = figures.attention_heatmap
    monkeypatch.setattr(
        figures, "attention_heatmap", lambda *args, **kwargs: drawn.append((args, kwargs)) or heatmap(*args, **kwargs)
    )
    code, stdout, err = run("plot", model.folder, "abcdef", "--saliency", tmp_path / "saliency.png")
    assert code == 0, err
    assert (tmp_path / "saliency.png").read_bytes().startswith(PNG_MAGIC)
    [(args, kwargs)] = drawn
    translation = model.translate(["abcdef"])[0].text
    np.testing.assert_allclose(args[2], saliency_matrices(model, ["abcdef"], [translation])[0], atol=1e-5)
    assert kwargs["title"].startswith("saliency") and kwargs["quantity"] == "saliency" and args[0][-1] == "</s>"
    code, _, err = run("plot", model.folder, "abc", "--saliency", tmp_path / "s.jpg")
    assert code == 2 and ".png or .svg" in err


def test_cli_plot_errors(reverse_model, tmp_path):
    model, _ = reverse_model
    cases = [
        (("plot", tmp_path / "no-model", "abc", "--out", tmp_path / "x.png"), "not a model folder"),
        (("plot", model.folder), "give a sentence"),
        (("plot", model.folder, "abc", "--out", tmp_path / "x.jpg"), ".png or .svg"),
        (("plot", model.folder, "abc", "--out", tmp_path / "x.png", "--step", 99, tmp_path / "s.png"), "step 99"),
        (("plot", model.folder, "abc", "--step", "one", tmp_path / "s.png"), "whole number"),
        (("plot", tmp_path, "--curves", tmp_path / "c.png"), "metrics.jsonl"),
    ]
    for argv, fragment in cases:
        code, _, err = run(*argv)
        assert code == 2, (argv, err)
        assert fragment in err and "Traceback" not in err, (argv, err)
    assert not (tmp_path / "x.png").exists() and not (tmp_path / "s.png").exists()


def test_plan_of_curves_alone_needs_no_model_and_writes_only_when_asked(tmp_path):
    metrics = write_metrics(tmp_path / "metrics.jsonl", [{"type": "train", "step": 1, "epoch": 0, "loss": 2.0}])
    [write] = plan_figures(FigureRequest(metrics, curves=str(tmp_path / "c.png")))
    assert not (tmp_path / "c.png").exists()  # built, not yet written
    assert write() == tmp_path / "c.png" and (tmp_path / "c.png").read_bytes().startswith(PNG_MAGIC)


@pytest.mark.parametrize(
    "request_, message",
    [
        ({"sentence": "abc", "out": "a.png", "states": "s.jpg"}, "s.jpg: the file name must end in .png or .svg"),
        ({"sentence": "abc", "steps": [(0, "s.gif")]}, "s.gif: the file name must end in .png or .svg"),
        ({"curves": "c.png", "head": 1}, "--layer and --head choose"),
        ({"sentence": "abc", "fps": 0}, "--fps must be positive"),
        ({"out": "a.png"}, "give a sentence"),
    ],
)
def test_plan_checks_the_request_before_reading_the_model(tmp_path, request_, message):
    with pytest.raises(AttnmtError, match=message):  # not "not a model folder": checked first
        plan_figures(FigureRequest(tmp_path / "no-model", **request_))


def test_plan_of_a_sentence_alone_is_the_heatmap_in_attention_png(reverse_model, tmp_path, monkeypatch):
    model, _ = reverse_model
    monkeypatch.chdir(tmp_path)
    [write] = plan_figures(FigureRequest(model.folder, "abc"))
    assert write() == Path("attention.png") and (tmp_path / "attention.png").read_bytes().startswith(PNG_MAGIC)


# --- Transformer: grid of layers x heads, head view ----------------------------------------------


def fake_maps(layers=(3, 2), heads=4, source=("a", "b", "c", "</s>"), target=("x", "y", "</s>")):
    """A dict shaped like Translator.attention's: 3 encoder layers, 2 decoder layers by default."""
    S, T = len(source), len(target)
    rng = np.random.default_rng(0)

    def weights(n_layers, rows, columns, causal=False):
        w = rng.random((n_layers, heads, rows, columns)) ** 3
        if causal:
            w = w * np.tril(np.ones((rows, columns)))
        return w / w.sum(-1, keepdims=True)

    return {
        "encoder": weights(layers[0], S, S),
        "decoder": weights(layers[1], T, T, causal=True),
        "cross": weights(layers[1], T, S),
        "source_tokens": list(source),
        "tokens": list(target),
        "decoder_tokens": ["<s>", *target[:-1]],
    }


@pytest.mark.parametrize("kind, layers", [("encoder", 3), ("decoder", 2), ("cross", 2)])
def test_grid_has_one_heatmap_per_layer_and_head(kind, layers, tmp_path):
    maps = fake_maps()
    fig = attention_grid(maps, kind)
    cells = [ax for ax in fig.axes if ax.get_label().startswith("layer ")]
    assert len(cells) == layers * 4
    assert {ax.get_label() for ax in cells} == {f"layer {n} head {h}" for n in range(layers) for h in range(4)}
    np.testing.assert_allclose(axis(fig, "layer 1 head 3").images[0].get_array(), maps[kind][1, 3])
    # query tokens down the first column, key tokens along the last row
    keys = maps["decoder_tokens"] if kind == "decoder" else maps["source_tokens"]
    queries = maps["source_tokens"] if kind == "encoder" else maps["tokens"]
    assert tick_texts(axis(fig, "layer 0 head 0").get_yticklabels()) == queries
    assert tick_texts(axis(fig, f"layer {layers - 1} head 2").get_xticklabels()) == keys
    path = save(fig, tmp_path / "grid.png")
    assert path.read_bytes().startswith(PNG_MAGIC)


@pytest.mark.parametrize("kind", ["encoder", "decoder", "cross"])
def test_head_view_lines_have_the_weights_as_opacity(kind, tmp_path):
    maps = fake_maps()
    fig = head_view_figure(maps, kind, layer=1, head=2)
    ax = axis(fig, "head_view")
    [lines] = ax.collections
    weights = maps[kind][1, 2]
    assert len(lines.get_segments()) == weights.size
    np.testing.assert_allclose(lines.get_colors()[:, 3], weights.ravel(), atol=1e-6)
    texts = [t.get_text() for t in ax.texts]
    queries = maps["source_tokens"] if kind == "encoder" else maps["tokens"]
    keys = {"encoder": maps["source_tokens"], "decoder": maps["decoder_tokens"], "cross": maps["source_tokens"]}[kind]
    assert texts == queries + keys
    assert "layer 1, head 2" in fig.get_suptitle()
    assert save(fig, tmp_path / "heads.svg").read_text().startswith("<?xml")


def test_head_view_of_the_average_of_the_heads_and_the_last_layer():
    maps = fake_maps()
    fig = head_view_figure(maps, "cross")  # last layer, average of the heads
    [lines] = axis(fig, "head_view").collections
    np.testing.assert_allclose(lines.get_colors()[:, 3], maps["cross"][-1].mean(0).ravel(), atol=1e-6)
    assert "layer 1, average of the heads" in fig.get_suptitle()


@pytest.mark.parametrize(
    "kind, layer, head, message",
    [
        ("encoder", 3, 0, "layer 3 does not exist: the encoder self-attention has 3 layers, numbered 0 to 2"),
        ("cross", 2, 0, "layer 2 does not exist: the cross-attention has 2 layers, numbered 0 to 1"),
        ("decoder", 0, 4, "head 4 does not exist: each layer has 4 heads, numbered 0 to 3"),
        ("cross", 0, -1, "head -1 does not exist"),
    ],
)
def test_head_view_of_a_missing_layer_or_head_is_a_clear_error(kind, layer, head, message):
    with pytest.raises(AttnmtError, match=message):
        head_view_figure(fake_maps(), kind, layer, head)


def test_unknown_kind_is_a_clear_error():
    with pytest.raises(AttnmtError, match="kind must be one of encoder, decoder, cross"):
        attention_grid(fake_maps(), "self")


def test_cli_plot_transformer_figures(tiny_transformer, tmp_path):
    folder = str(tiny_transformer.folder)
    heads, grid, heat = tmp_path / "heads.png", tmp_path / "grid.svg", tmp_path / "heat.png"
    code, out, _ = run(
        "plot",
        folder,
        "abcdef",
        "--head-view",
        str(heads),
        "--kind",
        "encoder",
        "--layer",
        "2",
        "--head",
        "3",
        "--grid",
        str(grid),
        "--out",
        str(heat),
    )
    assert code == 0, out
    assert out.split() == [str(heat), str(heads), str(grid)]
    assert heads.read_bytes().startswith(PNG_MAGIC) and heat.read_bytes().startswith(PNG_MAGIC)
    assert grid.read_text().startswith("<?xml")
    assert Image.open(heads).size[1] > 100


@pytest.mark.parametrize(
    "options, message",
    [
        (
            ["--head-view", "h.png", "--layer", "3"],
            "--layer 3 does not exist: the cross-attention has 2 layers, numbered 0 to 1",
        ),
        (
            ["--head-view", "h.png", "--kind", "encoder", "--head", "9"],
            "--head 9 does not exist: each layer has 4 heads, numbered 0 to 3",
        ),
        (["--grid", "g.pdf"], "g.pdf: the file name must end in .png or .svg"),
        (["--layer", "1"], "--layer and --head choose the attention --head-view FILE draws"),
    ],
)
def test_cli_plot_transformer_errors(tiny_transformer, tmp_path, options, message):
    options = [str(tmp_path / o) if o.endswith(("png", "pdf")) else o for o in options]
    code, _, err = run("plot", tiny_transformer.folder, "abcdef", *options)
    assert code != 0 and message in err, err
    assert not list(tmp_path.iterdir())  # nothing written


def test_cli_plot_transformer_options_on_an_rnn_model(reverse_model, tmp_path):
    translator, _ = reverse_model
    code, _, err = run("plot", translator.folder, "abc", "--grid", str(tmp_path / "g.png"), "--kind", "encoder")
    assert code != 0
    assert "--grid, --kind: for the layers and heads of Transformer models" in err and "RNN model" in err
    assert not list(tmp_path.iterdir())


# --- issue 28: the step's decoder state, one colour convention, figures that display in Jupyter -------


def test_step_figure_and_html_draw_the_decoder_state():
    trace = fake_trace(["▁a", "b", "</s>"], ["▁x", "y", "</s>"], dims=12)
    fig = decoder_step_figure(trace, 1)
    np.testing.assert_allclose(axis(fig, "state").get_images()[0].get_array()[0], trace.steps[1].state)
    context, state = axis(fig, "context").get_images()[0], axis(fig, "state").get_images()[0]
    assert context.get_clim() == state.get_clim()  # one scale, as in the explorer
    page = step_html(trace, 1)
    assert "decoder state s_t" in page and page.count('title="s_t[') == len(trace.steps[1].state)


def is_blue(rgba) -> bool:
    red, _, blue = rgba[:3]
    return blue > red + 0.2


def is_red(rgba) -> bool:
    red, _, blue = rgba[:3]
    return red > blue + 0.2


def test_signed_values_are_blue_when_positive_and_red_when_negative_as_in_the_explorer():
    trace = fake_trace(["▁a", "b", "c", "</s>"], ["▁x", "y", "</s>"], dims=12)
    image = axis(encoder_states_figure(trace), "encoder_states").get_images()[0]
    assert is_blue(image.cmap(image.norm(image.norm.vmax))) and is_red(image.cmap(image.norm(image.norm.vmin)))
    step = trace.steps[1]
    step.scores = np.array([2.0, -1.0, 0.5, -3.0])
    fig = decoder_step_figure(trace, 1)
    colours = [bar.get_facecolor() for bar in axis(fig, "scores").patches]
    assert [is_blue(c) for c in colours] == [s > 0 for s in step.scores]
    assert [is_red(c) for c in colours] == [s < 0 for s in step.scores]
    for name in ("context", "state"):
        image = axis(fig, name).get_images()[0]
        assert is_blue(image.cmap(1.0)) and is_red(image.cmap(0.0))
    # the notebook's HTML, like the explorer: rgb(33,102,172) for +1, rgb(178,24,43) for -1
    small = fake_trace(["▁a", "</s>"], ["▁x", "</s>"], dims=2)
    small.steps[0].context = small.steps[0].state = np.array([1.0, -1.0])
    page = step_html(small, 0)
    assert 'background:rgb(33,102,172)" title="dim 0' in page and 'background:rgb(178,24,43)" title="dim 1' in page


def test_figures_display_in_jupyter():
    trace = fake_trace(["▁a", "b", "</s>"], ["▁x", "y", "</s>"], dims=12)
    figures = [
        attention_heatmap(trace),
        encoder_states_figure(trace),
        decoder_step_figure(trace, 0),
        training_curves_of_a_handmade_log(),
    ]
    try:
        from IPython.core.formatters import DisplayFormatter
    except ImportError:  # without IPython, what it would call
        formats = [{"image/png": fig._repr_png_()} for fig in figures]
    else:
        formats = [DisplayFormatter().format(fig)[0] for fig in figures]
    for shown in formats:
        assert shown["image/png"].startswith(PNG_MAGIC)


def training_curves_of_a_handmade_log():
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "metrics.jsonl"
        path.write_text(
            '{"type": "train", "step": 1, "loss": 2.0}\n{"type": "valid", "step": 1, "loss": 1.5, '
            '"perplexity": 4.5, "bleu": 3.0}\n',
            encoding="utf-8",
        )
        return training_curves(path)


# --- speech figures: legible attention, cropped to the speech (issue 28) -------------------------


def fake_transcription(frames: int = 160, speech=(20, 130), seed: int = 0):
    """Log-mels with speech between frames speech[0] and speech[1] (10 ms each), and an attention
    spread thinly over 4-frame states, as a speech model's often is."""
    from types import SimpleNamespace

    rng = np.random.default_rng(seed)
    features = rng.normal(size=(frames, 80)) - 8.0
    features[speech[0] : speech[1]] += 6.0
    tokens = ["h", "i", "</s>"]
    attention = random_attention(len(tokens), frames // 4, seed) * 0.5 + 0.5 / (frames // 4)
    return SimpleNamespace(features=features, attention=attention, tokens=tokens, hop_ms=10.0, frames_per_state=4)


def test_speech_alignment_is_cropped_to_the_speech_and_coloured_up_to_its_largest_weight():
    from attnmt.speech.figures import spectrogram_attention, speech_span

    t = fake_transcription()
    start, end = speech_span(t.features, 0.01)
    assert start == pytest.approx(0.1) and end == pytest.approx(1.4)  # 0.2-1.3 s, with 0.1 s around
    fig = spectrogram_attention(t)
    assert axis(fig, "spectrogram").get_xlim() == pytest.approx((0.1, 1.4))
    image = axis(fig, "attention").get_images()[0]
    np.testing.assert_allclose(image.get_array(), t.attention)
    assert image.norm.vmax == t.attention.max() < 0.5  # the largest weight is the darkest colour
    assert image.norm(0.04 * t.attention.max()) == pytest.approx(0.2)  # small weights stay visible (square root)
    whole = spectrogram_attention(t, crop=False)
    assert axis(whole, "spectrogram").get_xlim() == pytest.approx((0.0, 1.6))
