"""Which figures to draw: from a description of what is wanted to the functions that write them.

``attnmt plot`` fills a FigureRequest from its options and runs the writers of plan_figures.
Every figure is built, and every part of the request checked, before the first file is written,
so a mistake in one option leaves no half-written set of files. The messages name the options of
``attnmt plot``, after which the fields are named.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable

from attnmt.core.errors import AttnmtError
from attnmt.viz import figures
from attnmt.viz.notebook import show

Writer = Callable[[], Path]  # writes one file and returns its path

IMAGE = (".png", ".svg")


@dataclass
class FigureRequest:
    """The figures wanted: each file is optional (None: not drawn)."""

    model_dir: str | Path  # a trained model's folder; for curves alone also a metrics.jsonl file
    sentence: str | None = None  # the source sentence of the attention figures
    out: str | None = None  # attention heatmap (.png, .svg or .html)
    merge_words: bool = False  # heatmap of words instead of subword pieces
    beam: int | None = None  # beam of the heatmap's translation (None: the model's config)
    checkpoint: str = "best"
    device: str = "cpu"  # where the model runs
    states: str | None = None  # encoder states and context vectors
    dims: int = 32  # dimensions of ``states`` (0: all)
    steps: list[tuple[int, str]] = field(default_factory=list)  # (decoder step, file) in detail
    top_k: int = 5  # next-token candidates of ``steps``
    gif: str | None = None  # animation of the decoding
    fps: float = 1.0
    curves: str | None = None  # training curves from metrics.jsonl
    head_view: str | None = None  # Transformer: one layer and head (or the heads' average)
    grid: str | None = None  # Transformer: every layer x head of ``kind``
    kind: str | None = None  # Transformer: encoder, decoder or cross (default) attention
    layer: int | None = None  # of head_view (default: the last)
    head: int | None = None  # of head_view (default: the average of the heads)
    hypothesis: str | None = None  # a sentence-pair model: the hypothesis of ``sentence`` (the premise)
    direction: str = "premise"  # a sentence-pair model: the softmax drawn (over the hypothesis, or the premise)

    def sentence_figures(self) -> bool:
        return bool(self.out or self.states or self.steps or self.gif or self.head_view or self.grid)

    def transformer_options(self) -> list[str]:
        options = (("--head-view", self.head_view), ("--grid", self.grid), ("--kind", self.kind),
                   ("--layer", self.layer), ("--head", self.head))
        return [option for option, value in options if value is not None]


def plan_figures(request: FigureRequest) -> list[Writer]:
    """The writers of the requested figures, in the order curves, heatmap, Transformer views,
    encoder states, decoder steps, animation. Loads the model (if a sentence is given) and builds
    every figure; AttnmtError for a request that cannot be drawn."""
    check_request(request)
    writers = []
    if request.curves:
        writers.append(partial(figures.save, figures.training_curves(request.model_dir), request.curves))
    if request.sentence is not None:
        writers += _sentence_writers(request)
    return writers


def check_request(r: FigureRequest):
    """What can be checked before reading any file."""
    if not r.fps > 0 or r.dims < 0:
        raise AttnmtError("--fps must be positive and --dims at least 0")
    if (r.layer is not None or r.head is not None) and not r.head_view:
        raise AttnmtError("--layer and --head choose the attention --head-view FILE draws; give --head-view")
    if r.sentence is None and (r.sentence_figures() or not r.curves):
        raise AttnmtError("give a sentence to draw (attnmt plot MODEL_DIR \"sentence\" ...), "
                          "or --curves FILE for the training curves")
    for path, suffixes in [(r.out, (*IMAGE, ".html")), (r.states, IMAGE), (r.curves, IMAGE), (r.gif, (".gif",)),
                           (r.head_view, IMAGE), (r.grid, IMAGE)] + [(path, IMAGE) for _, path in r.steps]:
        if path and Path(path).suffix.lower() not in suffixes:
            raise AttnmtError(f"{path}: the file name must end in {' or '.join(suffixes)}")


def _sentence_writers(r: FigureRequest) -> list[Writer]:
    from attnmt.api import load  # torch and the model code: only when a sentence is drawn

    if not r.sentence.strip():
        raise AttnmtError("the sentence is empty")
    model = load(r.model_dir, r.checkpoint, device=r.device)
    if model.config.task == "pairs":
        return _pair_writers(r, model)
    if r.hypothesis is not None:
        raise AttnmtError(f"--hypothesis: for sentence-pair models; {r.model_dir} is a {model.config.task} model")
    if model.config.task == "speech":
        return _speech_writers(r, model)
    transformer_options = r.transformer_options()
    if transformer_options and model.config.model.type != "transformer":
        raise AttnmtError(f"{', '.join(transformer_options)}: for the layers and heads of Transformer models; "
                          f"{r.model_dir} is an RNN model (its attention heatmap: --out)")
    out = r.out or (None if r.sentence_figures() else "attention.png")
    writers = []
    translation = None
    if out or r.head_view or r.grid:
        [translation] = model.translate([r.sentence], beam=r.beam)
    if out:
        title = f"{r.sentence}  \u2192  {translation.text}"
        if Path(out).suffix.lower() == ".html":
            writers.append(partial(show(translation, merge_words=r.merge_words, title=title).save, out))
        else:
            fig = figures.attention_heatmap(translation, title=title, merge_words=r.merge_words)
            writers.append(partial(figures.save, fig, out))
    if r.head_view or r.grid:
        writers += _layer_head_writers(r, model.attention(r.sentence, translation))
    if r.states or r.steps or r.gif:
        trace = model.trace(r.sentence, top_k=r.top_k)
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


def _pair_writers(r: FigureRequest, model) -> list[Writer]:
    """A sentence-pair model: attend, compare and aggregate in one figure (or the attention as HTML)."""
    from attnmt.pairs.figures import pair_figure, show_pair

    other = [option for option, value in (("--states", r.states), ("--step", r.steps), ("--gif", r.gif),
                                          ("--merge-words", r.merge_words), ("--beam", r.beam)) if value]
    if other or r.transformer_options():
        raise AttnmtError(f"{', '.join(other + r.transformer_options())}: for translation models; a sentence-pair "
                          "model draws one figure (--out) of the pair (SENTENCE and --hypothesis)")
    if not (r.hypothesis or "").strip():
        raise AttnmtError(f"{r.model_dir} is a sentence-pair model: give the premise as SENTENCE and --hypothesis TEXT")
    [result] = model.classify([(r.sentence, r.hypothesis)])
    out = r.out or "attention.png"
    if Path(out).suffix.lower() == ".html":
        return [partial(show_pair(result, r.direction).save, out)]
    return [partial(figures.save, pair_figure(result, r.direction, max_dims=r.dims or None), out)]


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


def _speech_writers(r: FigureRequest, model) -> list[Writer]:
    """A speech model's figures: the "sentence" is a sound file; --out draws the attention above
    the spectrogram, --step the step view over the spectrogram, --states and --gif as for text."""
    from attnmt.speech import figures as speech

    unusable = [o for o, v in (("--head-view", r.head_view), ("--grid", r.grid), ("--merge-words", r.merge_words))
                if v]
    if unusable or (r.out and Path(r.out).suffix.lower() == ".html"):
        raise AttnmtError(f"{', '.join(unusable) or '--out FILE.html'}: not for speech models "
                          "(--out FILE.png/.svg, --step, --states, --gif)")
    out = r.out or (None if r.sentence_figures() else "attention.png")
    writers = []
    if out:
        [t] = model.transcribe([r.sentence], beam=r.beam)
        fig = speech.spectrogram_attention(t, title=f"{Path(r.sentence).name}  \u2192  {t.text}")
        writers.append(partial(figures.save, fig, out))
    if r.states or r.steps or r.gif:
        trace = model.trace(r.sentence, top_k=r.top_k)
        if r.states:
            writers.append(partial(figures.save, figures.encoder_states_figure(trace, max_dims=r.dims or None),
                                   r.states))
        for number, path in r.steps:
            writers.append(partial(figures.save, speech.speech_step_figure(trace, number), path))
        if r.gif:
            writers.append(partial(figures.decoding_animation, trace, r.gif, fps=r.fps))
    return writers
