"""Pictures of the decomposable attention model on one sentence pair (an attnmt.pairs.classifier.PairResult):
every step of it in one matplotlib figure, and the attention as HTML for Jupyter.

    import attnmt, attnmt.viz as viz
    model = attnmt.load("runs/quickstart-pairs/model")
    [r] = model.classify([("three red dogs are running", "three blue dogs are running")])
    viz.save(viz.pair_figure(r), "pair.png")      # attend, compare, aggregate
    viz.show_pair(r, direction="hypothesis")      # inline in Jupyter (or just ``r`` ending a cell)

The attention matrix has the premise's tokens as rows and the hypothesis's as columns, in either
softmax direction: "premise" (each row sums to 1: what premise word i attends to, beta_i) or
"hypothesis" (each column sums to 1: what hypothesis word j attends to, alpha_j).
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from attnmt.viz.drawing import (
    DIVERGING,
    cell_inches,
    dimension_ticks,
    draw_cell_grid,
    new_figure,
    select_dimensions,
    set_xlabels,
    set_ylabels,
    token_labels,
)
from attnmt.viz.notebook import HTMLView, heatmap_html

DIRECTION_TITLES = {
    "premise": "attend: {} over the hypothesis (rows sum to 1)",
    "hypothesis": "attend: {} over the premise (columns sum to 1)",
}


def direction_title(result, direction: str) -> str:
    """ "attend: softmax over the hypothesis (rows sum to 1)", with the result's normalizer."""
    return DIRECTION_TITLES[direction].format(getattr(result, "normalizer", "softmax"))


def pair_figure(
    result,
    direction: str = "premise",
    max_dims: int | None = 24,
    *,
    space_marker: str | None = "",
    title: str | None = None,
) -> Figure:
    """Attend (the attention matrix of ``direction``), compare (the vectors v1_i and v2_j as
    cells, the ``max_dims`` dimensions that vary most) and aggregate (v1, v2 and the class
    probabilities) for one PairResult."""
    weights = result.attention(direction)
    premise, hypothesis = (
        token_labels(result.premise_tokens, space_marker),
        token_labels(result.hypothesis_tokens, space_marker),
    )
    compared = np.concatenate([result.compared_premise, result.compared_hypothesis])
    dims = select_dimensions(compared, max_dims)
    cell = cell_inches(max(len(premise) + len(hypothesis), len(dims)))
    width = max(len(hypothesis), len(dims)) * cell * 2 + 4
    height = (len(premise) + len(hypothesis) + 4) * cell + 2.5
    fig = new_figure(max(width, 8), max(height, 5))
    grid = fig.add_gridspec(3, 2, height_ratios=[len(premise), len(hypothesis), 4], width_ratios=[1, 1])
    ax = fig.add_subplot(grid[0:2, 0])
    _matrix(ax, weights, premise, hypothesis, vmin=0, vmax=1, cmap="Blues")
    ax.set_title(direction_title(result, direction), fontsize=9)
    ax.set_xlabel("hypothesis", fontsize=9)
    ax.set_ylabel("premise", fontsize=9)
    limit = float(np.abs(compared[:, dims]).max()) or 1.0
    for row, (name, vectors, tokens) in enumerate(
        (
            ("v1_i = G([a_i; beta_i])", result.compared_premise, premise),
            ("v2_j = G([b_j; alpha_j])", result.compared_hypothesis, hypothesis),
        )
    ):
        ax = fig.add_subplot(grid[row, 1])
        _matrix(ax, vectors[:, dims], tokens, None, vmin=-limit, vmax=limit, cmap=DIVERGING)
        dimension_ticks(ax, dims)
        ax.set_title(f"compare: {name}", fontsize=9)
    _aggregate(fig.add_subplot(grid[2, 0]), result, dims)
    _class_bars(fig.add_subplot(grid[2, 1]), result)
    fig.suptitle(
        title or f"{result.premise}  |  {result.hypothesis}  \u2192  {result.label}", fontsize=10, parse_math=False
    )
    return fig


def _matrix(ax, values, rows: list[str], columns: list[str] | None, **style):
    image = ax.imshow(values, aspect="auto", interpolation="nearest", **style)
    set_ylabels(ax, rows)
    if columns is not None:
        ax.xaxis.tick_top()
        set_xlabels(ax, columns, top=True)
    draw_cell_grid(ax, len(rows), values.shape[1])
    ax.figure.colorbar(image, ax=ax, shrink=0.8, aspect=20, pad=0.02).ax.tick_params(labelsize=7)


def _aggregate(ax, result, dims):
    summaries = np.stack([result.premise_summary[dims], result.hypothesis_summary[dims]])
    limit = float(np.abs(summaries).max()) or 1.0
    ax.imshow(summaries, aspect="auto", interpolation="nearest", cmap=DIVERGING, vmin=-limit, vmax=limit)
    ax.set_yticks([0, 1], labels=["v1 = sum_i v1_i", "v2 = sum_j v2_j"], fontsize=8)
    dimension_ticks(ax, dims)
    ax.set_title("aggregate", fontsize=9)


def _class_bars(ax, result):
    labels, probabilities = result.labels, [result.probabilities[label] for label in result.labels]
    bars = ax.barh(
        range(len(labels)), probabilities, color=["#d62728" if label == result.label else "#9aa5b8" for label in labels]
    )
    for bar, score in zip(bars, result.class_scores):
        ax.text(bar.get_width() + 0.01, bar.get_y() + bar.get_height() / 2, f"y = {score:.2f}", va="center", fontsize=7)
    ax.set_yticks(range(len(labels)), labels=labels, fontsize=8)
    ax.set_xlim(0, 1.25)
    ax.invert_yaxis()
    ax.set_title("y = H([v1; v2]): class probabilities", fontsize=9)


def show_pair(result, direction: str = "premise", *, space_marker: str | None = "") -> HTMLView:
    """The attention of a PairResult as an HTML table (premise rows, hypothesis columns; hover a
    cell for its weight), with the label and probabilities: inline in Jupyter."""
    chances = ", ".join(f"{label} {p:.2f}" for label, p in result.probabilities.items())
    title = f"{result.label} ({chances}): {direction_title(result, direction)}"
    table = heatmap_html(
        result.hypothesis_tokens,
        result.premise_tokens,
        result.attention(direction),
        title=title,
        space_marker=space_marker,
        names=("hypothesis", "premise"),
    )
    return HTMLView(table, "pair attention")
