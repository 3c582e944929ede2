"""`attnmt plot` of a sentence-pair model (attnmt.viz.plan asks the task for these writers)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from attnmt.core.errors import AttnmtError
from attnmt.viz import figures
from attnmt.viz.plan import FigureRequest, Writer


def pair_writers(r: FigureRequest, model) -> list[Writer]:
    """A sentence-pair model: attend, compare and aggregate in one figure (or the attention as HTML)."""
    from attnmt.pairs.figures import pair_figure, show_pair

    other = [
        option
        for option, value in (
            ("--states", r.states),
            ("--step", r.steps),
            ("--gif", r.gif),
            ("--merge-words", r.merge_words),
            ("--beam", r.beam),
        )
        if value
    ]
    if other or r.transformer_options():
        raise AttnmtError(
            f"{', '.join(other + r.transformer_options())}: for translation models; a sentence-pair "
            "model draws one figure (--out) of the pair (SENTENCE and --hypothesis)"
        )
    if not (r.hypothesis or "").strip():
        raise AttnmtError(f"{r.model_dir} is a sentence-pair model: give the premise as SENTENCE and --hypothesis TEXT")
    [result] = model.classify([(r.sentence, r.hypothesis)])
    out = r.out or "attention.png"
    if Path(out).suffix.lower() == ".html":
        return [partial(show_pair(result, r.direction).save, out)]
    return [partial(figures.save, pair_figure(result, r.direction, max_dims=r.dims or None), out)]
