"""The models a server holds, and the one way to run their work: in a worker thread (off the event
loop), one computation at a time per model (a lock: torch already uses every core for one), within
the request time limit. /translate goes through the batcher, which runs its batches this way too."""

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import anyio
import anyio.to_thread

from attnmt.errors import AttnmtError
from attnmt.serve.batching import Batcher
from attnmt.serve.limits import ServerLimits
from attnmt.serve.schemas import ModelInfo


class ModelTimeout(Exception):
    """The work took longer than the time limit, waiting for the model included (503)."""

    def __init__(self, seconds: float):
        super().__init__(f"the request took longer than the limit of {seconds:g} s "
                         "(model busy or input too long); try again or send less")


@dataclass
class LoadedModel:
    name: str
    translator: Any  # attnmt.api.Translator
    timeout: float  # seconds for one request, waiting for the model included
    lock: threading.Lock = field(default_factory=threading.Lock)
    batcher: Optional[Batcher] = None

    async def run(self, fn, *args):
        """fn(*args) in a worker thread holding the model's lock; ModelTimeout past the time limit
        (waiting for the lock included). A computation past the limit finishes in its thread, its
        result discarded; the lock keeps the model to one computation at a time meanwhile."""
        deadline = time.monotonic() + self.timeout

        def work():
            if not self.lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
                raise ModelTimeout(self.timeout)
            try:
                if time.monotonic() > deadline:
                    raise ModelTimeout(self.timeout)
                return fn(*args)
            finally:
                self.lock.release()

        return await self.in_time(anyio.to_thread.run_sync(work, abandon_on_cancel=True))

    async def in_time(self, awaitable):
        """The result of ``awaitable``; ModelTimeout (and the awaitable cancelled) past the time limit."""
        try:
            with anyio.fail_after(self.timeout):
                return await awaitable
        except TimeoutError:
            raise ModelTimeout(self.timeout) from None

    def info(self) -> ModelInfo:
        m = self.translator.config.model
        common = dict(name=self.name, task=self.translator.config.task, type=m.type, encoder_layers=m.encoder_layers,
                      decoder_layers=m.decoder_layers,
                      beam=self.translator.config.decoding.beam, path=str(self.translator.folder.resolve()))
        none = dict.fromkeys(("rnn_type", "input_feeding", "decoder_hidden", "d_model", "heads", "feed_forward",
                              "norm"))
        if m.type == "transformer":
            return ModelInfo(**common, **{**none, "attention": "multi-head", "d_model": m.d_model, "heads": m.heads,
                                          "feed_forward": m.feed_forward, "norm": m.norm})
        return ModelInfo(**common, **{**none, "attention": m.attention, "rnn_type": m.rnn_type,
                                      "input_feeding": m.input_feeding, "decoder_hidden": m.decoder_hidden})


def load_models(folders: list[Path], limits: ServerLimits) -> dict[str, LoadedModel]:
    """The models of ``folders`` (trained model folders) by name, their folder's name, in order: the
    first is the default. Raises AttnmtError for a bad folder or a name used twice."""
    from attnmt.api import load

    if not folders:
        raise AttnmtError("no model folder given")
    models: dict[str, LoadedModel] = {}
    for folder in map(Path, folders):
        name = folder.resolve().name
        if name in models:
            raise AttnmtError(f"two model folders are named '{name}' ({models[name].translator.folder} and "
                              f"{folder}); model names are folder names, so rename or copy one of them")
        model = models[name] = LoadedModel(name, load(folder), limits.timeout)
        model.batcher = Batcher(model, limits.max_batch, limits.batch_wait)
    return models
