"""The shared pieces of the matplotlib figures (attnmt.viz.figures, attnmt.viz.steps and the
tasks' figures): colours, figures drawn without pyplot, token labels, font and cell sizes, tick
labels, and the checks of the arguments they share.
"""

from __future__ import annotations

import io
import math

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from attnmt.core.errors import AttnmtError
from attnmt.viz.words import SPECIAL_TOKENS, WORD_START

HIGHLIGHT = "#d62728"
BAR = "#4c72b0"
MUTED = "#9aa5b8"
# Signed values, as in the explorer (static/dom.js) and the HTML views: red < 0 < blue
DIVERGING = "RdBu"
POSITIVE = "#2166ac"
NEGATIVE = "#b2182b"


class NotebookFigure(Figure):
    """A matplotlib Figure that Jupyter displays as a PNG: the figures here are made without
    pyplot, so IPython's inline backend, which registers itself through pyplot, may not know them
    (they would show as "<Figure size ...>")."""

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
        return buffer.getvalue()


def new_figure(width: float, height: float) -> Figure:
    """An empty figure of that size in inches, drawn without pyplot (no global state, no window)."""
    fig = NotebookFigure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def token_labels(tokens, space_marker: str | None) -> list[str]:
    tokens = [str(t) for t in tokens]
    if space_marker is None:
        return tokens
    return [t.replace(WORD_START, space_marker) or space_marker or WORD_START for t in tokens]


def tick_font_size(n: int) -> float:
    """Tick-label font size for n labels along one axis."""
    for limit, size in ((20, 10), (35, 9), (50, 8), (80, 7)):
        if n <= limit:
            return size
    return 6


def cell_inches(n: int) -> float:
    """Inches per heatmap cell: 0.3 up to 60 tokens, then smaller (down to 0.12) to stay printable."""
    return 0.3 if n <= 60 else max(0.12, 18.0 / n)


def label_rotation(labels: list[str]) -> int:
    if all(len(label) <= 2 or label in SPECIAL_TOKENS for label in labels) and len(labels) <= 40:
        return 0
    return 60 if len(labels) <= 25 else 90


def set_xlabels(ax, labels: list[str], top: bool):
    size, rotation = tick_font_size(len(labels)), label_rotation(labels)
    if rotation == 0:
        ax.set_xticks(range(len(labels)), labels=labels, fontsize=size, parse_math=False)
    elif top:
        ax.set_xticks(
            range(len(labels)),
            labels=labels,
            fontsize=size,
            rotation=rotation,
            ha="left",
            va="center",
            rotation_mode="anchor",
            parse_math=False,
        )
    else:
        ax.set_xticks(
            range(len(labels)),
            labels=labels,
            fontsize=size,
            rotation=rotation,
            ha="right",
            va="center",
            rotation_mode="anchor",
            parse_math=False,
        )


def set_ylabels(ax, labels: list[str]):
    ax.set_yticks(range(len(labels)), labels=labels, fontsize=tick_font_size(len(labels)), parse_math=False)


def draw_cell_grid(ax, rows: int, columns: int):
    """Thin white lines between cells, so that neighbouring cells of equal colour stay countable."""
    ax.set_xticks(np.arange(-0.5, columns, 1), minor=True)
    ax.set_yticks(np.arange(-0.5, rows, 1), minor=True)
    ax.grid(which="minor", color="white", linewidth=0.6)
    ax.tick_params(which="minor", length=0)


def unpack_attention(source_tokens, target_tokens, attention):
    """Accepts (source_tokens, target_tokens, attention) or a Translation / DecodingTrace alone."""
    if target_tokens is None and attention is None and hasattr(source_tokens, "source_tokens"):
        obj = source_tokens
        source_tokens, target_tokens, attention = obj.source_tokens, obj.tokens, obj.attention
    if target_tokens is None:
        raise TypeError("give source_tokens, target_tokens and attention, or a Translation or DecodingTrace")
    if attention is None:
        raise AttnmtError(
            "no attention to draw: the model has attention 'none' (the context is the final "
            "encoder state at every step)"
        )
    matrix = np.asarray(attention, dtype=np.float64)
    source_tokens, target_tokens = list(source_tokens), list(target_tokens)
    if matrix.ndim != 2 or matrix.shape != (len(target_tokens), len(source_tokens)):
        raise ValueError(
            f"attention has shape {matrix.shape}, expected (len(target_tokens), "
            f"len(source_tokens)) = ({len(target_tokens)}, {len(source_tokens)})"
        )
    if matrix.size == 0:
        raise AttnmtError("nothing to draw: the translation or its source is empty")
    return source_tokens, target_tokens, matrix


def check_step(trace, step: int):
    n = len(trace.steps)
    if not isinstance(step, (int, np.integer)) or not 0 <= step < n:
        raise AttnmtError(f"step {step} does not exist: the translation has {n} steps, numbered 0 to {n - 1}")
    return trace.steps[step]


def select_dimensions(states: np.ndarray, max_dims: int | None) -> np.ndarray:
    """Indices of the dimensions drawn for ``states`` (rows x dims): all of them when ``max_dims`` is
    None or not smaller than the width, otherwise the ``max_dims`` dimensions whose values vary most
    across the rows (the most informative ones), in their original order."""
    states = np.asarray(states)
    width = states.shape[1]
    if max_dims is None or max_dims >= width:
        return np.arange(width)
    if max_dims < 1:
        raise ValueError(f"max_dims must be at least 1, got {max_dims}")
    variance = states.var(axis=0) if states.shape[0] > 1 else np.abs(states[0])
    return np.sort(np.argsort(-variance, kind="stable")[:max_dims])


def dimension_ticks(ax, dims: np.ndarray):
    step = max(1, math.ceil(len(dims) / 40))
    positions = np.arange(0, len(dims), step)
    ax.set_xticks(
        positions,
        labels=[str(int(dims[i])) for i in positions],
        fontsize=tick_font_size(len(positions)),
        rotation=90 if len(positions) > 20 else 0,
    )
