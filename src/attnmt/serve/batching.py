"""Dynamic batching of /translate: concurrent requests for a model decoded together, in chunks."""

from __future__ import annotations

import asyncio
import time
from contextlib import suppress
from dataclasses import dataclass
from functools import partial
from typing import Any, Awaitable, Callable, Optional, Protocol, Union

from attnmt.core.config import Sampling
from attnmt.seq2seq.heads import call_masked
from attnmt.serve.limits import ServerLimits, work


class RunsChunks(Protocol):
    """What the batcher needs of a served model (attnmt.serve.models.LoadedModel)."""

    translator: Any

    def run_chunks(
        self, chunks: list[Callable[[], Any]], deadline: float, wanted: Callable[[], bool] = ...
    ) -> Awaitable[list]: ...

    def in_time(self, awaitable, deadline: float) -> Awaitable: ...


@dataclass
class _Job:
    """One /translate request waiting for the batcher."""

    texts: list[str]
    tokens: list[int]  # subword tokens of each text
    beam: int
    n_best: int
    deadline: float  # time.monotonic() when the request gives up
    future: asyncio.Future  # cancelled when the request gives up (time limit)
    sampling: Optional[Sampling] = None  # drawn, not searched: decoded alone (a seed repeats its request's draws)
    prefixes: Optional[list[str]] = None  # the start of each text's translations ("": none)
    constraints: Optional[list[list[str]]] = None  # the phrases each text's translations must hold ([]: none)
    tag: Union[str, list[Optional[str]], None] = None  # put before each of its texts, or one each (source_ids)
    heads: tuple = ()  # a Transformer's heads switched off (attnmt.seq2seq.heads): decoded with the same only

    @property
    def options(self) -> tuple:
        """What the requests decoded together share: beam, n_best and the heads switched off; a
        sampling request is alone."""
        return (self.beam, self.n_best, self.heads) if self.sampling is None else (id(self),)

    @property
    def work(self) -> int:
        return work(self.tokens, self.beam)


class Batcher:
    """Dynamic batching of /translate for one model. Requests queue up; one worker task takes the
    first, collects those that follow until a pause of ``batch_wait`` seconds, ``max_batch``
    sentences or ``max_work``, and decodes the requests with the same (beam, n_best) together
    through ``LoadedModel.run_chunks``: sorted by length and cut into chunks of ``chunk_work``,
    one ``Translator.translate`` call each. Each request gets its own translations, in its order.

    Decoding 32 sentences together costs little more than decoding one (the per-step work of an
    RNN decoder is mostly fixed overhead on a CPU), so under load this multiplies throughput. A
    request that gave up (time limit) is left out of its batch, or its results dropped if the
    batch had started; the other requests are not affected, and a batch that nobody waits for any
    more stops after the chunk under way."""

    def __init__(self, model: RunsChunks, limits: ServerLimits):
        self.model = model
        self.max_sentences = limits.max_batch
        self.max_work = limits.max_work
        self.chunk_work = limits.chunk_work
        self.wait = limits.batch_wait
        self.queue: Optional[asyncio.Queue] = None
        self.worker: Optional[asyncio.Task] = None
        self.held: Optional[_Job] = None  # taken from the queue, but for the next batch (this one was full)
        self.concurrent = False  # did the last batch hold several requests?

    async def translate(
        self,
        texts: list[str],
        tokens: list[int],
        beam: int,
        n_best: int,
        deadline: float,
        sampling: Optional[Sampling] = None,
        prefixes: Optional[list[str]] = None,
        constraints: Optional[list[list[str]]] = None,
        tag: Union[str, list[Optional[str]], None] = None,
        heads: tuple = (),
    ) -> list:
        """The translations of ``texts`` (a list of attnmt.api.Translation), in order; ModelTimeout
        at ``deadline``, waiting in the queue included. ``tokens``: their subword token counts (the
        work of each). ``sampling``: drawn instead of searched for (beam and n_best 1). ``prefixes``:
        the start of each text's translations ("": none), ``constraints`` the phrases they must hold
        ([]: none), ``tag`` one before every text or one each (None: none), decoded with other requests' texts;
        ``heads``: a Transformer's heads switched off for these texts (with the requests that switch off the same)."""
        self._start()
        future = asyncio.get_running_loop().create_future()
        self.queue.put_nowait(
            _Job(texts, tokens, beam, n_best, deadline, future, sampling, prefixes, constraints, tag, heads)
        )
        return await self.model.in_time(future, deadline)

    def _start(self):
        # Started by the first request, in the event loop that serves it (a test client may
        # bring a new loop: the worker of a closed loop is dead, and a new one is started).
        loop = asyncio.get_running_loop()
        if self.worker is None or self.worker.done() or self.worker.get_loop() is not loop:
            self.queue = asyncio.Queue()
            self.held = None
            self.worker = loop.create_task(self._work())

    async def stop(self):
        if self.worker is not None and not self.worker.done():
            self.worker.cancel()
            with suppress(asyncio.CancelledError):
                await self.worker

    async def _work(self):
        while True:
            jobs = await self._collect()
            for options in dict.fromkeys(job.options for job in jobs):
                await self._decode([job for job in jobs if job.options == options])

    async def _collect(self) -> list[_Job]:
        """The first request in the queue and those that follow it, up to ``max_sentences``
        sentences and ``max_work``, until none has come for ``wait`` seconds (or after ``10 * wait``
        in all). A request that does not fit is the first of the next batch.

        Waiting for a pause rather than for a fixed time matters under load: the requests of many
        clients are read one by one by the event loop, a millisecond or two apart, and a fixed
        window would cut that stream into small batches. Without load (the last batch was a lone
        request and none is queued behind this one) there is no company to wait for: decode now."""
        first, self.held = self.held or await self.queue.get(), None
        jobs, size, total = [first], len(first.texts), first.work
        start = heard = time.monotonic()  # heard: when the last request came
        wait = self.wait if self.concurrent or not self.queue.empty() else 0.0
        while size < self.max_sentences and total < self.max_work:
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
            if size + len(job.texts) > self.max_sentences or total + job.work > self.max_work:
                self.held = job
                break
            jobs.append(job)
            size, total, heard = size + len(job.texts), total + job.work, time.monotonic()
        self.concurrent = len(jobs) > 1
        return jobs

    async def _decode(self, jobs: list[_Job]):
        """Decodes the sentences of ``jobs`` (same options), in chunks; stops between two chunks once
        every request of the batch has given up."""
        jobs = [job for job in jobs if not job.future.done()]  # gave up while queued
        if not jobs:
            return
        texts = [text for job in jobs for text in job.texts]
        beam, n_best = jobs[0].beam, jobs[0].n_best
        chunks = chunked([work([n], beam) for job in jobs for n in job.tokens], self.chunk_work)
        translate = self.model.translator.translate
        drawn = {} if jobs[0].sampling is None else {"sampling": jobs[0].sampling}
        prefixes = [p for job in jobs for p in (job.prefixes or [""] * len(job.texts))]
        phrases = [c for job in jobs for c in (job.constraints or [[]] * len(job.texts))]
        tags = [t or "" for job in jobs for t in (job.tag if isinstance(job.tag, list) else [job.tag] * len(job.texts))]

        def per_text(chunk: list[int]) -> dict:  # (only those given: the searches without are faster on GPUs)
            options = {"prefix": prefixes, "tag": tags, "constraints": phrases}
            return {
                name: [values[i] for i in chunk] for name, values in options.items() if any(values[i] for i in chunk)
            }

        heads = list(jobs[0].heads)
        try:
            results = await self.model.run_chunks(
                [
                    partial(
                        call_masked,
                        self.model.translator.model,
                        heads,
                        partial(translate, [texts[i] for i in chunk], beam, n_best, **drawn, **per_text(chunk)),
                    )
                    for chunk in chunks
                ],
                deadline=max(job.deadline for job in jobs),
                wanted=lambda: not all(job.future.done() for job in jobs),
            )
        except Exception as error:  # noqa: BLE001 - each request of the batch gets it (503 or 500)
            for job in jobs:
                if not job.future.done():
                    job.future.set_exception(error)
            return
        translations = [None] * len(texts)
        for chunk, chunk_results in zip(chunks, results):
            for i, translation in zip(chunk, chunk_results):
                translations[i] = translation
        start = 0
        for job in jobs:
            if not job.future.done():
                job.future.set_result(translations[start : start + len(job.texts)])
            start += len(job.texts)


def chunked(costs: list[int], limit: int) -> list[list[int]]:
    """Indices sorted by cost (similar lengths decode together with less padding), cut into chunks
    whose costs sum to at most ``limit``; an item costing more is a chunk of its own."""
    chunks: list[list[int]] = []
    total = limit
    for i in sorted(range(len(costs)), key=costs.__getitem__):
        if chunks and total + costs[i] <= limit:
            chunks[-1].append(i)
            total += costs[i]
        else:
            chunks.append([i])
            total = costs[i]
    return chunks
