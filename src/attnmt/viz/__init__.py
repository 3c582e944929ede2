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

# Each name is read from its module when first asked for (PEP 562): importing attnmt.viz, or one of
# its modules such as attnmt.viz.words (which every translation uses to merge pieces), loads neither
# matplotlib (0.15 s of every `attnmt translate` start-up) nor any task (docs/architecture.md: the
# modules of viz are shared, below the tasks).
MODULE_OF = {
    **dict.fromkeys(
        [
            "attention_grid",
            "attention_heatmap",
            "decoder_step_figure",
            "decoding_animation",
            "encoder_states_figure",
            "head_view_figure",
            "read_metrics",
            "save",
            "select_dimensions",
            "training_curves",
        ],
        "attnmt.viz.figures",
    ),
    **dict.fromkeys(["HTMLView", "heatmap_html", "show", "show_step", "step_html"], "attnmt.viz.notebook"),
    **dict.fromkeys(["merge_pieces", "word_spans"], "attnmt.viz.words"),
    **dict.fromkeys(["pair_figure", "show_pair"], "attnmt.pairs.figures"),
}
__all__ = list(MODULE_OF)


def __getattr__(name: str):
    if name in MODULE_OF:
        import importlib

        return getattr(importlib.import_module(MODULE_OF[name]), name)
    raise AttributeError(f"module 'attnmt.viz' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
