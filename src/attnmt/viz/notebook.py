"""Self-contained HTML views of attention, for Jupyter and for web pages.

``heatmap_html`` and ``step_html`` return HTML strings (inline styles only, no script, no external
CSS; every token passes through ``html.escape``). ``show(translation)`` and ``show_step(trace, k)``
wrap them in objects with ``_repr_html_``, which Jupyter renders inline when they end a cell::

    import attnmt, attnmt.viz
    model = attnmt.load("runs/quickstart/model")
    [t] = model.translate(["le 14 juillet 1989"])
    attnmt.viz.show(t)                       # the heatmap; hover a cell for its weight
    attnmt.viz.show_step(model.trace("le 14 juillet 1989"), 3)
"""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np

from attnmt.viz.words import WORD_START, merge_pieces

__all__ = ["heatmap_html", "step_html", "show", "show_step", "HTMLView"]

FONT = "font-family:system-ui,-apple-system,'Segoe UI',sans-serif;font-size:12px;color:#222"
DARK = (8, 48, 107)  # weight 1
NEGATIVE = (178, 24, 43)
POSITIVE = (33, 102, 172)


def _esc(text) -> str:
    return html.escape(str(text), quote=True)


def _label(token: str, space_marker: str | None) -> str:
    if space_marker is None:
        return token
    return token.replace(WORD_START, space_marker) or space_marker or WORD_START


def _blend(colour: tuple[int, int, int], amount: float) -> str:
    """White blended towards colour by amount in [0, 1]."""
    a = min(1.0, max(0.0, float(amount))) if np.isfinite(amount) else 0.0
    r, g, b = (round(255 + (c - 255) * a) for c in colour)
    return f"rgb({r},{g},{b})"


def _diverging(value: float, limit: float) -> str:
    return _blend(POSITIVE if value >= 0 else NEGATIVE, abs(value) / limit if limit else 0.0)


def unpack_attention(source_tokens, target_tokens, attention):
    from attnmt.viz.drawing import unpack_attention as unpack

    return unpack(source_tokens, target_tokens, attention)


def heatmap_html(
    source_tokens,
    target_tokens=None,
    attention=None,
    *,
    title: str | None = None,
    merge_words: bool = False,
    space_marker: str | None = None,
    cell_px: int = 20,
    names: tuple[str, str] = ("source", "target"),
) -> str:
    """The attention heatmap as an HTML table: source tokens across the top, target tokens down,
    one ``<td>`` per (target, source) pair, shaded by its weight (white 0 to dark blue 1), the exact
    weight in the cell's tooltip. Takes tokens and matrix, or a Translation or DecodingTrace alone.
    ``names``: of the columns and the rows, in the legend.
    """
    source_tokens, target_tokens, matrix = unpack_attention(source_tokens, target_tokens, attention)
    if merge_words:
        source_tokens, target_tokens, matrix = merge_pieces(source_tokens, target_tokens, matrix)
    xs = [_label(t, space_marker) for t in source_tokens]
    ys = [_label(t, space_marker) for t in target_tokens]
    head_style = (
        "writing-mode:vertical-rl;transform:rotate(180deg);text-align:left;font-weight:normal;"
        "padding:2px 0;white-space:nowrap"
    )
    parts = [f'<div style="{FONT};overflow-x:auto;padding:4px">']
    if title:
        parts.append(f'<div style="font-weight:600;margin-bottom:6px">{_esc(title)}</div>')
    parts.append('<table style="border-collapse:collapse;border:none">')
    parts.append('<tr><th style="border:none"></th>')
    parts.extend(f'<th style="{head_style};border:none;vertical-align:bottom">{_esc(x)}</th>' for x in xs)
    parts.append("</tr>")
    cell = f"width:{cell_px}px;min-width:{cell_px}px;height:{cell_px}px;padding:0;border:1px solid #fff"
    for i, y in enumerate(ys):
        parts.append(
            f'<tr><th style="text-align:right;font-weight:normal;padding:0 6px;border:none;'
            f'white-space:nowrap">{_esc(y)}</th>'
        )
        for j, x in enumerate(xs):
            w = float(matrix[i, j])
            parts.append(
                f'<td style="{cell};background:{_blend(DARK, w)}" title="{_esc(y)} \u2192 {_esc(x)}: {w:.3f}"></td>'
            )
        parts.append("</tr>")
    parts.append("</table>")
    unit = "words" if merge_words else "tokens"
    parts.append(
        f'<div style="margin-top:4px;color:#666">rows: {names[1]} {unit}; columns: {names[0]} {unit}; '
        "white = 0, dark = 1</div></div>"
    )
    return "".join(parts)


def step_html(trace, step: int, *, space_marker: str | None = None) -> str:
    """One decoder step (numbered from 0) as HTML: per source token its score e_j and weight a_j
    (as a bar), for a model whose attention reads it the coverage C_j before the step (grey) with
    the step's weight on top (blue), the context vector c_t and the decoder state s_t as rows of
    cells on one scale (blue > 0, red < 0, as in the explorer), and the top-k next tokens with
    probabilities."""
    from attnmt.viz.drawing import check_step

    st = check_step(trace, step)
    sources = [_label(t, space_marker) for t in trace.source_tokens]
    token = _label(st.token, space_marker)
    parts = [
        f'<div style="{FONT};padding:4px">',
        f'<div style="font-weight:600;margin-bottom:6px">step {int(step)}: output '
        f"\u201c{_esc(token)}\u201d (p = {st.probability:.3f})</div>",
    ]
    if st.weights is None:
        parts.append('<div style="color:#666">no attention: the context is the final encoder state at every step</div>')
    else:
        use = getattr(trace, "coverage", None)
        parts.extend(_attention_table(st, sources, None if use is None else trace.coverage_before(step)))
    parts.extend(_vector_cells(st))
    if st.top_k:
        parts.extend(_top_k_table(st, space_marker))
    parts.append("</div>")
    return "".join(parts)


def _attention_table(st, sources: list[str], coverage: np.ndarray | None = None) -> list[str]:
    """A table of a step's weights a_j as bars (the largest red), its scores e_j, the coverage
    before the step (if given) and the source tokens."""
    weights = np.asarray(st.weights, dtype=np.float64)
    scores = None if st.scores is None else np.asarray(st.scores, dtype=np.float64)
    best = int(weights.argmax())
    top = float(weights.max()) or 1.0
    label_cell = "text-align:right;padding:2px 6px;font-weight:normal;border:none;color:#555"
    parts = ['<table style="border-collapse:collapse;border:none;margin-bottom:8px">']
    parts.append(f'<tr><th style="{label_cell}">weight a_j</th>')
    for j, w in enumerate(weights):
        colour = "#d62728" if j == best else "#4c72b0"
        height = round(60 * w / top)
        parts.append(
            f'<td style="vertical-align:bottom;text-align:center;padding:0 2px;border:none;'
            f'height:64px" title="{_esc(sources[j])}: a = {w:.3f}">'
            f'<div style="font-size:9px;color:#555">{w:.2f}</div>'
            f'<div style="background:{colour};height:{height}px;width:14px;margin:0 auto"></div></td>'
        )
    parts.append("</tr>")
    if scores is not None:
        parts.append(f'<tr><th style="{label_cell}">score e_j</th>')
        parts.extend(
            f'<td style="text-align:center;padding:0 2px;border:none;font-size:10px">{e:.2f}</td>' for e in scores
        )
        parts.append("</tr>")
    if coverage is not None:
        parts.extend(_coverage_cells(coverage, weights, sources, label_cell))
    parts.append(f'<tr><th style="{label_cell}">source</th>')
    parts.extend(
        f'<td style="text-align:center;padding:2px;border:none;white-space:nowrap;'
        f'{"font-weight:600;color:#d62728" if j == best else ""}">{_esc(x)}</td>'
        for j, x in enumerate(sources)
    )
    parts.append("</tr></table>")
    return parts


def _coverage_cells(before: np.ndarray, weights: np.ndarray, sources: list[str], label_cell: str) -> list[str]:
    """A row of bars: the coverage C_j before the step (grey) with the step's weight a_j on top (blue)."""
    top = float((before + weights).max(initial=0.0)) or 1.0
    parts = [f'<tr><th style="{label_cell}">coverage C_j<br>(+ a_j)</th>']
    for j, (c, w) in enumerate(zip(before, weights)):
        parts.append(
            f'<td style="vertical-align:bottom;padding:0 2px;border:none;height:64px" '
            f'title="{_esc(sources[j])}: C = {c:.3f} before, + a = {w:.3f}">'
            f'<div style="background:#4c72b0;height:{round(60 * w / top)}px;width:14px;margin:0 auto"></div>'
            f'<div style="background:#9aa5b8;height:{round(60 * c / top)}px;width:14px;margin:0 auto"></div>'
            "</td>"
        )
    parts.append("</tr>")
    return parts


def _vector_cells(st) -> list[str]:
    """The context vector c_t and the decoder state s_t as rows of cells on one symmetric scale."""
    context, state = (np.asarray(v, dtype=np.float64) for v in (st.context, st.state))
    limit = float(max(np.abs(context).max(initial=0.0), np.abs(state).max(initial=0.0))) or 1.0
    parts = []
    for vector, name, title in ((context, "context vector c_t", "dim {i}"), (state, "decoder state s_t", "s_t[{i}]")):
        parts.append(f'<div style="margin:4px 0 2px">{name} ({vector.size} dimensions; blue &gt; 0, red &lt; 0)</div>')
        parts.append('<div style="display:flex;flex-wrap:wrap;max-width:100%">')
        parts.extend(
            f'<span style="display:inline-block;width:6px;height:18px;background:{_diverging(v, limit)}" '
            f'title="{title.format(i=i)}: {v:.3f}"></span>'
            for i, v in enumerate(vector)
        )
        parts.append("</div>")
    return parts


def _top_k_table(st, space_marker: str | None) -> list[str]:
    """The top-k next tokens with their probabilities as bars, the chosen one in red."""
    parts = [
        f'<div style="margin:8px 0 2px">top {len(st.top_k)} next tokens</div>',
        '<table style="border-collapse:collapse;border:none">',
    ]
    for name, p in st.top_k:
        chosen = name == st.token
        colour = "#d62728" if chosen else "#9aa5b8"
        parts.append(
            f'<tr><th style="text-align:right;padding:1px 6px;border:none;'
            f'font-weight:{600 if chosen else "normal"}">{_esc(_label(name, space_marker))}</th>'
            f'<td style="padding:1px;border:none;width:200px"><div style="background:{colour};'
            f'height:12px;width:{max(1, round(200 * p))}px"></div></td>'
            f'<td style="padding:1px 6px;border:none">{p:.3f}</td></tr>'
        )
    parts.append("</table>")
    return parts


class HTMLView:
    """An HTML string that Jupyter renders inline (``_repr_html_``); ``save(path)`` writes a page."""

    def __init__(self, html_text: str, title: str = "attnmt"):
        self.html = html_text
        self.title = title

    def _repr_html_(self) -> str:
        return self.html

    def __str__(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return f"<HTMLView {self.title!r}: {len(self.html)} characters of HTML>"

    def save(self, path) -> Path:
        path = Path(path)
        path.write_text(
            f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{_esc(self.title)}</title>'
            f"</head><body>{self.html}</body></html>\n",
            encoding="utf-8",
        )
        return path


def show(
    translation, *, merge_words: bool = False, title: str | None = None, space_marker: str | None = None
) -> HTMLView:
    """The attention heatmap of a Translation (or DecodingTrace), rendered inline in Jupyter."""
    if title is None:
        title = getattr(translation, "source", None)
    return HTMLView(
        heatmap_html(translation, title=title, merge_words=merge_words, space_marker=space_marker), "attention"
    )


def show_step(trace, step: int, *, space_marker: str | None = None) -> HTMLView:
    """Decoder step ``step`` (from 0) of a DecodingTrace, rendered inline in Jupyter."""
    return HTMLView(step_html(trace, step, space_marker=space_marker), f"step {step}")
