"""Attention drawn with shade characters, for a terminal: what the quick starts print."""

from __future__ import annotations

SHADES = " ░▒▓█"


def _label(piece: str) -> str:
    return "␣" if piece in ("▁", " ") else ("$" if piece == "</s>" else piece.replace("▁", "")[:1] or "?")


def attention_as_text(translation, header: str | None = None) -> str:
    """The attention matrix drawn with shade characters: one row per output token, one column per
    source token (``header`` labels the columns; default: the source tokens' first characters)."""
    if translation.attention is None:
        return "(no attention: this model reads one fixed context vector)"
    columns = list(header) if header is not None else [_label(p) for p in translation.source_tokens]
    return shades([_label(p) for p in translation.tokens], columns, translation.attention)


def shades(rows: list[str], columns: list[str], matrix) -> str:
    """A matrix of weights in [0, 1] drawn with shade characters, one cell per (row, column), under
    the column labels (written downwards when longer than one character)."""
    width = max(5, *(len(r) for r in rows))
    header = [
        " " * (width + 1) + "".join(c[k] if k < len(c) else " " for c in columns)
        for k in range(max(len(c) for c in columns))
    ]
    lines = header + [f"{label:>{width}} " + "".join(shade(w) for w in weights) for label, weights in zip(rows, matrix)]
    return "\n".join(lines)


def shade(weight: float) -> str:
    return SHADES[min(int(weight * len(SHADES)), len(SHADES) - 1)]
