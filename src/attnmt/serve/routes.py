"""The endpoints of the API.

The models and the limits of the app come in as FastAPI dependencies. A POST handler is a plain
function of (request body, model, limits): ``model_routes`` declares it for the app's request
models (they carry its limits), validating the body and finding the model it names first. A new
endpoint is a handler here, a line in ``model_routes`` and its request and answer in schemas.py.
"""

from dataclasses import replace
from typing import Annotated, Optional

from fastapi import APIRouter, Depends, HTTPException, Request

from attnmt.serve.audio import trace_audio, transcribe
from attnmt.serve.limits import ServerLimits
from attnmt.serve.models import LoadedModel
from attnmt.serve.schemas import (AttentionResponse, BeamResponse, ErrorResponse, HealthResponse, ModelInfo,
                                  TraceResponse, TranslateResponse, request_models, respond)


def _models(request: Request) -> dict[str, LoadedModel]:
    return request.app.state.models


def _limits(request: Request) -> ServerLimits:
    return request.app.state.limits


Models = Annotated[dict[str, LoadedModel], Depends(_models)]
Limits = Annotated[ServerLimits, Depends(_limits)]
ERRORS = {code: {"model": ErrorResponse} for code in (404, 413, 422, 503)}

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


def check_tokens(model: LoadedModel, texts: list[str], limits: ServerLimits, single: bool, field: str = "text",
                 side: str = "src"):
    """422 for a text longer than the limit in subword tokens (the model's unit of work: its
    cost grows with them, and a character count says little about it for a BPE model)."""
    if model.translator.config.task == "speech":
        raise HTTPException(422, f"'{model.name}' is a speech model: /translate and /trace take its audio")
    subwords = model.translator.src_subwords if side == "src" else model.translator.tgt_subwords
    for i, ids in enumerate(subwords.encode(texts)):
        if len(ids) > limits.max_tokens:
            where = field if single else f"{field}[{i}]"
            raise HTTPException(422, f"{where} has {len(ids)} subword tokens; the limit is {limits.max_tokens}")


# POST handlers: the body is one of schemas.request_models. No docstring where /docs has no
# description (a docstring becomes the endpoint's description).


async def translate(body, model: LoadedModel, limits: ServerLimits) -> TranslateResponse:
    # Through the model's batcher: decoded together with concurrent requests.
    if body.audio is not None or model.translator.config.task == "speech":
        return await transcribe(body, model, limits)
    texts = [body.text] if isinstance(body.text, str) else list(body.text)
    beam = body.beam if body.beam is not None else min(model.translator.config.decoding.beam, limits.max_beam)
    if body.n_best > beam:
        raise HTTPException(422, f"n_best ({body.n_best}) cannot exceed the beam size ({beam})")
    check_tokens(model, texts, limits, single=isinstance(body.text, str))
    translations = await model.batcher.translate(texts, beam, body.n_best)
    if not body.attention:  # dropped before the answer is made: the matrices are most of its work
        translations = [replace(t, candidates=[replace(c, attention=None) for c in t.candidates])
                        for t in translations]
    return TranslateResponse(model=model.name, translations=translations)


async def trace(body, model: LoadedModel, limits: ServerLimits) -> TraceResponse:
    if body.audio is not None or model.translator.config.task == "speech":
        return await trace_audio(body, model, limits)
    check_tokens(model, [body.text], limits, single=True)
    result = await model.run(model.translator.trace, body.text, body.top_k)
    return respond(TraceResponse, result, model=model.name)


async def beam_tree(body, model: LoadedModel, limits: ServerLimits) -> BeamResponse:
    """The beam search tree of one sentence: every candidate looked at, kept, finished or pruned."""
    check_tokens(model, [body.text], limits, single=True)
    translation, nodes = await model.run(model.translator.beam_tree, body.text, body.beam)
    return BeamResponse(model=model.name, source_tokens=translation.source_tokens, nodes=nodes,
                        translation=translation)


async def attention(body, model: LoadedModel, limits: ServerLimits) -> AttentionResponse:
    """Every attention weight of a Transformer for one sentence and its translation (or the
    ``translation`` given): encoder self-, decoder self- and cross-attention of every layer and
    head, as ``Translator.attention`` computes them. An RNN model is a 422: its one attention
    matrix is the ``attention`` of /translate (and each step's weights are in /trace)."""
    if model.translator.config.model.type != "transformer":
        raise HTTPException(422, f"/attention gives the layers and heads of Transformer models; '{model.name}' "
                                 "is an RNN model: its attention matrix is the 'attention' of /translate")
    check_tokens(model, [body.text], limits, single=True)
    if body.translation is not None:
        check_tokens(model, [body.translation], limits, single=True, field="translation", side="tgt")
    maps = await model.run(model.translator.attention, body.text, body.translation)
    return respond(AttentionResponse, maps, model=model.name)


def model_routes(limits: ServerLimits) -> APIRouter:
    """The POST endpoints of an app with these limits, which their request models carry."""
    requests = request_models(limits)
    routes = APIRouter()
    for path, handler, request, response in (("/translate", translate, requests.translate, TranslateResponse),
                                             ("/trace", trace, requests.trace, TraceResponse),
                                             ("/beam", beam_tree, requests.beam, BeamResponse),
                                             ("/attention", attention, requests.attention, AttentionResponse)):
        routes.add_api_route(path, _endpoint(handler, request), methods=["POST"], response_model=response,
                             responses=ERRORS)
    return routes


def _endpoint(handler, request_model):
    """``handler`` as a FastAPI endpoint taking a body of ``request_model``."""

    async def endpoint(body: request_model, models: Models, limits: Limits):
        return await handler(body, find_model(models, body.model), limits)

    endpoint.__name__, endpoint.__doc__ = handler.__name__, handler.__doc__  # for /docs
    return endpoint
