"""The endpoints of the API.

The models and the limits of the app come in as FastAPI dependencies. A POST handler is a plain
function of (request body, model, limits, deadline): ``model_routes`` declares it for the app's
request models (they carry its limits), validating the body and finding the model it names first.
It checks what the request asks for (tokens, work), has the model do it (``LoadedModel.run``, or
the batcher) and returns ``answer(...)``: the JSON, bounded in size. A new endpoint is a handler
here, a line in ``model_routes`` and its request and answer in schemas.py.
"""

import time
from dataclasses import fields, is_dataclass, replace
from functools import partial
from typing import Annotated, Optional

import anyio.to_thread
import numpy as np
import torch
from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import Response

from attnmt.core.config import Sampling
from attnmt.core.errors import AttnmtError
from attnmt.seq2seq.constraints import phrases_of
from attnmt.seq2seq.decoding import max_output_lengths
from attnmt.seq2seq.heads import call_masked, check_heads, parse_heads
from attnmt.seq2seq.prefix import UNWRITABLE, unwritable
from attnmt.serve.audio import trace_audio, transcribe
from attnmt.serve.bodies import StrictJSONRoute
from attnmt.serve.limits import ServerLimits, work
from attnmt.serve.models import LoadedModel, stop_at
from attnmt.translation.align import force_attention, piece_lists
from attnmt.translation.saliency import saliency_matrices
from attnmt.serve.schemas import (
    Answer,
    AttentionResponse,
    SaliencyResponse,
    BeamResponse,
    ClassifyResponse,
    ErrorResponse,
    HealthResponse,
    ModelInfo,
    ScoreResponse,
    TraceResponse,
    TranslateResponse,
    request_models,
    respond,
)


def _models(request: Request) -> dict[str, LoadedModel]:
    return request.app.state.models


def _limits(request: Request) -> ServerLimits:
    return request.app.state.limits


Models = Annotated[dict[str, LoadedModel], Depends(_models)]
Limits = Annotated[ServerLimits, Depends(_limits)]
ERRORS = {code: {"model": ErrorResponse} for code in (400, 404, 413, 422, 500, 503)}  # 400: the Host check

router = APIRouter()


@router.get("/health", response_model=HealthResponse)
def health(models: Models):
    return HealthResponse(status="ok", models=list(models))


@router.get("/models", response_model=list[ModelInfo])
def list_models(models: Models):
    return [m.info() for m in models.values()]


def find_model(models: dict[str, LoadedModel], name: Optional[str]) -> LoadedModel:
    """The model a request names, or the first one (the default); 404 for an unknown name."""
    name = next(iter(models)) if name is None else name
    if name not in models:
        raise HTTPException(404, f"unknown model '{name}'; available: {', '.join(models)}")
    return models[name]


def check_tokens(
    model: LoadedModel,
    texts: list[str],
    limits: ServerLimits,
    single: bool,
    field: str = "text",
    side: str = "src",
    tag: Optional[str] = None,
) -> list[int]:
    """The subword token count of each text (``tag``: a source tag before each, counted); 422 for a
    text over the limit (the model's unit of work: its cost grows with them, and a character count
    says little about it for a BPE model), for a tag the model does not know, or for a source of no
    tokens at all: one the model's normalization empties (zero-width or control characters only),
    refused on every endpoint as a blank text is (searched, it gave "" on /translate but outputs
    on /trace and /beam)."""
    if model.inputs == "audio":
        raise HTTPException(422, f"'{model.name}' is a speech model: /translate and /trace take its audio")
    if model.inputs == "pairs":
        subwords = model.translator.subwords
    else:
        subwords = model.translator.src_subwords if side == "src" else model.translator.tgt_subwords

    def where(i: int) -> str:
        return field if single else f"{field}[{i}]"

    counts = [len(ids) for ids in subwords.encode(texts)]
    if side == "src" and 0 in counts:
        raise HTTPException(
            422,
            f"{where(counts.index(0))} has no subword tokens once normalized (only characters that the "
            "model's normalization removes, such as zero-width or control characters): nothing for the model to read",
        )
    if tag:  # (the tag counts too: one piece more)
        try:
            counts = [len(ids) for ids in model.translator.source_ids(texts, tag)]
        except AttnmtError as error:
            raise HTTPException(422, f"tag: {error}") from None
    for i, n in enumerate(counts):
        if n > limits.max_tokens:
            raise HTTPException(422, f"{where(i)} has {n} subword tokens; the limit is {limits.max_tokens}")
    return counts


def check_prefixes(model: LoadedModel, prefixes: list[str], limits: ServerLimits, single: bool) -> list[int]:
    """The subword tokens of each prefix (check_tokens), and 422 for a prefix that the model's target
    pieces cannot write (no output can begin with it: searched, its <unk> was forced, and the
    answer did not begin with the prefix)."""
    counts = check_tokens(model, prefixes, limits, single, "prefix", "tgt")
    for i in unwritable(model.translator.tgt_subwords, prefixes):
        raise HTTPException(422, f"{'prefix' if single else f'prefix[{i}]'} {prefixes[i]!r} {UNWRITABLE}")
    return counts


def with_prefix(model: LoadedModel, body, limits: ServerLimits) -> list[int]:
    """The work of one text of /trace or /beam, [tokens]: its subword tokens, or its prefix's if more
    (a prefix may make the output longer than its source's limit); 422 for either over the limit."""
    [tokens] = check_tokens(model, [body.text], limits, single=True, tag=body.tag)
    [forced] = check_prefixes(model, [body.prefix or ""], limits, single=True)
    return [max(tokens, forced)]


def constraints_of(model: LoadedModel, body, texts: list[str], limits: ServerLimits):
    """The phrases of /translate's constraints, one list per text, or None; and the subword tokens each
    text's phrases add up to (an output holds them all). 422 for a phrase the model's target pieces
    cannot write, or phrases of more tokens than the limit."""
    if body.constraints is None:
        return None, [0] * len(texts)
    single = isinstance(body.text, str)
    phrases = [list(body.constraints)] if single else [list(c) for c in body.constraints]
    try:
        phrases_of(model.translator.tgt_subwords, texts, phrases)
    except AttnmtError as error:
        raise HTTPException(422, f"constraints: {error}") from None
    return phrases, check_tokens(model, [" ".join(p) for p in phrases], limits, single, "constraints", "tgt")


def heads_of(model: LoadedModel, body) -> list:
    """The heads a request switches off (``mask_heads``), checked against the model's; 422 otherwise."""
    if not getattr(body, "mask_heads", None):
        return []
    if getattr(model.translator, "ensembled", None):
        raise HTTPException(
            422, f"mask_heads: '{model.name}' is an ensemble; serve a member alone to switch its heads off"
        )
    try:
        heads = parse_heads(body.mask_heads)
        check_heads(model.translator.model, heads)
    except AttnmtError as error:
        raise HTTPException(422, f"mask_heads: {error}") from None
    return heads


def check_work(tokens: list[int], beam: int, limits: ServerLimits):
    """422 for a request asking for more than ``max_work``: its time must stay well within the limit."""
    asked = work(tokens, beam)
    if asked > limits.max_work:
        raise HTTPException(
            422,
            f"the request asks for {asked} units of work (beam {beam} x (subword tokens + 1), "
            f"summed over its texts); the limit is {limits.max_work}: send fewer or shorter "
            "texts, or ask for a smaller beam",
        )


def check_matrices(
    model: LoadedModel,
    tokens: list[int],
    n_best: int,
    limits: ServerLimits,
    prefixes: list[str],
    constrained: list[int],
):
    """422 before decoding for /translate attention matrices that could exceed ``max_answer_values``:
    n_best candidates per text, each up to its output length limit x its source tokens. With a
    prefix the limit is at least its tokens, those spelling an unfinished last word included, and
    max_length_offset more: at most its characters + 1 (a piece spells one or more, "▁" the space);
    with constraints, at least their ``constrained`` tokens and max_length_offset more."""
    dc = model.translator.config.decoding
    sources = [n + 1 for n in tokens]  # + 1: the end of sentence
    outputs = max_output_lengths(torch.tensor(sources, device="cpu"), dc.max_length_ratio, dc.max_length_offset)
    outputs = [max(limit, len(p) + 1 + dc.max_length_offset) if p else limit for limit, p in zip(outputs, prefixes)]
    outputs = [max(limit, c + dc.max_length_offset) if c else limit for limit, c in zip(outputs, constrained)]
    bound = n_best * sum(s * t for s, t in zip(sources, outputs))
    if bound > limits.max_answer_values:
        raise HTTPException(
            422,
            f"the answer could hold up to {bound} attention weights ({n_best} matrices per text "
            f"of up to {max(outputs)} output x {max(sources)} source tokens); the limit is "
            f"{limits.max_answer_values}: {REDUCE_TRANSLATION}",
        )


def check_attention_maps(model: LoadedModel, tokens: int, forced: Optional[int], limits: ServerLimits):
    """422 before any work for /attention weights that could exceed ``max_answer_values``: every
    layer and head of a Transformer, encoder S x S, decoder T x T and cross T x S, where S is the
    source tokens + 1 and T the forced translation's tokens + 1, or else the output length limit."""
    m, dc = model.translator.config.model, model.translator.config.decoding
    source = tokens + 1  # + 1: the end of sentence
    [output] = (
        max_output_lengths(torch.tensor([source]), dc.max_length_ratio, dc.max_length_offset)
        if forced is None
        else [forced]
    )
    output += 1  # the end of sentence
    bound = m.heads * (m.encoder_layers * source * source + m.decoder_layers * (output * output + output * source))
    if bound > limits.max_answer_values:
        raise HTTPException(
            422,
            f"the answer could hold up to {bound} attention weights ({m.encoder_layers} encoder "
            f"and {m.decoder_layers} decoder layers x {m.heads} heads, {source} source and up to "
            f"{output} output tokens); the limit is {limits.max_answer_values}: send a shorter "
            "text (or translation)",
        )


REDUCE_TRANSLATION = 'ask for "attention": false, a smaller n_best, or fewer or shorter texts'


def count_values(result) -> int:
    """The numbers in a result (numpy arrays, lists, dicts, dataclasses): what its answer's size grows with."""
    if isinstance(result, np.ndarray):
        return result.size
    if isinstance(result, (list, tuple)):
        return sum(map(count_values, result))
    if isinstance(result, dict):
        return sum(map(count_values, result.values()))
    if is_dataclass(result):
        return sum(count_values(getattr(result, f.name)) for f in fields(result))
    return int(isinstance(result, (int, float)))


async def answer(schema: type[Answer], result, limits: ServerLimits, reduce: str, **given) -> Response:
    """``respond(schema, result, **given)`` as JSON; 422 if it would hold more than ``max_answer_values``
    numbers (saying what to ``reduce``). Made in a worker thread: a large answer must not hold the
    event loop, which keeps every other request's time limit."""
    values = count_values(result)
    if values > limits.max_answer_values:
        raise HTTPException(
            422,
            f"the answer would hold {values} numbers (attention weights and vectors); the "
            f"limit is {limits.max_answer_values}: {reduce}",
        )

    def build() -> bytes:
        return respond(schema, result, **given).model_dump_json().encode()

    return Response(await anyio.to_thread.run_sync(build), media_type="application/json")


# POST handlers: the body is one of schemas.request_models; ``deadline`` (time.monotonic()) is when
# the request's time limit passes, counted from its arrival. No docstring where /docs has no
# description (a docstring becomes the endpoint's description).


async def translate(body, model: LoadedModel, limits: ServerLimits, deadline: float) -> Response:
    # Through the model's batcher: decoded together with concurrent requests.
    heads = heads_of(model, body)  # (422 for a model without heads: an RNN, a speech model)
    if body.audio is not None or model.inputs == "audio":
        if body.align:
            raise HTTPException(
                422,
                '"align" links the words of a text and of its translation: a speech model has '
                'no source words (its attention over the audio is in "attention")',
            )
        translations = await transcribe(body, model, limits, deadline)
        return await answer(
            TranslateResponse,
            {"translations": translations},
            limits,
            model=model.name,
            reduce='ask for "attention": false, a smaller n_best, or fewer or shorter sound files',
        )
    texts = [body.text] if isinstance(body.text, str) else list(body.text)
    sampling = None if body.sampling is None else Sampling(**body.sampling.model_dump())
    if sampling is not None:  # (the request's beam, if any, is 1: its schema checked it)
        beam = 1
    else:
        beam = body.beam if body.beam is not None else min(model.translator.config.decoding.beam, limits.max_beam)
    if body.n_best > beam:
        raise HTTPException(422, f"n_best ({body.n_best}) cannot exceed the beam size ({beam})")
    single = isinstance(body.text, str)
    tokens = check_tokens(model, texts, limits, single, tag=body.tag)
    prefixes = None if body.prefix is None else [body.prefix] if single else list(body.prefix)
    forced = [0] * len(texts) if prefixes is None else check_prefixes(model, prefixes, limits, single)
    phrases, needed = constraints_of(model, body, texts, limits)
    # a prefix or constraints may make an output longer than its source's limit
    steps = [max(n, p, c) for n, p, c in zip(tokens, forced, needed)]
    check_work(steps, beam, limits)
    if body.attention:
        check_matrices(model, tokens, body.n_best, limits, prefixes or [""] * len(texts), needed)
    translations = await model.batcher.translate(
        texts, steps, beam, body.n_best, deadline, sampling, prefixes, phrases, body.tag, tuple(heads)
    )
    if body.align:  # before the attention may be dropped; an aligner is a model: in the worker thread
        align_outputs = model.translator.align_outputs
        translations = (
            await model.run(align_outputs, translations, deadline=deadline)
            if model.translator.aligner
            else align_outputs(translations)
        )
    if not body.attention:  # dropped before the answer is made: the matrices are most of its work
        translations = [replace(t, candidates=[replace(c, attention=None) for c in t.candidates]) for t in translations]
    return await answer(
        TranslateResponse, {"translations": translations}, limits, model=model.name, reduce=REDUCE_TRANSLATION
    )


async def trace(body, model: LoadedModel, limits: ServerLimits, deadline: float) -> Response:
    if body.audio is not None or model.inputs == "audio":
        result = await trace_audio(body, model, limits, deadline)
    else:
        check_work(with_prefix(model, body, limits), 1, limits)
        result = await model.run(
            partial(
                model.translator.trace,
                body.text,
                body.top_k,
                stop=stop_at(deadline),
                prefix=body.prefix or "",
                tag=body.tag or "",
            ),
            deadline=deadline,
        )
    return await answer(TraceResponse, result, limits, model=model.name, reduce="send a shorter text")


async def beam_tree(body, model: LoadedModel, limits: ServerLimits, deadline: float) -> Response:
    """The beam search tree of one sentence: every candidate looked at, kept, finished or pruned."""
    phrases, [needed] = constraints_of(model, body, [body.text], limits)
    check_work([max(*with_prefix(model, body, limits), needed)], body.beam, limits)
    translation, nodes = await model.run(
        partial(
            model.translator.beam_tree,
            body.text,
            body.beam,
            stop=stop_at(deadline),
            prefix=body.prefix or "",
            tag=body.tag or "",
            constraints=None if phrases is None else phrases[0],
        ),
        deadline=deadline,
    )
    return await answer(
        BeamResponse,
        {"source_tokens": translation.source_tokens, "nodes": nodes, "translation": translation},
        limits,
        model=model.name,
        reduce="send a shorter text or ask for a smaller beam",
    )


async def attention(body, model: LoadedModel, limits: ServerLimits, deadline: float) -> Response:
    """Every attention weight of a Transformer for one sentence and its translation (or the
    ``translation`` given): encoder self-, decoder self- and cross-attention of every layer and
    head, as ``Translator.attention`` computes them. An RNN model is a 422: its one attention
    matrix is the ``attention`` of /translate (and each step's weights are in /trace)."""
    if model.translator.config.model.type != "transformer":
        raise HTTPException(
            422,
            f"/attention gives the layers and heads of Transformer models; '{model.name}' "
            "is an RNN model: its attention matrix is the 'attention' of /translate",
        )
    if getattr(model.translator, "ensembled", None):
        raise HTTPException(
            422,
            f"/attention gives one Transformer's layers and heads; '{model.name}' is an "
            "ensemble: serve a member alone for them (its mean attention is the 'attention' "
            "of /translate)",
        )
    tokens = check_tokens(model, [body.text], limits, single=True, tag=body.tag)
    heads = heads_of(model, body)
    if body.translation is None:  # translated first, with the model's beam
        check_work(tokens, model.translator.config.decoding.beam, limits)
        forced = None
    else:
        [forced] = check_tokens(model, [body.translation], limits, single=True, field="translation", side="tgt")
    check_attention_maps(model, tokens[0], forced, limits)
    maps = await model.run(
        call_masked,
        model.translator.model,
        heads,
        partial(model.translator.attention, body.text, body.translation, body.tag or ""),
        deadline=deadline,
    )
    return await answer(
        AttentionResponse, maps, limits, model=model.name, reduce="send a shorter text (or translation)"
    )


async def saliency(body, model: LoadedModel, limits: ServerLimits, deadline: float) -> Response:
    """Which source pieces each output piece depends on, by gradients: how much each source piece's
    embedding moves the output piece's log-probability (gradient x input, rows summing to 1), beside
    the attention of the same forced pass: two readings of where an output word comes from
    (`attnmt align --saliency`). One backward pass per output piece."""
    if model.inputs != "text" or getattr(model.translator, "ensembled", None):
        raise HTTPException(
            422,
            f"/saliency reads the gradients of one translation model; '{model.name}' is "
            f"{'an ensemble' if model.inputs == 'text' else model.translator.what}",
        )
    tokens = check_tokens(model, [body.text], limits, single=True)
    if body.translation is None:  # translated first, with the model's beam
        check_work(tokens, model.translator.config.decoding.beam, limits)
    else:
        forced = check_tokens(model, [body.translation], limits, single=True, field="translation", side="tgt")
        check_work(forced, 1, limits)
    result = await model.run(saliency_view, model.translator, body.text, body.translation, deadline=deadline)
    return await answer(
        SaliencyResponse, result, limits, model=model.name, reduce="send a shorter text (or translation)"
    )


def saliency_view(translator, text: str, translation: Optional[str]) -> dict:
    """One sentence's saliency beside its attention: the translation read (``translation``, or the
    model's own), its pieces and the source's (each ending in "</s>"), both T x S matrices."""
    if translation is None:
        translation = translator.translate([text])[0].text
    [matrix] = saliency_matrices(translator, [text], [translation])
    [attention] = force_attention(translator, [text], [translation])
    [source_tokens], [tokens] = piece_lists(translator, [text], [translation])
    return {
        "translation": translation,
        "source_tokens": source_tokens,
        "tokens": tokens,
        "saliency": matrix,
        "attention": attention,
    }


async def score(body, model: LoadedModel, limits: ServerLimits, deadline: float) -> Response:
    """How probable the model finds a given translation of each text (forced decoding, as `attnmt
    score` and Translator.score compute it): the log-probability of every token of the translation
    and their sum. Low scores per token point at pairs that are not translations of each other."""
    single = isinstance(body.text, str)
    texts, translations = ([body.text], [body.translation]) if single else (list(body.text), list(body.translation))
    tokens = check_tokens(model, texts, limits, single, tag=body.tag)
    forced = check_tokens(model, translations, limits, single, field="translation", side="tgt")
    asked = work([s + t for s, t in zip(tokens, forced)], 1)  # one pass over both sides: less than a search's
    if asked > limits.max_work:
        raise HTTPException(
            422,
            f"the request asks for {asked} units of work (subword tokens of each text and of its "
            f"translation + 1, summed); the limit is {limits.max_work}: send fewer or shorter "
            "texts",
        )
    scored = await model.run(partial(model.translator.score, texts, translations, tag=body.tag), deadline=deadline)
    return await answer(
        ScoreResponse, {"scores": scored}, limits, model=model.name, reduce="send fewer or shorter texts"
    )


async def classify(body, model: LoadedModel, limits: ServerLimits, deadline: float) -> ClassifyResponse:
    """A sentence pair through a sentence-pair model (task: pairs): label, probabilities and the
    attention between the two sentences in both softmax directions."""
    check_tokens(model, [body.premise], limits, single=True, field="premise")
    check_tokens(model, [body.hypothesis], limits, single=True, field="hypothesis")
    [result] = await model.run(model.translator.classify, [(body.premise, body.hypothesis)], deadline=deadline)
    return ClassifyResponse(
        model=model.name,
        label=result.label,
        probabilities=result.probabilities,
        premise_tokens=result.premise_tokens,
        hypothesis_tokens=result.hypothesis_tokens,
        premise_attention=result.premise_attention.tolist(),
        hypothesis_attention=result.hypothesis_attention.tolist(),
    )


def model_routes(limits: ServerLimits) -> APIRouter:
    """The POST endpoints of an app with these limits, which their request models carry. Their
    bodies are read by StrictJSONRoute: any body that is not UTF-8 JSON is a 422."""
    requests = request_models(limits)
    routes = APIRouter(route_class=StrictJSONRoute)
    for path, handler, request, response in (
        ("/translate", translate, requests.translate, TranslateResponse),
        ("/trace", trace, requests.trace, TraceResponse),
        ("/beam", beam_tree, requests.beam, BeamResponse),
        ("/attention", attention, requests.attention, AttentionResponse),
        ("/score", score, requests.score, ScoreResponse),
        ("/saliency", saliency, requests.saliency, SaliencyResponse),
        ("/classify", classify, requests.classify, ClassifyResponse),
    ):
        routes.add_api_route(
            path, _endpoint(handler, request), methods=["POST"], response_model=response, responses=ERRORS
        )
    return routes


WRONG_ENDPOINT = {  # by what the model's requests carry: what it does, where to ask
    "pairs": "'{name}' is a sentence-pair classifier: use /classify",
    "text": "/classify is for sentence-pair models; '{name}' is a translation model: use /translate",
    "audio": "/classify is for sentence-pair models; '{name}' is a speech model (it transcribes audio): use "
    "/translate or /trace with audio",
}


def _endpoint(handler, request_model):
    """``handler`` as a FastAPI endpoint taking a body of ``request_model``."""

    async def endpoint(request: Request, body: request_model, models: Models, limits: Limits):
        deadline = getattr(request.state, "arrived", time.monotonic()) + limits.timeout
        model = find_model(models, body.model)
        if (model.inputs == "pairs") != (handler is classify):
            raise HTTPException(422, WRONG_ENDPOINT[model.inputs].format(name=model.name))
        return await handler(body, model, limits, deadline)

    endpoint.__name__, endpoint.__doc__ = handler.__name__, handler.__doc__  # for /docs
    return endpoint
