"""The bodies of requests and answers, as pydantic models: what /docs shows.

Answers are read from the results of ``attnmt.api.Translator`` (``Translation`` and ``Candidate``,
``DecodingTrace`` and ``StepTrace``, the nodes of ``beam_tree``, the dict of ``attention``): field by
name, nested dataclasses included (``from_attributes``), numpy arrays made lists by the field types
``Vector``, ``Matrix`` and ``Weights``. So a new field of a result is one line in its model here.

Requests forbid unknown fields and carry the server's limits as Field constraints (so /docs shows
them): they are built for each app, by ``request_models``.
"""

# No ``from __future__ import annotations``: the request models are built inside a function, from
# its local types, which pydantic must see as objects rather than strings.

from functools import partial
from typing import Annotated, Any, Literal, NamedTuple, Optional, TypeVar, Union

import numpy as np
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag, model_validator

from attnmt.core.config import MAX_CONSTRAINTS, MAX_SEED, MAX_TEMPERATURE, MAX_TOP_K, MIN_SHAPING
from attnmt.core.data_sections import TAG_PATTERN
from attnmt.serve.limits import ServerLimits, base64_length
from attnmt.serve.request_checks import (
    constraints_for_each_text,
    not_blank,
    prefix_for_each_text,
    sampling_draws_one,
    tag_for_each_text,
    text_kind,
    text_or_audio,
    translation_for_each_text,
)
from attnmt.speech.audio import SAMPLE_RATES


def _listed(array) -> list:
    """A numpy array (float32 from the model) as nested lists of Python floats."""
    return np.asarray(array, dtype=np.float64).tolist()


def _rounded(array) -> list:
    """Attention weights rounded to 6 decimals: the float32 values to within 5e-7, in a third of
    the JSON (the matrices of a long sentence, and all layers and heads, run to millions of numbers)."""
    return np.round(np.asarray(array, dtype=np.float64), 6).tolist()


Vector = Annotated[list[float], BeforeValidator(_listed)]
Matrix = Annotated[list[list[float]], BeforeValidator(_listed)]
WeightMatrix = Annotated[list[list[float]], BeforeValidator(_rounded)]
Weights = Annotated[list[list[list[list[float]]]], BeforeValidator(_rounded)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Request(Strict):
    """A request body. Strict: a value of the wrong type is a 422, never converted ("0.5" or true for
    a number, 1 for a boolean), and neither are numbers beyond a float's range (1e999)."""

    model_config = ConfigDict(strict=True, allow_inf_nan=False)


class Answer(Strict):
    """An answer, which may be read from the attributes of a result dataclass."""

    model_config = ConfigDict(from_attributes=True)


A = TypeVar("A", bound=Answer)


def respond(schema: type[A], result: Any, **given) -> A:
    """``schema`` filled from ``result`` (a result dataclass, or a dict), field by field by name,
    with ``given`` for what the result does not hold (the model's name)."""
    read = result.__getitem__ if isinstance(result, dict) else partial(getattr, result)
    return schema.model_validate({name: given[name] if name in given else read(name) for name in schema.model_fields})


# ---------------------------------------------------------------------------------------------
# Answers


class ErrorResponse(Strict):
    detail: str = Field(description="what is wrong, readable")
    errors: Optional[list[dict[str, Any]]] = Field(
        None, description="422 only: one entry per invalid field, with loc, msg and type"
    )


class HealthResponse(Strict):
    status: Literal["ok"]
    models: list[str]


class ModelInfo(Strict):
    """What a model is. The RNN fields are null for a Transformer and the Transformer fields null
    for an RNN, so that a client reads the fields of the model's ``type``."""

    name: str = Field(
        description="the model's name (its folder's name, or NAME of `attnmt serve NAME=DIR`); the `model` of requests"
    )
    task: Literal["translation", "speech", "pairs"] = Field(
        "translation",
        description="speech: the model transcribes audio (`audio` of /translate and /trace); "
        "pairs: a sentence-pair classifier (/classify)",
    )
    type: Literal["rnn", "transformer", "decomposable"] = Field(
        description="rnn: encoder-decoder RNN with one attention; transformer: layers of multi-head attention "
        "(/attention); decomposable: a sentence-pair classifier (/classify; the other fields null or 0)"
    )
    attention: Optional[str] = Field(
        description="RNN: none | bahdanau | luong-dot | luong-general | luong-concat | location | coverage; "
        "Transformer: 'multi-head'"
    )
    rnn_type: Optional[str] = Field(description="RNN only: gru | lstm")
    input_feeding: Optional[bool] = Field(description="RNN only")
    local_attention: Optional[Literal["none", "local-m", "local-p"]] = Field(
        None,
        description="RNN only: Luong et al.'s local attention (each step within local_window source "
        "positions of t, local-m, or of a predicted position, local-p); none: global",
    )
    local_window: Optional[int] = Field(None, description="RNN with local attention only: D, the window's half-width")
    attention_normalizer: Optional[Literal["softmax", "sparsemax", "entmax15", "csparsemax"]] = Field(
        None,
        description="RNN with attention, or decomposable: what turns the scores into weights: softmax, or "
        "sparsemax (Martins & Astudillo 2016) or 1.5-entmax (Peters et al. 2019), which give "
        "exact zeros; RNN also csparsemax (Malaviya et al. 2018): sparsemax with each source "
        "word's attention over the output at most fertility_bound",
    )
    fertility_bound: Optional[float] = Field(
        None,
        description="RNN with csparsemax attention only: the most attention a source word may receive over "
        "the whole output (the last source position, </s>, unbounded)",
    )
    coverage_fertility: Optional[int] = Field(
        None,
        description="RNN with coverage attention only: N of Tu et al.'s fertility N sigmoid(u_f h_j), which "
        "divides each source word's coverage (0: the plain sum of its past weights)",
    )
    coverage_dim: Optional[int] = Field(
        None,
        description="RNN with coverage attention only: d of Tu et al.'s NN-based coverage, a vector per source "
        "word that a GRU updates at each step (0: linguistic coverage, the sum of the past weights)",
    )
    decoder_hidden: Optional[int] = Field(description="RNN only: size of the decoder state")
    d_model: Optional[int] = Field(description="Transformer only: model width")
    heads: Optional[int] = Field(description="Transformer only: attention heads per layer")
    encoder_layers: int
    decoder_layers: int
    feed_forward: Optional[int] = Field(description="Transformer only: inner size of the feed-forward layers")
    norm: Optional[Literal["pre", "post"]] = Field(description="Transformer only: LayerNorm placement")
    beam: int = Field(description="default beam size of /translate for this model")
    length_penalty: Optional[float] = Field(None, description="alpha of the length penalty its searches rank with")
    coverage_penalty: Optional[float] = Field(
        None, description="beta of the coverage penalty its searches rank with (0: none)"
    )
    labels: Optional[list[str]] = Field(None, description="sentence-pair models only: the classes of /classify")
    ensemble: Optional[list[str]] = Field(
        None,
        description="the other models this one decodes with, by folder name (`attnmt serve --ensemble`): "
        "each step's distribution is the mean of all; /attention, which reads one model's "
        "layers, answers 422",
    )
    tags: Optional[list[str]] = Field(
        None,
        description="translation models: the tags it was trained with (data.extra_train's), which the `tag` "
        "of a request puts before its sources; [] for none",
    )
    word_links: Optional[Literal["aligner", "guided_attention", "attention"]] = Field(
        None,
        description='translation models only: where the links of "align": true come from: "aligner", an '
        "alignment layer trained on this model (MODEL/aligner, attnmt train-aligner); "
        '"guided_attention", the layer and heads of a Transformer that guided alignment trained, '
        'read by forcing each output through the model; or "attention", the attention of the search',
    )


class CandidateOut(Answer):
    text: str
    tokens: list[str] = Field(description="output subword pieces, ending in '</s>' when the model produced it")
    score: float = Field(
        description="log-probability / length penalty (+ the coverage penalty of the model's decoding settings)"
    )
    attention: Optional[WeightMatrix] = Field(
        description="len(tokens) x len(source_tokens), rows sum to 1, rounded to 6 decimals; null without "
        "attention or when not asked"
    )
    alignment: Optional[list[tuple[int, int]]] = Field(
        None,
        description='with "align": true, the word links of this output as [i, j] pairs: source word i, output '
        "word j, both 0-based, counting whitespace-separated words, '</s>' left out; from the "
        "model's aligner if it has one (its word_links in /models), else each output word linked "
        "to the source word it attends to most (null without either)",
    )


class TranslationOut(Answer):
    source: str
    source_tokens: list[str] = Field(description="source subword pieces, ending in '</s>'")
    candidates: list[CandidateOut] = Field(description="n-best list, best first")


class TranslateResponse(Answer):
    model: str
    translations: list[TranslationOut] = Field(description="one per input text, in order")


class StepOut(Answer):
    token: str = Field(description="the token chosen at this step (greedy)")
    probability: float
    scores: Optional[Vector] = Field(
        description="attention scores e_j before the normalizer (one per source token; "
        "null outside a local attention's window)"
    )
    weights: Optional[Vector] = Field(
        description="attention weights a_j = normalizer(e)_j (the response's "
        "`normalizer`: softmax, or sparsemax or entmax15, whose "
        "weights are exactly 0 outside their support)"
    )
    context: Vector = Field(description="context vector c_t = sum_j a_j h_j")
    state: Vector = Field(description="decoder state s_t (top layer)")
    top_k: list[tuple[str, float]] = Field(description="most probable next tokens with their probabilities")
    constrained: bool = Field(
        False,
        description="the token was chosen by the request's prefix (its token, or a "
        "piece spelling its last word), not as the most probable; "
        "probability and top_k stay the model's own",
    )


class TraceResponse(Answer):
    model: str
    source: str
    source_tokens: list[str]
    text: str = Field(description="the greedy translation")
    tokens: list[str]
    encoder_states: Matrix = Field(description="one row h_j per source token")
    steps: list[StepOut]
    features: Optional[Matrix] = Field(
        None, description="speech: the log-mel features, one row of mel bins per frame (the spectrogram)"
    )
    frames_per_state: Optional[int] = Field(None, description="speech: feature frames per encoder state")
    hop_ms: Optional[float] = Field(None, description="speech: milliseconds between two frames")
    normalizer: Optional[Literal["softmax", "sparsemax", "entmax15", "csparsemax"]] = Field(
        None,
        description="what made each step's weights of its scores (the model's attention_normalizer); "
        "null where steps have no scores (a Transformer, or no attention)",
    )


class BeamNodeOut(Answer):
    id: int = Field(description="index of the node in `nodes`")
    parent: Optional[int] = Field(description="id of the node it extends; null for the root")
    token: str = Field(description="the subword piece this candidate appends ('<s>' for the root)")
    log_prob: float = Field(description="log-probability of the whole prefix")
    step: int = Field(description="output position: 0 for the root, 1 for the first token")
    status: Literal["root", "kept", "finished", "pruned"] = Field(
        description="kept: stayed in the beam; finished: ended in '</s>'; pruned: fell out of the beam"
    )
    met: Optional[int] = Field(
        None,
        description="with constraints: how many of their tokens the hypothesis has "
        "written (its bank in dynamic beam allocation); else null",
    )


class BeamResponse(Answer):
    model: str
    source_tokens: list[str]
    nodes: list[BeamNodeOut] = Field(description="every candidate the beam search looked at, the root first")
    translation: TranslationOut = Field(description="the final hypotheses, best first (up to beam of them)")


class AttentionResponse(Answer):
    model: str
    source_tokens: list[str] = Field(description="S source pieces, ending in '</s>'")
    tokens: list[str] = Field(description="T output pieces (the translation, or the forced one)")
    decoder_tokens: list[str] = Field(description="T decoder inputs: '<s>' and tokens[:-1]")
    encoder: Weights = Field(
        description="encoder self-attention [layer][head][source query][source key], S x S per head"
    )
    decoder: Weights = Field(
        description="masked decoder self-attention [layer][head][output][decoder input], T x T per head; "
        "0 above the diagonal"
    )
    cross: Weights = Field(description="cross-attention [layer][head][output][source], T x S per head")


class SaliencyResponse(Answer):
    model: str
    translation: str = Field(description="the translation read (the one given, or the model's)")
    source_tokens: list[str] = Field(description="S source pieces, ending in '</s>'")
    tokens: list[str] = Field(description="T output pieces, ending in '</s>'")
    saliency: WeightMatrix = Field(
        description="T x S: how much each source piece's embedding moves each output "
        "piece's log-probability (|gradient . embedding|), rows summing to 1"
    )
    attention: WeightMatrix = Field(
        description="T x S: the attention of the same forced pass (a Transformer's last "
        "layer, heads averaged), for comparison"
    )


class ScoreOut(Answer):
    source: str
    translation: str
    tokens: list[str] = Field(description="the translation's subword pieces, ending in '</s>'")
    log_probs: Vector = Field(description="log p(token | the tokens before it, source) of each token, natural log")
    log_prob: float = Field(description="their sum: log p(translation | source), without length penalty")
    per_token: float = Field(description="log_prob / len(tokens): scores of different lengths compare")
    perplexity: float = Field(description="exp(-per_token)")


class ScoreResponse(Answer):
    model: str
    scores: list[ScoreOut] = Field(description="one per pair, in order")


class ClassifyResponse(Strict):
    """A sentence pair through the decomposable attention model: its label and probabilities, and
    the attention matrices (rows: premise tokens, columns: hypothesis tokens) in both directions."""

    model: str
    label: str
    probabilities: dict[str, float] = Field(description="of every class, in the model's order")
    premise_tokens: list[str]
    hypothesis_tokens: list[str]
    premise_attention: list[list[float]] = Field(
        description="softmax (or the model's attention_normalizer) over the hypothesis: each row sums to 1"
    )
    hypothesis_attention: list[list[float]] = Field(
        description="softmax (or the model's attention_normalizer) over the premise: each column sums to 1"
    )


# ---------------------------------------------------------------------------------------------
# Requests


class RequestModels(NamedTuple):
    translate: type[Request]
    trace: type[Request]
    beam: type[Request]
    attention: type[Request]
    classify: type[Request]
    score: type[Request]
    saliency: type[Request]


class SamplingIn(Request):
    """Each translation drawn from the model instead of searched for (attnmt.core.config.Sampling, whose
    ranges these are)."""

    top_k: int = Field(0, ge=0, le=MAX_TOP_K, description="draw among the K most probable tokens of each step (0: all)")
    top_p: float = Field(
        1.0, ge=MIN_SHAPING, le=1, description="... then among the fewest whose probability reaches P (1: all)"
    )
    temperature: float = Field(1.0, ge=MIN_SHAPING, le=MAX_TEMPERATURE, description="divide the log-probabilities by T")
    seed: Optional[int] = Field(
        None, ge=0, le=MAX_SEED, description="the same seed and request give the same outputs; none: a new draw"
    )


# A model's name as `attnmt serve` gives it (attnmt.serve.models.valid_name): any other string names no
# model, and is a 422 here rather than a 404 whose message repeats it (a lone surrogate, "\udc80", could
# not be written in the 404's JSON: a 500)
MODEL_NAME = r"^[A-Za-z0-9._-]{1,100}$"
ModelName = Optional[Annotated[str, Field(pattern=MODEL_NAME)]]
MODEL_FIELD = Field(None, description="model name (see /models); default: the first model")
HeadList = Annotated[str, Field(max_length=2000, pattern=r"^[a-z0-9., ]*$")]
HEADS_FIELD = Field(
    None,
    description="a Transformer's attention heads to switch off for this request, as "
    "KIND.LAYER.HEAD separated by commas (KIND encoder, decoder or cross; from 0), "
    'e.g. "cross.1.0,encoder.2.3": what the model does without them',
)
PREFIX_OF_ONE = 'the start of the output ("" or null: none), as the prefix of /translate: the search continues it'
# One tag of the model's (/models: tags) before every source of a request
SourceTag = Annotated[str, Field(pattern=TAG_PATTERN)]
TAG_FIELD = Field(
    None,
    description="a tag the model was trained with (/models: tags; data.extra_train's), put "
    "before every source: its outputs then follow that corpus (a domain, a style)",
)


def tags_type(limits: ServerLimits):
    """One tag (every text's), or a list of them (null: none) for a list of texts."""
    return Optional[
        Union[SourceTag, Annotated[list[Optional[SourceTag]], Field(min_length=1, max_length=limits.max_sentences)]]
    ]


TAGS_FIELD = Field(
    None,
    description="a tag the model was trained with (/models: tags; data.extra_train's), put "
    "before every source: its outputs then follow that corpus (a domain, a style); "
    "for a list of texts, one tag for all or a list as long (null: none)",
)


def request_models(limits: ServerLimits) -> RequestModels:
    """The request bodies, with the limits as Field constraints (so /docs shows them)."""
    Sentence = Annotated[str, Field(min_length=1, max_length=limits.max_chars), AfterValidator(not_blank)]
    Sentences = Annotated[
        Union[
            Annotated[Sentence, Tag("text")],
            Annotated[list[Sentence], Field(min_length=1, max_length=limits.max_sentences), Tag("list")],
        ],
        Discriminator(
            text_kind, custom_error_type="text_type", custom_error_message="text must be a string or a list of strings"
        ),
    ]
    return RequestModels(
        *_requests_of_text_or_audio(limits, Sentence, Sentences), *_requests_of_text(limits, Sentence, Sentences)
    )


def _sentences(limits: ServerLimits) -> str:
    return (
        f"one sentence, or a list of 1 to {limits.max_sentences} sentences; each 1 to {limits.max_chars} "
        "characters, not only whitespace"
    )


def _requests_of_text_or_audio(limits: ServerLimits, Sentence, Sentences) -> tuple[type[Request], type[Request]]:
    """/translate and /trace, which take text or, for a speech model, audio."""
    Prefix = Annotated[str, Field(max_length=limits.max_chars)]  # "" is no prefix
    Phrases = Annotated[
        list[Annotated[str, Field(min_length=1, max_length=limits.max_chars), AfterValidator(not_blank)]],
        Field(max_length=MAX_CONSTRAINTS),
    ]
    Audio = Annotated[str, Field(min_length=1, max_length=base64_length(limits.max_audio_bytes))]
    audio_field = Field(
        None,
        description=f"speech models: a sound file (WAV, FLAC, ...) in base64, at most "
        f"{limits.max_audio_bytes:,} bytes (decoded) and "
        f"{limits.max_audio_seconds:g} s, at {SAMPLE_RATES[0]:,} to "
        f"{SAMPLE_RATES[1]:,} Hz; instead of text",
    )

    class TranslateRequest(Request):
        text: Sentences = Field(None, description=_sentences(limits))
        audio: Optional[Union[Audio, Annotated[list[Audio], Field(min_length=1, max_length=limits.max_sentences)]]] = (
            audio_field
        )
        model: ModelName = MODEL_FIELD
        beam: Optional[int] = Field(
            None, ge=1, le=limits.max_beam, description="beam size (1 = greedy); default: the model's"
        )
        n_best: int = Field(1, ge=1, le=limits.max_beam, description="candidates per sentence, at most beam")
        attention: bool = Field(True, description="include the attention matrices")
        align: bool = Field(False, description="include each output's word links (text models)")
        sampling: Optional[SamplingIn] = Field(
            None,
            description="draw each translation from the model (as for "
            "back-translation) instead of the beam search; "
            "beam and n_best 1",
        )
        prefix: Optional[
            Union[Prefix, Annotated[list[Prefix], Field(min_length=1, max_length=limits.max_sentences)]]
        ] = Field(
            None,
            description="the start of each text's translation, as text gives them (a string, or a list "
            'as long; "": none): the search continues it (interactive translation)',
        )
        constraints: Optional[
            Union[Phrases, Annotated[list[Phrases], Field(min_length=1, max_length=limits.max_sentences)]]
        ] = Field(
            None,
            description=f"words or phrases each translation must contain (up to {MAX_CONSTRAINTS} per "
            "text): a list of them for a string text, a list as long of such lists for a "
            "list ([]: none); beam search with dynamic beam allocation",
        )
        tag: tags_type(limits) = TAGS_FIELD
        mask_heads: Optional[HeadList] = HEADS_FIELD
        one_source = model_validator(mode="after")(text_or_audio)
        draws_one = model_validator(mode="after")(sampling_draws_one)
        prefix_each = model_validator(mode="after")(prefix_for_each_text)
        constraints_each = model_validator(mode="after")(constraints_for_each_text)
        tag_each = model_validator(mode="after")(tag_for_each_text)

    class TraceRequest(Request):
        text: Optional[Sentence] = Field(None, description=f"one sentence of 1 to {limits.max_chars} characters")
        audio: Optional[Audio] = audio_field
        model: ModelName = MODEL_FIELD
        top_k: int = Field(5, ge=1, le=limits.max_top_k, description="next-token candidates per step")
        prefix: Optional[Prefix] = Field(None, description=PREFIX_OF_ONE)
        tag: Optional[SourceTag] = TAG_FIELD
        one_source = model_validator(mode="after")(text_or_audio)
        prefix_each = model_validator(mode="after")(prefix_for_each_text)
        tag_each = model_validator(mode="after")(tag_for_each_text)

    return TranslateRequest, TraceRequest


def _requests_of_text(limits: ServerLimits, Sentence, Sentences) -> tuple[type[Request], ...]:
    """/beam, /attention, /classify, /score and /saliency, which take text only."""

    class BeamRequest(Request):
        text: Sentence = Field(description=f"one sentence of 1 to {limits.max_chars} characters")
        model: ModelName = MODEL_FIELD
        beam: int = Field(5, ge=1, le=limits.max_beam, description="beam size")
        prefix: Optional[Annotated[str, Field(max_length=limits.max_chars)]] = Field(None, description=PREFIX_OF_ONE)
        tag: Optional[SourceTag] = TAG_FIELD
        constraints: Optional[
            Annotated[
                list[Annotated[str, Field(min_length=1, max_length=limits.max_chars), AfterValidator(not_blank)]],
                Field(max_length=MAX_CONSTRAINTS),
            ]
        ] = Field(
            None,
            description=f"words or phrases every hypothesis must contain (up to {MAX_CONSTRAINTS}), as the "
            "constraints of /translate: the tree of dynamic beam allocation, each node with its "
            "bank (met)",
        )

    class AttentionRequest(Request):
        text: Sentence = Field(description=f"one sentence of 1 to {limits.max_chars} characters")
        model: ModelName = MODEL_FIELD
        translation: Optional[Sentence] = Field(
            None,
            description="a target text whose attention to show (forced decoding); "
            "default: the model's translation (beam of its config)",
        )
        tag: Optional[SourceTag] = TAG_FIELD
        mask_heads: Optional[HeadList] = HEADS_FIELD

    class ClassifyRequest(Request):
        premise: Sentence = Field(description=f"1 to {limits.max_chars} characters")
        hypothesis: Sentence = Field(description=f"1 to {limits.max_chars} characters")
        model: ModelName = MODEL_FIELD

    class ScoreRequest(Request):
        text: Sentences = Field(description=_sentences(limits))
        translation: Sentences = Field(
            description="a translation of each text, as text gives them (a string, or a list as long)"
        )
        model: ModelName = MODEL_FIELD
        tag: tags_type(limits) = TAGS_FIELD
        one_each = model_validator(mode="after")(translation_for_each_text)
        tag_each = model_validator(mode="after")(tag_for_each_text)

    class SaliencyRequest(Request):
        text: Sentence = Field(description=f"one sentence of 1 to {limits.max_chars} characters")
        model: ModelName = MODEL_FIELD
        translation: Optional[Sentence] = Field(
            None,
            description="a target text to read (forced decoding); default: the model's translation (beam of its "
            "config)",
        )

    return BeamRequest, AttentionRequest, ClassifyRequest, ScoreRequest, SaliencyRequest
