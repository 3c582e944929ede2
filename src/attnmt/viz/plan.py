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
    tag: str | None = None  # a translation model: one of its tags, put before ``sentence`` (Translator.source_ids)
    saliency: str | None = None  # a translation model: heatmap of the translation's saliency (gradient x input)

    def sentence_figures(self) -> bool:
        return bool(self.out or self.states or self.steps or self.gif or self.head_view or self.grid or self.saliency)

    def transformer_options(self) -> list[str]:
        options = (
            ("--head-view", self.head_view),
            ("--grid", self.grid),
            ("--kind", self.kind),
            ("--layer", self.layer),
            ("--head", self.head),
        )
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
        raise AttnmtError(
            'give a sentence to draw (attnmt plot MODEL_DIR "sentence" ...), or --curves FILE for the training curves'
        )
    images = [r.states, r.curves, r.head_view, r.grid, r.saliency] + [path for _, path in r.steps]
    for path, suffixes in [(r.out, (*IMAGE, ".html")), (r.gif, (".gif",))] + [(path, IMAGE) for path in images]:
        if path and Path(path).suffix.lower() not in suffixes:
            raise AttnmtError(f"{path}: the file name must end in {' or '.join(suffixes)}")


def _sentence_writers(r: FigureRequest) -> list[Writer]:
    from attnmt.core.folders import load_folder  # torch and the model code: only when a sentence is drawn
    from attnmt.core.task import task_of

    if not r.sentence.strip():
        raise AttnmtError("the sentence is empty")
    model = load_folder(r.model_dir, r.checkpoint, device=r.device)
    if r.hypothesis is not None and model.inputs != "pairs":
        raise AttnmtError(f"--hypothesis: for sentence-pair models; {r.model_dir} is a {model.config.task} model")
    for option, given in (("--tag", r.tag), ("--saliency", r.saliency)):
        if given and model.inputs != "text":
            raise AttnmtError(f"{option}: for translation models; {r.model_dir} is a {model.config.task} model")
    return task_of(model.config.task).figure_writers(r, model)
