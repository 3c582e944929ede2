"""Figures of decoding, step by step: one decoder step in detail (``decoder_step_figure``) and an
animated GIF of the whole decoding (``decoding_animation``). Importable from attnmt.viz.figures
and attnmt.viz too.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.animation import FuncAnimation, PillowWriter
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import MaxNLocator

from attnmt.core.errors import AttnmtError
from attnmt.viz.drawing import (
    BAR,
    DIVERGING,
    HIGHLIGHT,
    MUTED,
    NEGATIVE,
    POSITIVE,
    cell_inches,
    check_step,
    draw_cell_grid,
    label_rotation,
    new_figure,
    set_xlabels,
    set_ylabels,
    token_labels,
    unpack_attention,
)

__all__ = ["decoder_step_figure", "decoding_animation"]


def decoder_step_figure(trace, step: int, *, space_marker: str | None = None) -> Figure:
    """One decoder step (numbered from 0) in detail: the scores e_j of every source token (blue
    positive, red negative), their weights a_j (softmax, or the trace's normalizer: sparsemax or
    entmax15; the largest outlined), the context vector
    c_t and the decoder state s_t as rows of cells on one scale, and the top-k next tokens with
    their probabilities (the chosen one in red). For a model whose attention reads the coverage
    (the trace's ``coverage``: coverage attention, csparsemax), the coverage of every source token
    before the step with the step's weights on top, and csparsemax's bound.

    The axes are labelled "scores", "weights", ("coverage",) "context", "state" and "top_k"
    (``ax.get_label()``).
    """
    st = check_step(trace, step)
    sources = token_labels(trace.source_tokens, space_marker)
    top_k = list(st.top_k)
    use = getattr(trace, "coverage", None) if st.weights is not None else None
    axes = _step_axes(len(sources), len(top_k), coverage=use is not None)
    fig, (ax_scores, ax_weights, *ax_coverage, ax_context, ax_state, ax_top) = axes
    token = token_labels([st.token], space_marker)[0]
    fig.suptitle(f"step {step}: output \u201c{token}\u201d (p = {st.probability:.3f})", fontsize=11, parse_math=False)
    if st.weights is None:
        _no_attention(ax_scores, ax_weights)
    else:
        _attention_bars(ax_scores, ax_weights, st, sources, getattr(trace, "normalizer", None) or "softmax")
    if use is not None:
        _coverage_bars(ax_coverage[0], trace, step, sources, use)
    _vector_rows(
        fig, ax_context, ax_state, np.asarray(st.context, dtype=np.float64), np.asarray(st.state, dtype=np.float64)
    )
    _top_k_bars(ax_top, top_k, st.token, space_marker)
    return fig


def _step_axes(n: int, k: int, coverage: bool = False):
    """The figure of a step over n source tokens with k candidates, and its axes, top to bottom:
    "scores", "weights", ("coverage" if ``coverage``,) "context", "state" and "top_k"."""
    width = max(7.0, n * cell_inches(n) + 2.5)
    height_top_k = max(1.2, 0.3 * k + 0.6)
    names = ("scores", "weights") + ("coverage",) * coverage + ("context", "state", "top_k")
    heights = [2.4, 2.4] + [2.0] * coverage + [0.8, 0.8, height_top_k]
    fig = new_figure(width, sum(heights) + 1.2)
    axes = fig.subplots(len(names), 1, gridspec_kw={"height_ratios": heights})
    for ax, name in zip(axes, names):
        ax.set_label(name)
    return fig, axes


def _no_attention(ax_scores, ax_weights):
    for ax in (ax_scores, ax_weights):
        ax.text(
            0.5,
            0.5,
            "no attention: the context is the final encoder state at every step",
            ha="center",
            va="center",
            transform=ax.transAxes,
            fontsize=9,
        )
        ax.set_xticks([])
        ax.set_yticks([])


def _attention_bars(ax_scores, ax_weights, st, sources: list[str], normalizer: str = "softmax"):
    """Scores e_j coloured by sign, weights a_j = normalizer(e)_j; the most attended token outlined,
    its label bold. A sparse normalizer's title counts the weights that are exactly 0."""
    n = len(sources)
    weights = np.asarray(st.weights, dtype=np.float64)
    best = int(weights.argmax())
    edges = ["black" if j == best else "none" for j in range(n)]
    outside = ""
    if st.scores is not None:
        scores = np.asarray(st.scores, dtype=np.float64)
        if not np.isfinite(scores).all():  # -inf outside an attention window (local attention): no bar
            scores, outside = np.where(np.isfinite(scores), scores, np.nan), "; none outside the window"
        ax_scores.bar(
            range(n),
            scores,
            color=[POSITIVE if e >= 0 else NEGATIVE for e in scores],
            width=0.8,
            edgecolor=edges,
            linewidth=1.5,
        )
        ax_scores.axhline(0, color="black", linewidth=0.6)
    ax_scores.set_ylabel("score e_j", fontsize=9)
    ax_scores.set_title(f"attention scores (before the {normalizer}; blue > 0, red < 0{outside})", fontsize=10)
    ax_weights.bar(range(n), weights, color=BAR, width=0.8, edgecolor=edges, linewidth=1.5)
    ax_weights.set_ylim(0, max(float(weights.max()) * 1.15, 0.05))
    ax_weights.set_ylabel("weight a_j", fontsize=9)
    zeros = "" if normalizer == "softmax" else f"; {int((weights == 0).sum())} of {n} exactly 0"
    of = "e, u" if normalizer == "csparsemax" else "e"  # (u: what each source word has left of its fertility)
    ax_weights.set_title(f"attention weights a_j = {normalizer}({of})_j (the largest outlined{zeros})", fontsize=10)
    if n <= 30:
        for j, w in enumerate(weights):
            ax_weights.text(j, w, f"{w:.2f}", ha="center", va="bottom", fontsize=7)
    for ax in (ax_scores, ax_weights):
        ax.set_xlim(-0.6, n - 0.4)
        set_xlabels(ax, sources, top=False)
        ax.get_xticklabels()[best].set_fontweight("bold")
        ax.tick_params(axis="y", labelsize=8)


def _coverage_bars(ax, trace, step: int, sources: list[str], use):
    """The coverage C_j before the step (grey: the sum of the earlier steps' weights) with the step's
    weights a_j on top (blue); for csparsemax a dashed line at the bound, which only the last token
    (the sink, unbounded) may pass."""
    n = len(sources)
    before = trace.coverage_before(step)
    weights = np.asarray(trace.steps[step].weights, dtype=np.float64)
    ax.bar(range(n), before, color=MUTED, width=0.8, label="C_j before the step")
    ax.bar(range(n), weights, bottom=before, color=BAR, width=0.8, label="+ a_j of this step")
    top = float((before + weights).max(initial=0.0))
    reads = []
    if use.in_score:
        fertility = f", divided by the fertility \u03a6_j \u2264 {use.fertility}" if use.fertility else ""
        if use.dim:  # NN-based coverage: what the score reads is a GRU's vector, updated from these weights
            fertility = f" as a GRU's {use.dim}-dimensional vector, updated from the weights"
        reads.append(f"in the score{fertility}")
    if use.bound is not None:
        ax.axhline(
            use.bound,
            color=HIGHLIGHT,
            linestyle="--",
            linewidth=1,
            label=f"bound f = {use.bound:g} (not for the last token)",
        )
        reads.append(f"a_j \u2264 f - C_j, f = {use.bound:g}")
        top = max(top, use.bound)
    ax.set_ylim(0, max(top * 1.15, 0.05))
    ax.set_ylabel("coverage C_j", fontsize=9)
    ax.set_title(
        f"coverage C_j = sum of the earlier weights (grey), this step's on top (blue); {'; '.join(reads)}", fontsize=10
    )
    ax.legend(fontsize=7, loc="best", frameon=False)
    ax.set_xlim(-0.6, n - 0.4)
    set_xlabels(ax, sources, top=False)
    ax.tick_params(axis="y", labelsize=8)


def _vector_rows(fig, ax_context, ax_state, context: np.ndarray, state: np.ndarray):
    """c_t and s_t as rows of cells on one symmetric scale (blue > 0, red < 0)."""
    limit = float(max(np.abs(context).max(initial=0.0), np.abs(state).max(initial=0.0))) or 1.0
    image = None
    for ax, vector, title in (
        (ax_context, context, f"context vector c_t ({context.size} dimensions)"),
        (ax_state, state, f"decoder state s_t ({state.size} dimensions)"),
    ):
        image = ax.imshow(
            vector[None, :], cmap=DIVERGING, vmin=-limit, vmax=limit, aspect="auto", interpolation="nearest"
        )
        ax.set_yticks([])
        ax.set_title(title, fontsize=10)
        ax.tick_params(axis="x", labelsize=7)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    bar = fig.colorbar(image, ax=[ax_context, ax_state], aspect=8, pad=0.01)
    bar.ax.tick_params(labelsize=6)


def _top_k_bars(ax_top, top_k: list, chosen: str, space_marker: str | None):
    if top_k:
        names = token_labels([t for t, _ in top_k], space_marker)
        probabilities = [p for _, p in top_k]
        colours = [HIGHLIGHT if t == chosen else MUTED for t, _ in top_k]
        ax_top.barh(range(len(top_k)), probabilities, color=colours, height=0.7)
        ax_top.set_yticks(range(len(top_k)), labels=names, fontsize=9, parse_math=False)
        ax_top.invert_yaxis()
        ax_top.set_xlim(0, 1.12)
        for i, p in enumerate(probabilities):
            ax_top.text(p + 0.01, i, f"{p:.3f}", va="center", fontsize=8)
    ax_top.set_title(f"top {len(top_k)} next tokens", fontsize=10)
    ax_top.set_xlabel("probability", fontsize=9)
    ax_top.tick_params(axis="x", labelsize=8)


def decoding_animation(
    trace, path, fps: float = 1, *, space_marker: str | None = None, cmap: str = "Blues", dpi: int = 120
) -> Path:
    """Writes an animated GIF of the decoding: one frame per step, the heatmap filling row by row,
    the current row framed in red. Returns the path."""
    path = Path(path)
    if path.suffix.lower() != ".gif":
        raise AttnmtError(f"{path}: the animation is written as a GIF, give a file name ending in .gif")
    if not fps or fps <= 0:
        raise ValueError(f"fps must be positive, got {fps}")
    source_tokens, target_tokens, matrix = unpack_attention(trace.source_tokens, trace.tokens, trace.attention)
    xs, ys = token_labels(source_tokens, space_marker), token_labels(target_tokens, space_marker)
    n_src, n_tgt = len(xs), len(ys)
    cell = cell_inches(max(n_src, n_tgt))
    longest_x = max(len(x) for x in xs) if label_rotation(xs) else 1
    fig = new_figure(
        max(n_src * cell + 0.09 * max(len(y) for y in ys) + 1.6, 4.0), max(n_tgt * cell + 0.08 * longest_x + 1.1, 3.0)
    )
    ax = fig.add_subplot()
    shown = np.full(matrix.shape, np.nan)
    colours = colormaps[cmap].with_extremes(bad="white")
    image = ax.imshow(shown, cmap=colours, vmin=0.0, vmax=1.0, aspect="equal", interpolation="nearest")
    ax.xaxis.tick_top()
    set_xlabels(ax, xs, top=True)
    set_ylabels(ax, ys)
    draw_cell_grid(ax, n_tgt, n_src)
    ax.set_xlim(-0.5, n_src - 0.5)
    ax.set_ylim(n_tgt - 0.5, -0.5)
    frame = Rectangle((-0.5, -0.5), n_src, 1, fill=False, edgecolor=HIGHLIGHT, linewidth=2, zorder=5)
    ax.add_patch(frame)
    fig.colorbar(image, ax=ax, shrink=0.8, aspect=25, pad=0.02).ax.tick_params(labelsize=7)
    title = fig.suptitle("", fontsize=11, parse_math=False)

    def draw(t: int):
        shown[: t + 1] = matrix[: t + 1]
        image.set_data(shown)
        frame.set_y(t - 0.5)
        for i, label in enumerate(ax.get_yticklabels()):
            label.set_color(HIGHLIGHT if i == t else "black")
        title.set_text(f"step {t}: output \u201c{ys[t]}\u201d")
        return [image, frame, title]

    animation = FuncAnimation(fig, draw, frames=n_tgt, blit=False, repeat=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        animation.save(str(path), writer=PillowWriter(fps=fps), dpi=dpi)
    except OSError as e:
        raise AttnmtError(f"cannot write {path}: {e.strerror or e}") from None
    return path
