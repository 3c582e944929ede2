"""Dynamic batching of /translate: concurrent requests for a model decoded together."""

from __future__ import annotations

import asyncio
import time
from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from attnmt.serve.models import LoadedModel


@dataclass
class _Job:
    """One /translate request waiting for the batcher."""

    texts: list[str]
    beam: int
    n_best: int
    future: asyncio.Future  # cancelled when the request gives up (time limit)


class Batcher:
    """Dynamic batching of /translate for one model. Requests queue up; one worker task takes the
    first, collects those that follow until a pause of ``wait`` seconds or ``max_sentences``, and
    decodes the requests with the same (beam, n_best) in one ``Translator.translate`` call, through
    ``LoadedModel.run``. Each request gets its own translations, in its order.

    Decoding 32 sentences together costs little more than decoding one (the per-step work of an
    RNN decoder is mostly fixed overhead on a CPU), so under load this multiplies throughput. A
    request that gave up (time limit) is left out of its batch, or its results dropped if the
    batch had started; the other requests are not affected."""

    def __init__(self, model: LoadedModel, max_sentences: int, wait: float):
        self.model = model
        self.max_sentences = max_sentences
        self.wait = wait
        self.queue: Optional[asyncio.Queue] = None
        self.worker: Optional[asyncio.Task] = None
        self.concurrent = False  # did the last batch hold several requests?

    async def translate(self, texts: list[str], beam: int, n_best: int) -> list:
        """The translations of ``texts`` (a list of attnmt.api.Translation), in order; ModelTimeout
        past the model's time limit, waiting in the queue included."""
        self._start()
        future = asyncio.get_running_loop().create_future()
        self.queue.put_nowait(_Job(texts, beam, n_best, future))
        return await self.model.in_time(future)

    def _start(self):
        # Started by the first request, in the event loop that serves it (a test client may
        # bring a new loop: the worker of a closed loop is dead, and a new one is started).
        loop = asyncio.get_running_loop()
        if self.worker is None or self.worker.done() or self.worker.get_loop() is not loop:
            self.queue = asyncio.Queue()
            self.worker = loop.create_task(self._work())

    async def stop(self):
        if self.worker is not None and not self.worker.done():
            self.worker.cancel()
            with suppress(asyncio.CancelledError):
                await self.worker

    async def _work(self):
        while True:
            jobs = await self._collect()
            for options in dict.fromkeys((job.beam, job.n_best) for job in jobs):
                await self._decode([job for job in jobs if (job.beam, job.n_best) == options])

    async def _collect(self) -> list[_Job]:
        """The first request in the queue and those that follow it, up to ``max_sentences``
        sentences, until none has come for ``wait`` seconds (or after ``10 * wait`` in all).

        Waiting for a pause rather than for a fixed time matters under load: the requests of many
        clients are read one by one by the event loop, a millisecond or two apart, and a fixed
        window would cut that stream into small batches. Without load (the last batch was a lone
        request and none is queued behind this one) there is no company to wait for: decode now."""
        jobs = [await self.queue.get()]
        size, start = len(jobs[0].texts), time.monotonic()
        heard = start  # when the last request came
        wait = self.wait if self.concurrent or not self.queue.empty() else 0.0
        while size < self.max_sentences:
            try:
                job = self.queue.get_nowait()
            except asyncio.QueueEmpty:
                remaining = min(heard + wait, start + 10 * wait) - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    job = await asyncio.wait_for(self.queue.get(), remaining)
                except asyncio.TimeoutError:
                    break
            jobs.append(job)
            size, heard = size + len(job.texts), time.monotonic()
        self.concurrent = len(jobs) > 1
        return jobs

    async def _decode(self, jobs: list[_Job]):
        """Decodes the sentences of ``jobs`` in one call. The batch has the time limit of a request:
        when it passes, every request in it, queued before it started, has given up already."""
        jobs = [job for job in jobs if not job.future.done()]  # gave up while queued
        if not jobs:
            return
        texts = [text for job in jobs for text in job.texts]
        try:
            results = await self.model.run(self.model.translator.translate, texts, jobs[0].beam, jobs[0].n_best)
        except Exception as error:  # noqa: BLE001 - each request of the batch gets it (503 or 500)
            for job in jobs:
                if not job.future.done():
                    job.future.set_exception(error)
            return
        start = 0
        for job in jobs:
            if not job.future.done():
                job.future.set_result(results[start:start + len(job.texts)])
            start += len(job.texts)
