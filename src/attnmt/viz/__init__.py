"""Pictures of attention: matplotlib figures, HTML for notebooks, subword-to-word merging.

    import attnmt, attnmt.viz as viz
    model = attnmt.load("runs/quickstart/model")
    [t] = model.translate(["le 14 juillet 1989"])
    viz.save(viz.attention_heatmap(t), "heat.png")
    trace = model.trace("le 14 juillet 1989")
    viz.save(viz.decoder_step_figure(trace, 3), "step3.svg")
    viz.decoding_animation(trace, "decoding.gif")
    viz.show(t)                                   # inline in Jupyter
    maps = model.attention("le 14 juillet 1989")  # a Transformer: every layer and head
    viz.save(viz.attention_grid(maps, "encoder"), "grid.png")
    viz.save(viz.head_view_figure(maps, "cross", layer=1, head=2), "head.svg")
    [r] = attnmt.load("runs/quickstart-pairs/model").classify([("a dog runs", "a cat runs")])
    viz.save(viz.pair_figure(r), "pair.png")      # a sentence-pair model: attend, compare, aggregate

See docs/visualization.md.
"""

from attnmt.viz.figures import (
    attention_grid,
    attention_heatmap,
    decoder_step_figure,
    decoding_animation,
    encoder_states_figure,
    head_view_figure,
    read_metrics,
    save,
    select_dimensions,
    training_curves,
)
from attnmt.viz.notebook import HTMLView, heatmap_html, show, show_step, step_html
from attnmt.viz.words import merge_pieces, word_spans

__all__ = [
    "attention_heatmap", "encoder_states_figure", "decoder_step_figure", "decoding_animation",
    "training_curves", "read_metrics", "select_dimensions", "save", "attention_grid", "head_view_figure",
    "heatmap_html", "step_html", "show", "show_step", "HTMLView",
    "merge_pieces", "word_spans", "pair_figure", "show_pair",
]

# A task's own figures, read when first asked for (PEP 562): importing attnmt.viz or one of its
# modules loads no task (docs/architecture.md: the modules of viz are shared, below the tasks).
TASK_FIGURES = {"pair_figure": "attnmt.pairs.figures", "show_pair": "attnmt.pairs.figures"}


def __getattr__(name: str):
    if name in TASK_FIGURES:
        import importlib

        return getattr(importlib.import_module(TASK_FIGURES[name]), name)
    raise AttributeError(f"module 'attnmt.viz' has no attribute {name!r}")
