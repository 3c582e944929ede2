"""HTTP API over trained models: translate, trace the decoder, list models.

    >>> from attnmt.serve import create_app
    >>> app = create_app([Path("runs/quickstart/model")])   # then: uvicorn.run(app)

Every request body is a pydantic model that forbids unknown fields and carries the server
limits (sentences per request, characters per sentence, beam size), so the OpenAPI schema at
``/docs`` shows them; subword tokens per sentence are counted after encoding. Errors are JSON
objects whose ``detail`` is a readable string: 422 invalid request, 404 unknown model, 413 body
too large, 503 over the time limit. ``/beam`` returns the search tree recorded by
``attnmt.decoding.BeamRecorder``; ``/attention`` every layer and head of a Transformer's attention
(``Translator.attention``).

Decoding runs in a worker thread, one computation at a time per model (a lock per model).
Concurrent /translate requests for a model are decoded together (dynamic batching, see
``Batcher``). ``run_server`` shuts down gracefully: on SIGTERM or SIGINT, requests in flight
finish and get their answers.

The command ``attnmt serve MODEL_DIR ...`` binds to 127.0.0.1 by default; see docs/http-api.md.
"""

# No ``from __future__ import annotations`` here: FastAPI must see the request models, which are
# built inside create_app (they carry its limits), as objects rather than strings.

import asyncio
import signal
import threading
import time
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

import anyio
import anyio.to_thread
import numpy as np
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import AfterValidator, BaseModel, ConfigDict, Discriminator, Field, Tag

from attnmt.errors import AttnmtError

STATIC_DIR = Path(__file__).resolve().parent / "static"


@dataclass(frozen=True)
class ServerLimits:
    """What one request may ask for (checked before any decoding), and how requests are batched."""

    max_body_bytes: int = 1_000_000  # request body (413 above)
    max_sentences: int = 64  # texts in one /translate request
    max_chars: int = 1000  # characters per text
    max_tokens: int = 256  # subword tokens per text, counted after encoding, end of sentence excluded
    max_beam: int = 16  # beam size (and n_best) of /translate
    max_top_k: int = 50  # top_k of /trace
    timeout: float = 30.0  # seconds for one request, waiting for the model included (503 above)
    max_batch: int = 64  # sentences decoded together by dynamic batching; 1 = one request at a time
    batch_wait: float = 0.005  # seconds the batcher waits for more requests after the first of a batch

    def __post_init__(self):
        for name in ("max_body_bytes", "max_sentences", "max_chars", "max_tokens", "max_beam", "max_top_k",
                     "max_batch"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise AttnmtError(f"server limit {name} must be a positive integer, got {value!r}")
        if not self.timeout > 0:
            raise AttnmtError(f"server limit timeout must be positive, got {self.timeout!r}")
        if not 0 <= self.batch_wait < self.timeout:
            raise AttnmtError(f"batch_wait must be at least 0 and below the timeout, got {self.batch_wait!r}")


# ---------------------------------------------------------------------------------------------
# Response models (fixed). Request models depend on the limits: see _request_models.


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorResponse(Strict):
    detail: str = Field(description="what is wrong, readable")
    errors: Optional[list[dict[str, Any]]] = Field(
        None, description="422 only: one entry per invalid field, with loc, msg and type")


class HealthResponse(Strict):
    status: Literal["ok"]
    models: list[str]


class ModelInfo(Strict):
    """What a model is. The RNN fields are null for a Transformer and the Transformer fields null
    for an RNN, so that a client reads the fields of the model's ``type``."""

    name: str = Field(description="the model folder's name; the `model` of requests")
    type: Literal["rnn", "transformer"] = Field(description="rnn: encoder-decoder RNN with one attention; "
                                                            "transformer: layers of multi-head attention (/attention)")
    attention: Optional[str] = Field(
        description="RNN: none | bahdanau | luong-dot | luong-general | luong-concat | location; "
                    "Transformer: 'multi-head'")
    rnn_type: Optional[str] = Field(description="RNN only: gru | lstm")
    input_feeding: Optional[bool] = Field(description="RNN only")
    decoder_hidden: Optional[int] = Field(description="RNN only: size of the decoder state")
    d_model: Optional[int] = Field(description="Transformer only: model width")
    heads: Optional[int] = Field(description="Transformer only: attention heads per layer")
    encoder_layers: int
    decoder_layers: int
    feed_forward: Optional[int] = Field(description="Transformer only: inner size of the feed-forward layers")
    norm: Optional[Literal["pre", "post"]] = Field(description="Transformer only: LayerNorm placement")
    beam: int = Field(description="default beam size of /translate for this model")
    path: str


class CandidateOut(Strict):
    text: str
    tokens: list[str] = Field(description="output subword pieces, ending in '</s>' when the model produced it")
    score: float = Field(description="log-probability / length penalty")
    attention: Optional[list[list[float]]] = Field(
        description="len(tokens) x len(source_tokens), rows sum to 1; null without attention or when not asked")


class TranslationOut(Strict):
    source: str
    source_tokens: list[str] = Field(description="source subword pieces, ending in '</s>'")
    candidates: list[CandidateOut] = Field(description="n-best list, best first")


class TranslateResponse(Strict):
    model: str
    translations: list[TranslationOut] = Field(description="one per input text, in order")


class StepOut(Strict):
    token: str = Field(description="the token chosen at this step (greedy)")
    probability: float
    scores: Optional[list[float]] = Field(description="attention scores e_j before the softmax (one per source token)")
    weights: Optional[list[float]] = Field(description="attention weights a_j = softmax(e)_j")
    context: list[float] = Field(description="context vector c_t = sum_j a_j h_j")
    state: list[float] = Field(description="decoder state s_t (top layer)")
    top_k: list[tuple[str, float]] = Field(description="most probable next tokens with their probabilities")


class TraceResponse(Strict):
    model: str
    source: str
    source_tokens: list[str]
    text: str = Field(description="the greedy translation")
    tokens: list[str]
    encoder_states: list[list[float]] = Field(description="one row h_j per source token")
    steps: list[StepOut]


class BeamNodeOut(Strict):
    id: int = Field(description="index of the node in `nodes`")
    parent: Optional[int] = Field(description="id of the node it extends; null for the root")
    token: str = Field(description="the subword piece this candidate appends ('<s>' for the root)")
    log_prob: float = Field(description="log-probability of the whole prefix")
    step: int = Field(description="output position: 0 for the root, 1 for the first token")
    status: Literal["root", "kept", "finished", "pruned"] = Field(
        description="kept: stayed in the beam; finished: ended in '</s>'; pruned: fell out of the beam")


class BeamResponse(Strict):
    model: str
    source_tokens: list[str]
    nodes: list[BeamNodeOut] = Field(description="every candidate the beam search looked at, the root first")
    translation: TranslationOut = Field(description="the final hypotheses, best first (up to beam of them)")


class AttentionResponse(Strict):
    model: str
    source_tokens: list[str] = Field(description="S source pieces, ending in '</s>'")
    tokens: list[str] = Field(description="T output pieces (the translation, or the forced one)")
    decoder_tokens: list[str] = Field(description="T decoder inputs: '<s>' and tokens[:-1]")
    encoder: list[list[list[list[float]]]] = Field(
        description="encoder self-attention [layer][head][source query][source key], S x S per head")
    decoder: list[list[list[list[float]]]] = Field(
        description="masked decoder self-attention [layer][head][output][decoder input], T x T per head; "
                    "0 above the diagonal")
    cross: list[list[list[list[float]]]] = Field(
        description="cross-attention [layer][head][output][source], T x S per head")


def _beam_tree(translator, text: str, beam: int):
    """Beam search over one sentence, recording its search tree: (Translation, nodes)."""
    translation, nodes = translator.beam_tree(text, beam)
    return translation, [BeamNodeOut(**node) for node in nodes]


def _not_blank(text: str) -> str:
    if not text.strip():
        raise ValueError("text must not be empty or only whitespace")
    return text


def _text_kind(value: Any) -> Optional[str]:
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        return "list"
    return None


def _request_models(limits: ServerLimits):
    """The request bodies, with the limits as Field constraints (so /docs shows them)."""
    Sentence = Annotated[str, Field(min_length=1, max_length=limits.max_chars, strict=True),
                         AfterValidator(_not_blank)]
    ModelName = Optional[str]
    model_field = Field(None, description="model name (see /models); default: the first model")

    class TranslateRequest(Strict):
        text: Annotated[
            Union[Annotated[Sentence, Tag("text")],
                  Annotated[list[Sentence], Field(min_length=1, max_length=limits.max_sentences), Tag("list")]],
            Discriminator(_text_kind, custom_error_type="text_type",
                          custom_error_message="text must be a string or a list of strings"),
        ] = Field(description=f"one sentence, or a list of 1 to {limits.max_sentences} sentences; "
                              f"each 1 to {limits.max_chars} characters, not only whitespace")
        model: ModelName = model_field
        beam: Optional[int] = Field(None, ge=1, le=limits.max_beam, strict=True,
                                    description="beam size (1 = greedy); default: the model's")
        n_best: int = Field(1, ge=1, le=limits.max_beam, strict=True,
                            description="candidates per sentence, at most beam")
        attention: bool = Field(True, strict=True, description="include the attention matrices")

    class TraceRequest(Strict):
        text: Sentence = Field(description=f"one sentence of 1 to {limits.max_chars} characters")
        model: ModelName = model_field
        top_k: int = Field(5, ge=1, le=limits.max_top_k, strict=True, description="next-token candidates per step")

    class BeamRequest(Strict):
        text: Sentence = Field(description=f"one sentence of 1 to {limits.max_chars} characters")
        model: ModelName = model_field
        beam: int = Field(5, ge=1, le=limits.max_beam, strict=True, description="beam size")

    class AttentionRequest(Strict):
        text: Sentence = Field(description=f"one sentence of 1 to {limits.max_chars} characters")
        model: ModelName = model_field
        translation: Optional[Sentence] = Field(
            None, description="a target text whose attention to show (forced decoding); "
                              "default: the model's translation (beam of its config)")

    return TranslateRequest, TraceRequest, BeamRequest, AttentionRequest


# ---------------------------------------------------------------------------------------------


@dataclass
class LoadedModel:
    name: str
    translator: Any  # attnmt.api.Translator
    lock: threading.Lock  # one computation at a time: torch already uses every core for one
    batcher: Optional["Batcher"] = None

    def info(self) -> ModelInfo:
        m = self.translator.config.model
        common = dict(name=self.name, type=m.type, encoder_layers=m.encoder_layers, decoder_layers=m.decoder_layers,
                      beam=self.translator.config.decoding.beam, path=str(self.translator.folder.resolve()))
        none = dict.fromkeys(("rnn_type", "input_feeding", "decoder_hidden", "d_model", "heads", "feed_forward",
                              "norm"))
        if m.type == "transformer":
            return ModelInfo(**common, **{**none, "attention": "multi-head", "d_model": m.d_model, "heads": m.heads,
                                          "feed_forward": m.feed_forward, "norm": m.norm})
        return ModelInfo(**common, **{**none, "attention": m.attention, "rnn_type": m.rnn_type,
                                      "input_feeding": m.input_feeding, "decoder_hidden": m.decoder_hidden})


class RequestTimeout(Exception):
    pass


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
    decodes the requests with the same (beam, n_best) in one ``Translator.translate`` call, in a
    thread holding the model's lock. Each request gets its own translations, in its order.

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
        """The translations of ``texts`` (a list of attnmt.api.Translation), in order."""
        self._start()
        future = asyncio.get_running_loop().create_future()
        self.queue.put_nowait(_Job(texts, beam, n_best, future))
        return await future

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
        jobs = [job for job in jobs if not job.future.done()]  # gave up while queued
        if not jobs:
            return
        texts = [text for job in jobs for text in job.texts]
        try:
            results = await asyncio.to_thread(self._translate, texts, jobs[0].beam, jobs[0].n_best)
        except Exception as error:  # noqa: BLE001 - each request of the batch gets the error (500)
            for job in jobs:
                if not job.future.done():
                    job.future.set_exception(error)
            return
        start = 0
        for job in jobs:
            if not job.future.done():
                job.future.set_result(results[start:start + len(job.texts)])
            start += len(job.texts)

    def _translate(self, texts: list[str], beam: int, n_best: int) -> list:
        with self.model.lock:
            return self.model.translator.translate(texts, beam, n_best)


class BodyLimitMiddleware:
    """413 for a request body over ``max_bytes``: by its Content-Length, and by the bytes actually
    received (a chunked body has no Content-Length, and a client may lie). The body is read here
    and replayed to the application."""

    def __init__(self, app, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = JSONResponse(status_code=413, content={
            "detail": f"request body too large: the limit is {self.max_bytes} bytes"})
        for key, value in scope["headers"]:
            if key.lower() == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await JSONResponse(status_code=400, content={"detail": "invalid Content-Length header"})(
                        scope, receive, send)
                    return
                if declared > self.max_bytes:
                    await too_large(scope, receive, send)
                    return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            size += len(body)
            if size > self.max_bytes:
                await too_large(scope, receive, send)
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def _translation_out(t, attention: bool) -> TranslationOut:
    return TranslationOut(source=t.source, source_tokens=t.source_tokens, candidates=[
        CandidateOut(text=c.text, tokens=c.tokens, score=c.score,
                     attention=_floats(c.attention) if attention else None)
        for c in t.candidates])


def _floats(array: Optional[np.ndarray]):
    return None if array is None else np.asarray(array, dtype=np.float64).tolist()


def _weights(array: np.ndarray) -> list:
    """Attention weights rounded to 6 decimals: the float32 values to within 5e-7, in a third of
    the JSON (all layers and heads of a long sentence run to millions of numbers)."""
    return np.round(np.asarray(array, dtype=np.float64), 6).tolist()


PLACEHOLDER_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>attnmt</title></head>
<body style="font-family: sans-serif; max-width: 40em; margin: 2em auto">
<h1>attnmt</h1>
<p>The HTTP API is running. Models: {models}.</p>
<p>Endpoints: <code>GET /health</code>, <code>GET /models</code>, <code>POST /translate</code>,
<code>POST /trace</code>, <code>POST /beam</code>, <code>POST /attention</code>.
Interactive documentation: <a href="docs">/docs</a>.</p>
</body></html>
"""


def create_app(model_dirs: list[Path], limits: Optional[ServerLimits] = None) -> FastAPI:
    """An application serving the models of ``model_dirs`` (trained model folders), named after
    their folders; the first is the default. Raises AttnmtError for a bad folder or a name used twice."""
    from attnmt.api import load

    limits = limits or ServerLimits()
    if not model_dirs:
        raise AttnmtError("no model folder given")
    models: dict[str, LoadedModel] = {}
    for folder in model_dirs:
        folder = Path(folder)
        name = folder.resolve().name
        if name in models:
            raise AttnmtError(f"two model folders are named '{name}' ({models[name].translator.folder} and "
                              f"{folder}); model names are folder names, so rename or copy one of them")
        models[name] = LoadedModel(name, load(folder), threading.Lock())
        models[name].batcher = Batcher(models[name], limits.max_batch, limits.batch_wait)
    default = next(iter(models))

    TranslateRequest, TraceRequest, BeamRequest, AttentionRequest = _request_models(limits)

    def errors(*codes: int) -> dict:
        return {code: {"model": ErrorResponse} for code in (404, 413, 422, 503, *codes)}

    @asynccontextmanager
    async def lifespan(app):
        yield
        for model in models.values():  # after uvicorn has let the requests in flight finish
            await model.batcher.stop()

    app = FastAPI(title="attnmt", version=_version(), lifespan=lifespan,
                  description="Neural machine translation with attention: translations with their "
                              "attention matrices, and every quantity of every decoder step.")
    app.state.models = models
    app.state.limits = limits
    app.add_middleware(BodyLimitMiddleware, max_bytes=limits.max_body_bytes)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError):
        problems = [{"loc": [str(p) for p in e.get("loc", ())], "msg": _message(e), "type": e.get("type", "")}
                    for e in exc.errors()]
        detail = "; ".join(p["msg"] if p["msg"].startswith("the body ") else f"{_where(p['loc'])}: {p['msg']}"
                           for p in problems) or "invalid request"
        return JSONResponse(status_code=422, content={"detail": detail, "errors": problems})

    def get_model(name: Optional[str]) -> LoadedModel:
        name = default if name is None else name
        if name not in models:
            raise HTTPException(404, f"unknown model '{name}'; available: {', '.join(models)}")
        return models[name]

    def check_tokens(model: LoadedModel, texts: list[str], single: bool, field: str = "text", side: str = "src"):
        """422 for a text longer than the limit in subword tokens (the model's unit of work: its
        cost grows with them, and a character count says little about it for a BPE model)."""
        subwords = model.translator.src_subwords if side == "src" else model.translator.tgt_subwords
        for i, ids in enumerate(subwords.encode(texts)):
            if len(ids) > limits.max_tokens:
                where = field if single else f"{field}[{i}]"
                raise HTTPException(422, f"{where} has {len(ids)} subword tokens; the limit is {limits.max_tokens}")

    def too_slow() -> HTTPException:
        return HTTPException(503, f"the request took longer than the limit of {limits.timeout:g} s "
                                  "(model busy or input too long); try again or send less")

    async def run(model: LoadedModel, fn, *args):
        """Runs fn(*args) in a worker thread holding the model's lock; 503 past the time limit
        (waiting for the lock included). A computation past the limit finishes in its thread, its
        result discarded; the lock keeps the model to one computation at a time meanwhile."""
        deadline = time.monotonic() + limits.timeout

        def work():
            if not model.lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
                raise RequestTimeout
            try:
                if time.monotonic() > deadline:
                    raise RequestTimeout
                return fn(*args)
            finally:
                model.lock.release()

        try:
            with anyio.fail_after(limits.timeout):
                return await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
        except (TimeoutError, RequestTimeout):
            raise too_slow() from None

    @app.get("/health", response_model=HealthResponse)
    def health():
        return HealthResponse(status="ok", models=list(models))

    @app.get("/models", response_model=list[ModelInfo])
    def list_models():
        return [m.info() for m in models.values()]

    @app.post("/translate", response_model=TranslateResponse, responses=errors())
    async def translate(body: TranslateRequest):
        model = get_model(body.model)
        texts = [body.text] if isinstance(body.text, str) else list(body.text)
        beam = body.beam if body.beam is not None else min(model.translator.config.decoding.beam, limits.max_beam)
        if body.n_best > beam:
            raise HTTPException(422, f"n_best ({body.n_best}) cannot exceed the beam size ({beam})")
        check_tokens(model, texts, single=isinstance(body.text, str))
        try:
            with anyio.fail_after(limits.timeout):
                results = await model.batcher.translate(texts, beam, body.n_best)
        except TimeoutError:
            raise too_slow() from None
        return TranslateResponse(model=model.name, translations=[_translation_out(t, body.attention) for t in results])

    @app.post("/trace", response_model=TraceResponse, responses=errors())
    async def trace(body: TraceRequest):
        model = get_model(body.model)
        check_tokens(model, [body.text], single=True)
        result = await run(model, model.translator.trace, body.text, body.top_k)
        return TraceResponse(
            model=model.name, source=result.source, source_tokens=result.source_tokens, text=result.text,
            tokens=result.tokens, encoder_states=_floats(result.encoder_states),
            steps=[StepOut(token=s.token, probability=s.probability, scores=_floats(s.scores),
                           weights=_floats(s.weights), context=_floats(s.context), state=_floats(s.state),
                           top_k=[(token, float(p)) for token, p in s.top_k])
                   for s in result.steps])

    @app.post("/beam", response_model=BeamResponse, responses=errors())
    async def beam_tree(body: BeamRequest):
        """The beam search tree of one sentence: every candidate looked at, kept, finished or pruned."""
        model = get_model(body.model)
        check_tokens(model, [body.text], single=True)
        translation, nodes = await run(model, _beam_tree, model.translator, body.text, body.beam)
        return BeamResponse(model=model.name, source_tokens=translation.source_tokens, nodes=nodes,
                            translation=_translation_out(translation, True))

    @app.post("/attention", response_model=AttentionResponse, responses=errors())
    async def attention(body: AttentionRequest):
        """Every attention weight of a Transformer for one sentence and its translation (or the
        ``translation`` given): encoder self-, decoder self- and cross-attention of every layer and
        head, as ``Translator.attention`` computes them. An RNN model is a 422: its one attention
        matrix is the ``attention`` of /translate (and each step's weights are in /trace)."""
        model = get_model(body.model)
        if model.translator.config.model.type != "transformer":
            raise HTTPException(422, f"/attention gives the layers and heads of Transformer models; '{model.name}' "
                                     "is an RNN model: its attention matrix is the 'attention' of /translate")
        check_tokens(model, [body.text], single=True)
        if body.translation is not None:
            check_tokens(model, [body.translation], single=True, field="translation", side="tgt")
        maps = await run(model, model.translator.attention, body.text, body.translation)
        return AttentionResponse(model=model.name, source_tokens=maps["source_tokens"], tokens=maps["tokens"],
                                 decoder_tokens=maps["decoder_tokens"],
                                 **{kind: _weights(maps[kind]) for kind in ("encoder", "decoder", "cross")})

    if STATIC_DIR.is_dir():
        app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    @app.get("/", include_in_schema=False)
    def index():
        page = STATIC_DIR / "index.html"
        if page.is_file():
            return FileResponse(page, media_type="text/html")
        return HTMLResponse(PLACEHOLDER_HTML.format(models=", ".join(models)))

    return app


def _message(error: dict) -> str:
    kind, loc = error.get("type", ""), tuple(error.get("loc", ()))
    if kind == "json_invalid":
        return f"the body is not valid JSON ({error.get('ctx', {}).get('error', 'decode error')})"
    if loc == ("body",) and kind in ("model_attributes_type", "dict_type", "model_type"):
        return "the body must be a JSON object, sent with Content-Type: application/json"
    return str(error.get("msg", "")).removeprefix("Value error, ")


def _where(loc: list[str]) -> str:
    """'text[2]' for ['body', 'text', 'list', '2']: the field as the client wrote it."""
    parts = loc[1:] if loc and loc[0] in ("body", "query", "path") else loc
    out = ""
    for i, part in enumerate(parts):
        if i == 1 and parts[0] == "text" and part in ("text", "list"):
            continue  # the tag of the text union
        out += f"[{part}]" if part.isdigit() else (f".{part}" if out else part)
    return out or "body"


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("attnmt")
    except Exception:  # noqa: BLE001 - not installed: no version
        return "0"


def is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def url_of(host: str, port: int) -> str:
    host = host.strip("[]")
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def run_server(app: FastAPI, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info"):
    """Serves ``app`` with uvicorn until SIGTERM or SIGINT (Ctrl-C), then shuts down gracefully:
    uvicorn stops accepting connections, lets the requests in flight finish and answer (for at
    most the request time limit), and returns; the process then exits with status 0."""
    import uvicorn

    def exit_cleanly(signum, frame):
        raise SystemExit(0)

    # uvicorn handles the signals while it serves, then raises the signal again once it has shut
    # down, for the handler in place before it: by default death by SIGTERM, or KeyboardInterrupt.
    # The shutdown was clean, so that handler exits with 0 (as it does if the signal comes before
    # uvicorn has started, when there is nothing to finish).
    main_thread = threading.current_thread() is threading.main_thread()  # signals are set there only
    previous = {sig: signal.signal(sig, exit_cleanly) for sig in (signal.SIGTERM, signal.SIGINT)} if main_thread else {}
    try:
        uvicorn.run(app, host=host, port=port, log_level=log_level,
                    timeout_graceful_shutdown=app.state.limits.timeout)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
