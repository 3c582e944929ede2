"""The models a server holds, and the one way to run their work: in a worker thread (off the event
loop), one computation at a time per model (a lock: torch already uses every core for one), until
the deadline of the request that asked for it. /translate goes through the batcher, which runs its
batches this way too, in chunks."""

import re
import threading
import warnings
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Optional, Union

import anyio
import anyio.to_thread

from attnmt.core.errors import AttnmtError
from attnmt.seq2seq.decoding import DecodingStopped
from attnmt.serve.batching import Batcher
from attnmt.serve.limits import ServerLimits
from attnmt.serve.schemas import MODEL_NAME, ModelInfo

NAME = re.compile(MODEL_NAME)
ModelEntry = Union[str, Path, tuple[str, Union[str, Path]]]  # a folder (named after it), or (name, folder)


class ModelTimeout(Exception):
    """The work took longer than the time limit, waiting for the model included (503)."""

    def __init__(self, seconds: float):
        super().__init__(
            f"the request took longer than the limit of {seconds:g} s "
            "(model busy or input too long); try again or send less"
        )


def stop_at(deadline: float) -> Callable[[], bool]:
    """The ``stop`` of a search or trace that must not outlive its request: True once ``deadline``
    (time.monotonic()) has passed. It stops between two decoder steps with DecodingStopped, which
    ``LoadedModel.run_chunks`` answers as ModelTimeout, so the model is free one step after the limit."""
    return lambda: time.monotonic() > deadline


@dataclass
class LoadedModel:
    name: str
    translator: Any  # attnmt.api.Translator
    timeout: float  # seconds for one request from its arrival, waiting for the model included
    lock: threading.Lock = field(default_factory=threading.Lock)
    batcher: Optional[Batcher] = None

    async def run(self, fn, *args, deadline: float):
        """fn(*args) in a worker thread holding the model's lock; ModelTimeout past ``deadline``
        (time.monotonic(); waiting for the lock included)."""
        [result] = await self.run_chunks([partial(fn, *args)], deadline)
        return result

    async def run_chunks(
        self, chunks: list[Callable[[], Any]], deadline: float, wanted: Callable[[], bool] = lambda: True
    ) -> list:
        """The results of ``chunks`` (functions without arguments), run in turn in one worker thread
        holding the model's lock; ModelTimeout past ``deadline``. Before each chunk the thread stops
        if the deadline has passed or nobody ``wanted`` the results any more (a request that gets the
        lock after its deadline does no work): torch cannot interrupt a computation, so work past
        the limit finishes in its thread, its result discarded, but only the chunk under way, and
        the model is free again soon after. A chunk that stops itself (a search or trace given
        ``stop_at(deadline)``: DecodingStopped) is a ModelTimeout too."""

        def work():
            if not self.lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
                raise ModelTimeout(self.timeout)
            try:
                results = []
                for chunk in chunks:
                    if time.monotonic() > deadline or not wanted():
                        raise ModelTimeout(self.timeout)
                    results.append(chunk())
                return results
            except DecodingStopped:
                raise ModelTimeout(self.timeout) from None
            finally:
                self.lock.release()

        return await self.in_time(anyio.to_thread.run_sync(work, abandon_on_cancel=True), deadline)

    async def in_time(self, awaitable, deadline: float):
        """The result of ``awaitable``; ModelTimeout (and the awaitable cancelled) at ``deadline``."""
        try:
            with anyio.fail_after(max(0.0, deadline - time.monotonic())):
                return await awaitable
        except TimeoutError:
            raise ModelTimeout(self.timeout) from None

    @property
    def task(self) -> str:
        return self.translator.config.task

    @property
    def inputs(self) -> str:
        """What its requests carry: "text", "audio" (a speech model) or "pairs" (a classifier)."""
        return self.translator.inputs

    def info(self) -> ModelInfo:
        # (text in, text out: the models whose words "align": true links; an aligner set by hand in
        # Python may not say what it is: an aligner)
        links = None
        if self.inputs == "text":
            aligner = self.translator.aligner
            links = getattr(aligner, "word_links", "aligner") if aligner else "attention"
        members = getattr(self.translator, "ensembled", None)
        tags = self.translator.tags if self.inputs == "text" else None
        return ModelInfo(
            name=self.name,
            task=self.task,
            word_links=links,
            tags=tags,
            **self.translator.describe(),
            ensemble=[Path(folder).name for folder in members] if members else None,
        )


def model_entry(argument: str) -> ModelEntry:
    """A model of ``attnmt serve``'s command line: 'NAME=DIR' -> (NAME, DIR), a plain 'DIR' -> DIR
    (named after its folder). The text before the first '=' is a name only if it has no '/': a
    folder whose path has an '=' is written with a '/' before it ('./a=b')."""
    name, equals, folder = argument.partition("=")
    return (name, folder) if equals and "/" not in name else argument


def valid_name(name: str, what: str) -> str:
    """``name`` if it is a model name (1 to 100 letters, digits, '.', '-', '_', not only dots),
    else AttnmtError naming ``what`` it came from."""
    if not name:
        raise AttnmtError(f"{what}: the model name is empty")
    if not NAME.fullmatch(name) or not name.strip("."):
        raise AttnmtError(
            f"{what}: model name {name!r} is not valid: use 1 to 100 letters, digits, '.', '-' or '_', not only dots"
        )
    return name


def load_models(
    entries: list[ModelEntry],
    limits: ServerLimits,
    device: str = "cpu",
    checkpoint: str = "best",
    ensembles: Optional[dict[str, list]] = None,
) -> dict[str, LoadedModel]:
    """The models of ``entries`` by name, in order: the first is the default. An entry is a trained
    model folder, named after it, or a pair (name, folder). Each is loaded on ``device``, its
    ``checkpoint`` weights (best, last or averaged). ``ensembles``: name -> the folders of the
    models that the translation model of that name decodes with (Translator.ensemble). Raises
    AttnmtError for a bad folder, a bad name or a name used twice, or an ensemble of a model not
    served or not a translation model."""
    from attnmt.api import load

    if not entries:
        raise AttnmtError("no model folder given")
    models: dict[str, LoadedModel] = {}
    for entry in entries:
        if isinstance(entry, tuple):
            name, folder = valid_name(entry[0], f"{entry[0]}={entry[1]}"), entry[1]
            if not str(folder):
                raise AttnmtError(f"{name}=: no model folder after '='")
            folder = Path(folder)
        else:
            folder = Path(entry)
            name = valid_name(
                folder.resolve().name, f"{folder} (a model is named after its folder; give another name as NAME=DIR)"
            )
        if name in models:
            raise AttnmtError(
                f"two models are named '{name}' ({models[name].translator.folder} and {folder}); "
                f"name them apart with NAME=DIR, e.g. {name}-2={folder}"
            )
        model = models[name] = LoadedModel(name, load(folder, checkpoint, device=device), limits.timeout)
        if model.inputs != "pairs":  # /translate requests (text or audio) are batched
            model.batcher = Batcher(model, limits)
    for name, folders in (ensembles or {}).items():
        ensemble(models, name, folders, checkpoint, device)
    return models


def ensemble(models: dict[str, LoadedModel], name: str, folders: list, checkpoint: str, device: str):
    """The model ``name`` decodes with the models of ``folders`` too (attnmt serve --ensemble)."""
    from attnmt.api import load

    if name not in models:
        raise AttnmtError(f"--ensemble {name}=...: no model named '{name}' is served (models: {', '.join(models)})")
    translator = models[name].translator
    if translator.inputs != "text":
        raise AttnmtError(f"--ensemble {name}=...: '{name}' is {translator.what}; an ensemble is of translation models")
    with warnings.catch_warnings():  # (the aligner it drops is said by /models: word_links "attention")
        warnings.simplefilter("ignore")
        translator.ensemble([load(Path(folder), checkpoint, device=device) for folder in folders])
