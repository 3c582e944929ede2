"""`attnmt plot` of a translation model (attnmt.viz.plan asks the task for these writers)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from attnmt.core.errors import AttnmtError
from attnmt.viz import figures
from attnmt.viz.notebook import show
from attnmt.viz.plan import FigureRequest, Writer


def translation_writers(r: FigureRequest, model) -> list[Writer]:
    """A translation model's figures of one sentence (after its tag, if any): heatmap (or HTML),
    Transformer layer and head views, encoder states, decoder steps, animation."""
    transformer_options = r.transformer_options()
    if transformer_options and model.config.model.type != "transformer":
        raise AttnmtError(
            f"{', '.join(transformer_options)}: for the layers and heads of Transformer models; "
            f"{r.model_dir} is an RNN model (its attention heatmap: --out)"
        )
    out = r.out or (None if r.sentence_figures() else "attention.png")
    writers = []
    translation = None
    if out or r.head_view or r.grid or r.saliency:
        [translation] = model.translate([r.sentence], beam=r.beam, tag=r.tag)
    if out:
        title = f"{r.sentence}  \u2192  {translation.text}"
        if Path(out).suffix.lower() == ".html":
            writers.append(partial(show(translation, merge_words=r.merge_words, title=title).save, out))
        else:
            fig = figures.attention_heatmap(translation, title=title, merge_words=r.merge_words)
            writers.append(partial(figures.save, fig, out))
    if r.head_view or r.grid:
        writers += _layer_head_writers(r, model.attention(r.sentence, translation, tag=r.tag or ""))
    if r.saliency:
        writers.append(_saliency_writer(r, model, translation.text))
    if r.states or r.steps or r.gif:
        trace = model.trace(r.sentence, top_k=r.top_k, tag=r.tag or "")
        if r.states:
            fig = figures.encoder_states_figure(trace, max_dims=r.dims or None)
            writers.append(partial(figures.save, fig, r.states))
        for number, path in r.steps:
            writers.append(partial(figures.save, figures.decoder_step_figure(trace, number), path))
        if r.gif:
            if trace.attention is None:
                raise AttnmtError("no attention to animate: the model has attention 'none'")
            writers.append(partial(figures.decoding_animation, trace, r.gif, fps=r.fps))
    return writers


def _saliency_writer(r: FigureRequest, model, translation: str) -> Writer:
    """The heatmap of the translation's saliency (attnmt.translation.saliency), as --out draws its attention."""
    from attnmt.translation.align import piece_lists
    from attnmt.translation.saliency import saliency_matrices

    if r.tag:
        raise AttnmtError("--saliency reads the gradients of the source's own pieces: it takes no --tag")
    [matrix] = saliency_matrices(model, [r.sentence], [translation])
    [source_tokens], [tokens] = piece_lists(model, [r.sentence], [translation])
    fig = figures.attention_heatmap(
        source_tokens,
        tokens,
        matrix,
        merge_words=r.merge_words,
        quantity="saliency",
        title=f"saliency (gradient \u00d7 input): {r.sentence}  \u2192  {translation}",
    )
    return partial(figures.save, fig, r.saliency)


def _layer_head_writers(r: FigureRequest, maps) -> list[Writer]:
    """The Transformer figures: head view and grid."""
    kind = r.kind or "cross"
    writers = []
    if r.head_view:
        layer = len(maps[kind]) - 1 if r.layer is None else r.layer
        figures.check_layer_head(maps, kind, layer, r.head, names=("--layer", "--head"))
        fig = figures.head_view_figure(maps, kind, layer, r.head)
        writers.append(partial(figures.save, fig, r.head_view))
    if r.grid:
        writers.append(partial(figures.save, figures.attention_grid(maps, kind), r.grid))
    return writers
