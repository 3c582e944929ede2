"""Matplotlib figures of attention: heatmaps, encoder states, one decoder step, an animated GIF of
the decoding, training curves, and for Transformers the grid of every layer and head and the head
view of one of them.

Every function returns a ``matplotlib.figure.Figure`` drawn on the Agg canvas, without pyplot, so
nothing depends on (or changes) the global backend; ``save(fig, "x.png")`` writes PNG or SVG.
Figures grow with the number of tokens and shrink their fonts, so sentences of 50 and more tokens
keep one readable label per token.

Token labels are shown as they are, "▁" (the sentencepiece start-of-word mark) included;
``space_marker=""`` strips it, ``space_marker="␣"`` (or any string) replaces it.

Signed values (states, context vectors, scores) follow the explorer's convention: blue positive,
red negative, white zero. The figures display themselves in Jupyter (``_repr_png_``).

The decoder-step figure and the animation are drawn in attnmt.viz.steps, on the shared pieces of
attnmt.viz.drawing (``new_figure``, ``check_step``, ``unpack_attention``, ...); all are importable
from here.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure

from attnmt.core.errors import AttnmtError
from attnmt.core.folders import inside_folder
from attnmt.viz.drawing import (
    BAR,
    DIVERGING,
    HIGHLIGHT,
    cell_inches,
    check_step,
    dimension_ticks,
    draw_cell_grid,
    label_rotation,
    new_figure,
    select_dimensions,
    set_xlabels,
    set_ylabels,
    tick_font_size,
    token_labels,
    unpack_attention,
)
from attnmt.viz.steps import decoder_step_figure, decoding_animation
from attnmt.viz.words import merge_pieces

__all__ = [
    "attention_heatmap",
    "encoder_states_figure",
    "decoder_step_figure",
    "decoding_animation",
    "training_curves",
    "save",
    "read_metrics",
    "select_dimensions",
    "attention_grid",
    "head_view_figure",
    "check_layer_head",
    "KINDS",
    "new_figure",
    "check_step",
    "unpack_attention",
]


# --- figures -------------------------------------------------------------------------------------


def attention_heatmap(
    source_tokens,
    target_tokens=None,
    attention=None,
    title: str | None = None,
    merge_words: bool = False,
    *,
    space_marker: str | None = None,
    cmap: str = "Blues",
    values: bool = False,
    quantity: str = "attention weight",
) -> Figure:
    """The attention matrix as a heatmap: source tokens across the top (x), target tokens down (y),
    one cell per (target, source) pair, weights 0 (white) to 1 (dark), with a colour bar.

    Takes the tokens and the matrix (len(target_tokens) x len(source_tokens)), or a Translation or
    DecodingTrace alone: ``attention_heatmap(t)``. ``merge_words`` merges subword pieces into words
    (source columns summed, target rows averaged: see ``attnmt.viz.words``). ``values`` writes each
    weight in its cell. ``quantity``: what the colour bar says the cells are (another matrix of the
    same form: saliency).
    """
    source_tokens, target_tokens, matrix = unpack_attention(source_tokens, target_tokens, attention)
    if merge_words:
        source_tokens, target_tokens, matrix = merge_pieces(source_tokens, target_tokens, matrix)
    xs, ys = token_labels(source_tokens, space_marker), token_labels(target_tokens, space_marker)
    n_src, n_tgt = len(xs), len(ys)
    cell = cell_inches(max(n_src, n_tgt))
    longest_x = max(len(x) for x in xs) if label_rotation(xs) else 1
    longest_y = max(len(y) for y in ys)
    width = n_src * cell + 0.09 * longest_y + 1.6
    height = n_tgt * cell + 0.08 * longest_x + (1.0 if title else 0.7)
    fig = new_figure(max(width, 3.5), max(height, 2.5))
    ax = fig.add_subplot()
    ax.set_label("attention")
    image = ax.imshow(matrix, cmap=cmap, vmin=0.0, vmax=1.0, aspect="equal", interpolation="nearest")
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    set_xlabels(ax, xs, top=True)
    set_ylabels(ax, ys)
    draw_cell_grid(ax, n_tgt, n_src)
    ax.tick_params(which="major", length=2)
    unit = "word" if merge_words else "token"
    ax.set_xlabel(f"source {unit}s", fontsize=9)
    ax.set_ylabel(f"target {unit}s", fontsize=9)
    if values:
        for i in range(n_tgt):
            for j in range(n_src):
                ax.text(
                    j,
                    i,
                    f"{matrix[i, j]:.2f}".lstrip("0"),
                    ha="center",
                    va="center",
                    fontsize=max(5, tick_font_size(max(n_src, n_tgt)) - 3),
                    color="white" if matrix[i, j] > 0.55 else "black",
                )
    bar = fig.colorbar(image, ax=ax, shrink=min(1.0, max(0.45, 4 / max(n_tgt * cell, 1e-9))), aspect=25, pad=0.02)
    bar.set_label(quantity + (" (word)" if merge_words else ""), fontsize=8)
    bar.ax.tick_params(labelsize=7)
    if title:
        fig.suptitle(title, fontsize=11, parse_math=False)
    return fig


def encoder_states_figure(
    trace, max_dims: int | None = 32, *, space_marker: str | None = None, cmap: str = DIVERGING
) -> Figure:
    """The encoder states h_j (one row of coloured cells per source token) above the context vector
    c_t of every decoding step (one row per output token), on one symmetric colour scale.

    With ``max_dims`` (default 32) only that many dimensions are drawn: those whose values vary most
    across the source tokens, kept in their original order and labelled with their index below each
    panel (the context vectors live in the same space, c_t = sum_j a_j h_j, and show the same
    dimensions). ``max_dims=None`` draws all of them.
    """
    states = np.asarray(trace.encoder_states, dtype=np.float64)
    contexts = (
        np.stack([np.asarray(s.context, dtype=np.float64) for s in trace.steps])
        if trace.steps
        else np.zeros((0, states.shape[1]))
    )
    dims = select_dimensions(states, max_dims)
    shown_states, shown_contexts = states[:, dims], contexts[:, dims]
    limit = float(max(np.abs(shown_states).max(initial=0.0), np.abs(shown_contexts).max(initial=0.0))) or 1.0
    sources, targets = token_labels(trace.source_tokens, space_marker), token_labels(trace.tokens, space_marker)
    rows = len(sources) + len(targets)
    row = 0.28 if rows <= 60 else max(0.12, 17.0 / rows)
    column = min(0.22, 18.0 / len(dims))
    label_width = 0.09 * max((len(t) for t in sources + targets), default=1)
    fig = new_figure(max(5.0, len(dims) * column + label_width + 1.8), max(3.0, rows * row + 2.2))
    panels = [
        (
            shown_states,
            sources,
            f"encoder states h_j ({len(dims)} of {states.shape[1]} dimensions)",
            "encoder_states",
            "source tokens",
        )
    ]
    if len(targets):
        panels.append(
            (
                shown_contexts,
                targets,
                "context vectors c_t = \u03a3_j a_tj h_j (one per step)",
                "contexts",
                "output tokens",
            )
        )
    axes = fig.subplots(
        len(panels), 1, squeeze=False, gridspec_kw={"height_ratios": [max(1, len(p[1])) for p in panels]}
    )[:, 0]
    image = None
    for ax, (matrix, labels, title, name, ylabel) in zip(axes, panels):
        ax.set_label(name)
        image = ax.imshow(matrix, cmap=cmap, vmin=-limit, vmax=limit, aspect="auto", interpolation="nearest")
        set_ylabels(ax, labels)
        dimension_ticks(ax, dims)
        ax.set_title(title, fontsize=10, parse_math=False)
        ax.set_ylabel(ylabel, fontsize=9)
        ax.set_xlabel("dimension", fontsize=8)
    bar = fig.colorbar(image, ax=list(axes), shrink=0.8, aspect=30, pad=0.02)
    bar.set_label("value", fontsize=8)
    bar.ax.tick_params(labelsize=7)
    return fig


# --- Transformer: layers and heads ------------------------------------------------------------------

# kind -> (name in titles, key of the query tokens, key of the key tokens) in Translator.attention's dict
KINDS = {
    "encoder": ("encoder self-attention", "source_tokens", "source_tokens"),
    "decoder": ("decoder self-attention", "tokens", "decoder_tokens"),
    "cross": ("cross-attention", "tokens", "source_tokens"),
}
HEAD_COLOURS = {"encoder": "#2b6cb0", "decoder": "#2f855a", "cross": "#c05621"}


def _weights_of(maps, kind: str) -> np.ndarray:
    if kind not in KINDS:
        raise AttnmtError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    weights = np.asarray(maps[kind], dtype=np.float64)
    if weights.ndim != 4:
        raise ValueError(f"maps[{kind!r}] has shape {weights.shape}, expected (layers, heads, queries, keys)")
    return weights


def check_layer_head(maps, kind: str, layer: int, head: int | None, names=("layer", "head")):
    """AttnmtError unless ``layer`` (and ``head``, None = the average of the heads) exist in
    ``maps[kind]``; the message names the option (``names``: how the caller calls them) and the
    valid range. Layers and heads count from 0, like the arrays."""
    layers, heads = _weights_of(maps, kind).shape[:2]
    if not isinstance(layer, (int, np.integer)) or not 0 <= layer < layers:
        raise AttnmtError(
            f"{names[0]} {layer} does not exist: the {KINDS[kind][0]} has {layers} layers, numbered 0 to {layers - 1}"
        )
    if head is not None and (not isinstance(head, (int, np.integer)) or not 0 <= head < heads):
        raise AttnmtError(
            f"{names[1]} {head} does not exist: each layer has {heads} heads, numbered 0 to "
            f"{heads - 1} (or no {names[1]} for their average)"
        )


def attention_grid(
    maps, kind: str = "cross", *, space_marker: str | None = None, cmap: str = "Blues", title: str | None = None
) -> Figure:
    """Every layer and head of one kind of attention as small heatmaps: one row of axes per layer,
    one column per head, each labelled "layer L head H" (``ax.get_label()``). Query tokens down the
    first column, key tokens along the last row (when few enough to read).

    ``maps``: the dict of ``Translator.attention`` (or the JSON of ``POST /attention``); ``kind``:
    "encoder", "decoder" or "cross"."""
    weights = _weights_of(maps, kind)
    name, query_key, key_key = KINDS[kind]
    layers, heads, rows, columns = weights.shape
    ys, xs = token_labels(maps[query_key], space_marker), token_labels(maps[key_key], space_marker)
    side = min(2.4, max(1.3, 0.12 * max(rows, columns)))  # inches per small heatmap
    labelled = max(rows, columns) <= 40  # past that, one label per token is unreadable at this size
    fig = new_figure(heads * side + 1.6, layers * side + 1.0)
    axes = fig.subplots(layers, heads, squeeze=False)
    image = None
    for layer in range(layers):
        for head in range(heads):
            ax = axes[layer, head]
            ax.set_label(f"layer {layer} head {head}")
            image = ax.imshow(
                weights[layer, head], cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest"
            )
            ax.set_title(f"L{layer} H{head}", fontsize=8)
            size = max(4, tick_font_size(max(rows, columns)) - 4)
            if labelled and head == 0:
                ax.set_yticks(range(rows), labels=ys, fontsize=size, parse_math=False)
            else:
                ax.set_yticks([])
            if labelled and layer == layers - 1:
                ax.set_xticks(range(columns), labels=xs, fontsize=size, rotation=90, parse_math=False)
            else:
                ax.set_xticks([])
    bar = fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.6, aspect=30, pad=0.02)
    bar.set_label("attention weight", fontsize=8)
    bar.ax.tick_params(labelsize=7)
    fig.suptitle(
        title or f"{name}: {layers} layers × {heads} heads (rows: layers, columns: heads)",
        fontsize=10,
        parse_math=False,
    )
    return fig


def head_view_figure(
    maps,
    kind: str = "cross",
    layer: int = -1,
    head: int | None = None,
    *,
    space_marker: str | None = None,
    title: str | None = None,
) -> Figure:
    """The head view of one layer and head: query tokens in a column on the left, key tokens on the
    right, a line from each query to each key whose opacity is the attention weight (so a row's
    lines share one unit of ink). ``head=None`` draws the average of the layer's heads;
    ``layer=-1`` the last layer. Layers and heads count from 0.

    The lines are one LineCollection in the axes labelled "head_view", in row-major order (query
    i, key j), each with alpha = weight."""
    weights = _weights_of(maps, kind)
    layer = weights.shape[0] - 1 if layer == -1 else layer
    check_layer_head(maps, kind, layer, head)
    matrix = weights[layer].mean(axis=0) if head is None else weights[layer, head]
    name, query_key, key_key = KINDS[kind]
    left, right = token_labels(maps[query_key], space_marker), token_labels(maps[key_key], space_marker)
    n = max(len(left), len(right), 1)
    longest = max((len(t) for t in left + right), default=1)
    fig = new_figure(3.0 + 0.16 * longest, 0.26 * n + 1.2)
    ax = fig.add_subplot()
    ax.set_label("head_view")
    rgb = to_rgb(HEAD_COLOURS[kind])
    segments = [[(0.0, i), (1.0, j)] for i in range(len(left)) for j in range(len(right))]
    colours = [(*rgb, float(np.clip(matrix[i, j], 0.0, 1.0))) for i in range(len(left)) for j in range(len(right))]
    ax.add_collection(LineCollection(segments, colors=colours, linewidths=2.0))
    size = tick_font_size(n)
    for i, token in enumerate(left):
        ax.text(-0.04, i, token, ha="right", va="center", fontsize=size, parse_math=False)
    for j, token in enumerate(right):
        ax.text(1.04, j, token, ha="left", va="center", fontsize=size, parse_math=False)
    ax.set_xlim(-0.5, 1.5)
    ax.set_ylim(n - 0.5, -0.5)
    ax.axis("off")
    which = "average of the heads" if head is None else f"head {head}"
    queries = "output" if kind != "encoder" else "source"
    keys = {"encoder": "source", "decoder": "decoder input", "cross": "source"}[kind]
    ax.set_title(f"{queries} → {keys}", fontsize=8)
    fig.suptitle(title or f"{name}, layer {layer}, {which}", fontsize=10, parse_math=False)
    return fig


def read_metrics(path) -> list[dict]:
    """The records of a metrics.jsonl file (or of the one in an experiment folder)."""
    path = Path(path)
    if path.is_dir():  # a model folder, which may come from someone else: its file must be its own
        path = inside_folder(path, path / "metrics.jsonl")
    if not path.is_file():
        raise AttnmtError(f"{path}: no such file (training writes metrics.jsonl into the experiment folder)")
    records = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                raise AttnmtError(f"{path}, line {number}: not a JSON object") from None
            if not isinstance(record, dict):
                raise AttnmtError(f"{path}, line {number}: not a JSON object")
            records.append(record)
    if not any(r.get("type") in ("train", "valid") and "step" in r for r in records):
        raise AttnmtError(f"{path}: no training or validation records (empty metrics file)")
    return records


def training_curves(metrics_jsonl_path, title: str | None = None) -> Figure:
    """Training curves from metrics.jsonl (or an experiment folder holding it): training and dev
    loss, dev perplexity and dev BLEU against the step. The axes are labelled "loss", "perplexity"
    and "bleu". A missing, empty or malformed file is an AttnmtError."""
    records = read_metrics(metrics_jsonl_path)

    def series(kind: str, key: str):
        points = [
            (r["step"], r[key])
            for r in records
            if r.get("type") == kind and isinstance(r.get(key), (int, float)) and "step" in r
        ]
        return [p[0] for p in points], [p[1] for p in points]

    fig = new_figure(13.0, 3.8)
    ax_loss, ax_ppl, ax_bleu = fig.subplots(1, 3)
    for ax, name in zip((ax_loss, ax_ppl, ax_bleu), ("loss", "perplexity", "bleu")):
        ax.set_label(name)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    steps, values = series("train", "loss")
    if steps:
        ax_loss.plot(steps, values, color=BAR, linewidth=1.2, label="train")
    steps, values = series("valid", "loss")
    if steps:
        ax_loss.plot(steps, values, color=HIGHLIGHT, marker="o", markersize=3, linewidth=1.2, label="dev")
    ax_loss.set_title("loss (per token)")
    ax_loss.legend(fontsize=8)
    for ax, key, label, colour in (
        (ax_ppl, "perplexity", "dev perplexity", HIGHLIGHT),
        (ax_bleu, "bleu", "dev BLEU", "#2ca02c"),
    ):
        steps, values = series("valid", key)
        if steps:
            ax.plot(steps, values, color=colour, marker="o", markersize=3, linewidth=1.2)
        else:
            ax.text(0.5, 0.5, "no validation records", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(label)
    if (
        ax_ppl.lines
        and min(ax_ppl.lines[0].get_ydata()) > 0
        and max(ax_ppl.lines[0].get_ydata()) / min(ax_ppl.lines[0].get_ydata()) > 20
    ):
        ax_ppl.set_yscale("log")
    if title:
        fig.suptitle(title, parse_math=False)
    return fig


def save(fig: Figure, path, dpi: int = 150) -> Path:
    """Writes a figure as PNG or SVG, chosen by the file suffix; creates missing folders. Returns the path."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".png", ".svg"):
        raise AttnmtError(f"{path}: unknown image format {suffix or '(no suffix)'!r}; use .png or .svg")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format=suffix[1:], dpi=dpi, bbox_inches="tight")
    except OSError as e:
        raise AttnmtError(f"cannot write {path}: {e.strerror or e}") from None
    return path
