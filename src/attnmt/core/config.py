"""Experiment configuration: one YAML file, validated field by field.

Every section is a pydantic model that forbids unknown keys, so a typo such as
``atention: bahdanau`` is an error naming the field instead of a silent default, and whose types
are strict (attnmt.core.sections.Section): ``beam: "5"`` is an error too.
Relative paths in the file are resolved against the folder of the config file.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Annotated, Literal, TypeVar

import yaml
from pydantic import (
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from attnmt.core.attention_sections import (  # noqa: F401 (re-exported)
    ATTENTION_TYPES,
    ATTENTIONS,
    FLAT_OPTIONS,
    LOCAL_ATTENTIONS,
    LUONG_SCORES,
    AttentionConfig,
    AttentionSection,
    BahdanauConfig,
    CoverageConfig,
    LocationConfig,
    LuongConfig,
    NoAttentionConfig,
    ScoredAttentionConfig,
    nested,
    of_types,
    option_default,
    types_with,
)
from attnmt.core.errors import AttnmtError
from attnmt.core.data_sections import GPU_BATCH_TOKENS, CorpusFiles, DataConfig, ExtraCorpus  # noqa: F401 (re-exported)
from attnmt.core.sections import (  # noqa: F401 (re-exported)
    FERTILITY_BOUND,
    NORMALIZERS,
    RNN_NORMALIZERS,
    SET_NAME,
    AsTuple,
    ConfigPath,
    Layers,
    Section,
    SetName,
    SubwordConfig,
    Width,
    named_sets,
)
from attnmt.core.task import TASKS
from attnmt.core.task_sections import (  # noqa: F401 (re-exported: they are imported from here)
    Column,
    EmbeddingsConfig,
    GuidedAlignment,
    PairDataConfig,
    PairFiles,
    PairModelConfig,
    SpecAugment,
    SpeechConfig,
)

S = TypeVar("S", bound=Section)


class ModelConfig(Section):
    """What the model section of every architecture has; ``type`` chooses the architecture, and
    with it the class of the section (ModelSection): RNNConfig or TransformerConfig, each with its
    own fields and checks. A field of the other type is an error naming it, but where it has that
    type's default: the model section of a config.yaml that an older attnmt wrote holds the fields
    of both types (one flat class), and a config read as a model folder's (saved) drops the other
    type's fields whatever their values, which that class left unused."""

    type: Literal["rnn", "transformer"] = "rnn"
    encoder_layers: Layers = 1
    decoder_layers: Layers = 1
    # longest sequence with learned positions (Transformer), or that luong-location attention scores (RNN)
    max_positions: int = Field(1024, gt=0, le=100_000)
    dropout: float = Field(0.3, ge=0, lt=1)
    tie_embeddings: bool = False  # target embeddings = output projection

    @model_validator(mode="before")
    @classmethod
    def fields_of_the_other_type(cls, data, info: ValidationInfo):
        if not isinstance(data, dict) or cls is ModelConfig:
            return data
        saved = bool(info.context and info.context.get("saved"))
        own = cls.field_names()
        data = {
            name: value
            for name, value in data.items()
            if name in own
            or name not in OTHER_TYPES_DEFAULTS
            or not (saved or _same(value, OTHER_TYPES_DEFAULTS[name]))
        }
        return cls.spelled_out(data, saved)

    @classmethod
    def field_names(cls) -> set[str]:
        """The names this type reads in a model section: its fields (and, RNNConfig, older spellings)."""
        return set(cls.model_fields)

    @classmethod
    def spelled_out(cls, data: dict, saved: bool) -> dict:
        """``data`` in this version's spelling (RNNConfig: the attention's options in model.attention)."""
        return data

    @model_validator(mode="after")
    def of_a_type(self):
        if type(self) is ModelConfig:
            raise ValueError("ModelConfig is what the types share: use RNNConfig or TransformerConfig")
        return self


def _same(value, default) -> bool:
    return type(value) is type(default) and value == default


class RNNConfig(ModelConfig):
    """An RNN encoder-decoder (type: rnn) with one of the attention variants."""

    type: Literal["rnn"] = "rnn"
    rnn_type: Literal["gru", "lstm"] = "gru"
    embedding_size: Width = 256
    encoder_hidden: Width = 256  # per direction
    bidirectional: bool = True
    decoder_hidden: Width = 512
    # The attention: a variant by name (bahdanau), or with its options ({type: location, kernel: 15}),
    # each variant a class of its own (attnmt.core.attention_sections)
    attention: AttentionSection = Field("bahdanau", validate_default=True)
    # the hidden size of the scorers that have one: additive (bahdanau, location, coverage), concat,
    # and local-p's predictor of p_t (a size of the model, as the others: one config can vary the variant)
    attention_size: Width = 512
    # The decoder's first state: tanh(W h_final), a summary of the source (Bahdanau et al.), or
    # zeros (as in listen-attend-spell), so that all it learns of the source comes through attention.
    decoder_init: Literal["bridge", "zeros"] = "bridge"
    init_range: float = Field(0.1, ge=0)  # uniform(-r, r) init; 0 keeps PyTorch's defaults

    @classmethod
    def field_names(cls) -> set[str]:
        """The fields of the section, and the attention's options as older configs spelt them."""
        return set(cls.model_fields) | set(FLAT_OPTIONS)

    @classmethod
    def spelled_out(cls, data: dict, saved: bool) -> dict:
        # Where the older flat spelling of the attention's options (location_kernel: 15 beside
        # attention: location, as every config.yaml of a model folder written up to 2c61382 has
        # them) becomes model.attention's ({type: location, kernel: 15}), before any check:
        # attention_sections.nested; tests/test_old_folders.py loads folders written then.
        return nested(data, saved)

    @property
    def attention_name(self) -> str:
        """An RNN's attention in words: "bahdanau", "luong-general local-p (D=10)", "bahdanau sparsemax"."""
        return self.attention.name


class TransformerConfig(ModelConfig):
    """A Transformer (type: transformer); encoder_layers and decoder_layers count its layers."""

    type: Literal["transformer"] = "transformer"
    d_model: Width = 256
    heads: Width = 4
    feed_forward: Width = 1024  # inner size of the position-wise feed-forward layers
    # sinusoidal: sines and cosines interleaved (Vaswani et al.); sinusoidal-halves: the sines in the first half
    # of the dimensions, the cosines in the second (Marian's); learned: a trained vector a position
    positions: Literal["sinusoidal", "sinusoidal-halves", "learned"] = "sinusoidal"
    norm: Literal["pre", "post"] = "pre"  # LayerNorm before each sublayer (pre) or after the residual (post)
    attention_dropout: float = Field(0.1, ge=0, lt=1)  # on the attention weights
    share_embeddings: bool = False  # source = target embeddings = output projection (joint vocabulary)
    scale_embeddings: bool = True  # token embeddings times sqrt(d_model) before the positions are added
    activation: Literal["relu", "silu", "gelu"] = "relu"  # of the feed-forward layers: W_2 act(W_1 x) (silu: swish)
    # What turns every head's scores into weights: softmax, or sparsemax or 1.5-entmax (most exactly 0)
    attention_normalizer: Literal[NORMALIZERS] = "softmax"

    @property
    def transformer_name(self) -> str:
        """A Transformer in words: "transformer", "transformer with entmax15 attention"."""
        sparse = "" if self.attention_normalizer == "softmax" else f" with {self.attention_normalizer} attention"
        return f"transformer{sparse}"

    @field_validator("attention_normalizer", mode="before")
    @classmethod
    def not_constrained(cls, value):
        if value == "csparsemax":
            raise ValueError(
                "csparsemax bounds each source word's attention over the whole output: it is for an "
                "RNN's global attention (here a Transformer)"
            )
        return value

    @model_validator(mode="after")
    def heads_divide_the_width(self):
        if self.d_model % self.heads:
            raise ValueError(f"heads ({self.heads}) must divide d_model ({self.d_model})")
        return self


MODEL_TYPES = {"rnn": RNNConfig, "transformer": TransformerConfig}
# The names each type reads in a model section (ModelConfig.field_names)
MODEL_TYPE_FIELDS = {kind: frozenset(section.field_names()) for kind, section in MODEL_TYPES.items()}


def _field_default(name: str):
    """The default of a name that a type reads: a field's, or that of an attention option spelt flat."""
    for section in MODEL_TYPES.values():
        if name in section.model_fields:
            return section.model_fields[name].default
    return option_default(FLAT_OPTIONS[name])


# The names of each type that another lacks, with their defaults (ModelConfig.fields_of_the_other_type)
OTHER_TYPES_DEFAULTS = {
    name: _field_default(name)
    for names in MODEL_TYPE_FIELDS.values()
    for name in sorted(names)
    if not all(name in other for other in MODEL_TYPE_FIELDS.values())
}


def _model_type(value):
    """The model section's type, the tag of ModelSection: rnn unless it says otherwise."""
    kind = value.get("type", "rnn") if isinstance(value, dict) else getattr(value, "type", "rnn")
    return kind if isinstance(kind, str) else None


# The model section of task translation or speech: RNNConfig or TransformerConfig, by its type
ModelSection = Annotated[
    Annotated[RNNConfig, Tag("rnn")] | Annotated[TransformerConfig, Tag("transformer")],
    Discriminator(_model_type),
]
_MODEL_SECTION = TypeAdapter(ModelSection)


def model_config_of(**fields) -> RNNConfig | TransformerConfig:
    """The model section of these fields, as a config's is read: RNNConfig or TransformerConfig, by
    ``type`` (rnn unless given); a pydantic ValidationError otherwise."""
    return _MODEL_SECTION.validate_python(fields)


# (left, right) source positions
Window = Annotated[tuple[Annotated[int, Field(ge=0)], Annotated[int, Field(ge=0)]], AsTuple]


class TrainingConfig(Section):
    seed: int = 42
    threads: int | None = Field(None, gt=0)
    learning_rate: float = Field(5e-4, gt=0)
    clip_grad_norm: float | None = Field(1.0, gt=0)
    label_smoothing: float = Field(0.0, ge=0, lt=1)
    lr_decay_factor: float = Field(0.5, gt=0, le=1)  # on plateau of the validation metric
    lr_decay_patience: int = Field(2, ge=0)  # validations without improvement before decay
    min_learning_rate: float = Field(1e-6, ge=0)
    early_stopping_patience: int | None = Field(8, gt=0)  # validations; None = never stop early
    early_stopping_metric: Literal["bleu", "loss", "accuracy", "cer"] = "bleu"  # task: pairs: accuracy; speech: cer
    max_steps: int | None = Field(None, gt=0)
    max_epochs: int | None = Field(None, gt=0)
    max_minutes: float | None = Field(None, gt=0)
    validate_every: int = Field(500, gt=0)
    checkpoint_every: int | None = Field(None, gt=0)  # default: at each validation
    # the model weights at each of the last N checkpoints, in EXPERIMENT/checkpoints/, for `attnmt
    # average` (Vaswani et al. 2017 average the last 5); 0: only best and last
    keep_checkpoints: int = Field(0, ge=0)
    log_every: int = Field(50, gt=0)
    # Before the first step, one forward and backward pass over the corpus's largest batch (its
    # longest examples; no update): a batch that does not fit fails at once, and the run's peak
    # memory is reached at its start (attnmt.training.loop.TrainingLoop.check_memory)
    memory_check: bool = True
    dev_beam: int = Field(1, gt=0)  # beam for dev BLEU (1 = greedy, fast)
    adam_betas: Annotated[tuple[float, float], AsTuple] = (0.9, 0.999)  # (0.9, 0.98) in Vaswani et al. (2017)
    # plateau: * lr_decay_factor when validation stops improving; noam: warm-up to learning_rate, then 1/sqrt(step)
    schedule: Literal["plateau", "noam"] = "plateau"
    warmup_steps: int = Field(4000, gt=0)
    precision: Literal["fp32", "bf16"] = "fp32"  # bf16: autocast matrix products, fp32 master weights
    device: str = Field("cpu", pattern=r"^(cpu|cuda)$")  # cuda: each process on its own GPU (LOCAL_RANK)
    # On a GPU, an RNN translation model's decoder and loss are captured as a CUDA graph per batch
    # shape and replayed (attnmt.seq2seq.graphs); false: every step launched kernel by kernel
    cuda_graphs: bool = True
    # RNN attention within [m - left, m + right] in training too (see decoding.attention_window, which
    # it sets unless that is given); None: over the whole source
    attention_window: Window | None = None
    guided_alignment: GuidedAlignment | None = None  # RNN translation models with attention
    # lambda of See et al.'s (2017) coverage loss, added to the cross-entropy: lambda sum_t sum_j
    # min(a_t(j), sum_{t'<t} a_{t'}(j)), against attending again to what was attended to; 0: none
    coverage_loss: float = Field(0.0, ge=0)
    # Fine-tuning: start from the weights (init_checkpoint) and subwords of this trained translation model
    init_from: ConfigPath | None = None  # (its model section must be this config's; optimizer and steps start afresh)
    init_checkpoint: Literal["best", "last", "averaged"] = "best"

    @model_validator(mode="after")
    def has_a_limit(self):
        if self.max_steps is None and self.max_epochs is None and self.max_minutes is None:
            raise ValueError("set at least one of max_steps, max_epochs, max_minutes")
        return self


MAX_BEAM = 100  # larger beams cost time and memory for nothing (and a model folder sets its default)
MAX_CONSTRAINTS = 16  # phrases a translation must contain: a request's, a line's (dynamic beam allocation)


# Sampling's ranges, which the command line and the server check as well. The scores are divided by
# the temperature and the probabilities compared with top_p in float32: a temperature of 1e-45 (a
# subnormal float32) or 1e-46 (0 in float32) made every score infinite, and a top_p of 1e-46 (0)
# dropped every token, and the draw failed on NaN. From 1e-6 on both are safe by 30 orders of
# magnitude, and below it sampling is already greedy search: a temperature of 1e-6 multiplies a
# difference of 1e-4 between two log-probabilities into e^100, and a top_p under 1e-5 keeps only the
# most probable token of any vocabulary of up to 100,000 pieces (its probability is at least 1e-5).
MIN_SHAPING = 1e-6
MAX_TEMPERATURE = 100.0
MAX_TOP_K = 100_000
MAX_SEED = 2**63 - 1  # torch's generators take a 64-bit seed


class Sampling(Section):
    """Each output token drawn from the model's distribution instead of searched for (as for
    back-translation, Edunov et al. 2018): p(y_t | ...)^(1 / temperature), renormalized over the
    top_k most probable tokens (0: all) and then over the smallest set whose probability reaches
    top_p (nucleus sampling, Holtzman et al. 2020; 1: all)."""

    top_k: int = Field(0, ge=0, le=MAX_TOP_K)
    top_p: float = Field(1.0, ge=MIN_SHAPING, le=1)
    temperature: float = Field(1.0, ge=MIN_SHAPING, le=MAX_TEMPERATURE)
    # the same seed, inputs and batches give the same outputs; None: a new draw each time
    seed: int | None = Field(None, ge=0, le=MAX_SEED)


# (Sampling is asked for by a call, `translate(sampling=...)` or `attnmt translate --sample`, never by a
# model folder's config: every command, the server and the figures read that config, and would all
# turn random.)


class DecodingConfig(Section):
    beam: int = Field(5, gt=0, le=MAX_BEAM)
    # alpha of Wu et al. (2016); 0 = none. At most 10: ((5 + length) / 6)^alpha overflowed a float at
    # 1e308 (Wu et al. tune it within [0, 1]; 10 keeps every output length of the limits far from it)
    length_penalty: float = Field(1.0, ge=0, le=10)
    # beta of Wu et al. (2016): + beta * sum_i log(min(attention received by source word i, 1)) in the
    # scores of finished hypotheses, against outputs that leave source words out; 0 = none
    coverage_penalty: float = Field(0.0, ge=0, le=10)
    max_length_ratio: float = Field(1.5, gt=0, le=10)  # output at most ratio * source length + offset
    max_length_offset: int = Field(10, ge=0, le=1000)
    batch_size: int = Field(64, gt=0, le=10_000)
    # RNN attention: each step attends within [m - left, m + right], m the median of the previous
    # step's weights (as in Chorowski et al. 2014); None: over the whole source. Decoding only.
    attention_window: Window | None = None
    # A vocabulary shortlist: a lexical table in the model folder (attnmt shortlist MODEL_DIR writes
    # shortlist.json); the output layer scores only the candidates of each batch (docs/performance.md).
    shortlist: str | None = None


# task: pairs replaces the data and model sections (attnmt.core.task_sections); other tasks: DataConfig, ModelSection
TASK_SECTIONS = {"pairs": {"data": PairDataConfig, "model": PairModelConfig}}


class Config(Section):
    experiment_dir: ConfigPath
    # pairs: sentence-pair classification (the data and model sections below are PairDataConfig,
    # PairModelConfig); speech: speech recognition (the speech section)
    task: Literal[tuple(TASKS)] = "translation"  # the registry's names (attnmt.core.task)
    data: DataConfig | PairDataConfig
    model: ModelSection | PairModelConfig = Field(default_factory=dict, validate_default=True)
    training: TrainingConfig
    decoding: DecodingConfig = DecodingConfig()
    speech: SpeechConfig | None = None  # task: speech

    @model_validator(mode="after")
    def speech_settings(self):
        """task: speech gets its section, character targets and CER for early stopping unless set;
        its corpora are TSV files of audio paths and transcripts."""
        if self.task != "speech":
            if self.speech is not None:
                raise ValueError("the speech section is for task: speech")
            return self
        self.speech = self.speech or SpeechConfig()
        if "subwords" not in self.data.model_fields_set:
            self.data.subwords = SubwordConfig(type="char", vocab_size=100, joint=False)
        if self.data.subwords.joint:
            raise ValueError("task: speech has no source text: set data.subwords.joint: false")
        if "early_stopping_metric" not in self.training.model_fields_set:
            self.training.early_stopping_metric = "cer"
        if self.training.early_stopping_metric == "bleu":
            raise ValueError("task: speech is scored by cer (or loss), not bleu: set training.early_stopping_metric")
        if self.model.type != "rnn":
            raise ValueError("task: speech uses the RNN decoder (model.type: rnn)")
        if self.data.extra_train:
            raise ValueError("data.extra_train is for task: translation")
        for name, files in {"train": self.data.train, "dev": self.data.dev, **self.data.test}.items():
            if files is not None and files.tsv is None:
                raise ValueError(
                    f"task: speech reads TSV files of audio paths and transcripts: give data.{name} as {{tsv: FILE}}"
                )
        return self

    @model_validator(mode="after")
    def token_batches_on_gpus(self):
        """On a GPU, a translation model trains on token-budget batches unless the config sets a
        batch size: a GPU computes a batch of a few thousand tokens in about the time of 64
        sentences (see docs/performance.md)."""
        data = self.data
        if (
            self.task == "translation"
            and self.training.device == "cuda"
            and not {"batch_size", "batch_tokens"} & data.model_fields_set
        ):
            data.batch_tokens = GPU_BATCH_TOKENS
        return self

    @field_validator("data", "model", mode="wrap")
    @classmethod
    def sections_of_the_task(cls, value, handler, info: ValidationInfo):
        section = TASK_SECTIONS.get(info.data.get("task"), {}).get(info.field_name)
        if section is None and info.field_name == "model":  # RNNConfig or TransformerConfig, by its type
            return (
                value if isinstance(value, ModelConfig) else _MODEL_SECTION.validate_python(value, context=info.context)
            )
        section = section or DataConfig
        return value if isinstance(value, section) else section.model_validate(value, context=info.context)

    @model_validator(mode="after")
    def shared_embeddings_need_joint_vocabulary(self):
        model = self.model
        if (
            self.task == "translation"
            and model.type == "transformer"
            and model.share_embeddings
            and not self.data.subwords.joint
        ):
            raise ValueError("model.share_embeddings needs one joint vocabulary: set data.subwords.joint: true")
        return self

    @model_validator(mode="after")
    def guided_alignment_needs_rnn_attention(self):
        if self.training.guided_alignment is None:
            return self
        guided, model = self.training.guided_alignment, self.model
        if self.task != "translation":
            raise ValueError("training.guided_alignment is for task: translation")
        if self.data.extra_train:  # (its links are those of data.train's lines)
            raise ValueError(
                "training.guided_alignment learns from the links of data.train's pairs: "
                "it cannot train with data.extra_train"
            )
        if model.type == "rnn" and model.attention.type == "none":
            raise ValueError("training.guided_alignment trains attention: model.attention none has none")
        normalizer, field = (
            (model.attention.normalizer, "model.attention.normalizer")
            if model.type == "rnn"
            else (model.attention_normalizer, "model.attention_normalizer")
        )
        if normalizer != "softmax":
            raise ValueError(
                f"training.guided_alignment's cross-entropy cannot train {field}: {normalizer}: a "
                "reference link whose weight it set to exactly 0 gets no gradient (use softmax)"
            )
        if model.type != "transformer" and guided.full_context:
            raise ValueError(
                "training.guided_alignment.full_context is a Transformer decoder pass without its "
                "causal mask; an RNN decoder reads the target left to right only"
            )
        if model.type == "transformer":
            if guided.layer is None:
                guided.layer = -2 if model.decoder_layers > 1 else -1
            if not -model.decoder_layers <= guided.layer < model.decoder_layers:
                raise ValueError(
                    f"training.guided_alignment.layer {guided.layer}: the decoder has "
                    f"{model.decoder_layers} layers (0 to {model.decoder_layers - 1}, or -1 for the last)"
                )
            if max(guided.heads) >= model.heads:
                raise ValueError(
                    f"training.guided_alignment.heads {guided.heads}: the model has {model.heads} heads "
                    f"(0 to {model.heads - 1})"
                )
        return self

    @model_validator(mode="after")
    def coverage_loss_needs_rnn_attention(self):
        if self.training.coverage_loss and (
            self.task == "pairs" or self.model.type != "rnn" or self.model.attention.type == "none"
        ):
            here = (
                "task: pairs"
                if self.task == "pairs"
                else ("model.type: transformer" if self.model.type != "rnn" else "model.attention: none")
            )
            raise ValueError(
                "training.coverage_loss penalizes an RNN decoder's attention for attending again "
                f"(model.type: rnn, model.attention not none; here {here})"
            )
        return self

    @model_validator(mode="after")
    def window_needs_rnn_attention(self):
        for section in ("training", "decoding"):
            if getattr(self, section).attention_window is not None and (
                self.task == "pairs" or self.model.type != "rnn" or self.model.attention.type == "none"
            ):
                raise ValueError(
                    f"{section}.attention_window is for RNN decoders with attention (model.type: rnn, "
                    "model.attention not none)"
                )
            local = getattr(self.model.attention, "local", "none") if self.model.type == "rnn" else "none"
            if getattr(self, section).attention_window is not None and local != "none":
                raise ValueError(
                    f"{section}.attention_window: model.attention.local {local} already keeps each step "
                    "to its own window (model.attention.window)"
                )
        if "attention_window" not in self.decoding.model_fields_set:  # decode as trained
            self.decoding.attention_window = self.training.attention_window
        return self

    @model_validator(mode="after")
    def metric_of_the_task(self):
        tc = self.training
        if self.task == "pairs" and "early_stopping_metric" not in tc.model_fields_set:
            tc.early_stopping_metric = "accuracy"
        if (tc.early_stopping_metric == "accuracy") != (self.task == "pairs") or (
            tc.early_stopping_metric == "cer" and self.task != "speech"
        ):
            raise ValueError(
                f"training.early_stopping_metric: {tc.early_stopping_metric} is not a metric of task "
                f"{self.task} (translation: bleu or loss; pairs: accuracy or loss; speech: cer or loss)"
            )
        return self


def resolve_paths(section: Section | None, base: Path):
    """Every relative path field of ``section`` read from ``base`` (the config file's folder)."""
    for name, value in dict(section or {}).items():
        if isinstance(value, Path) and not value.is_absolute():
            setattr(section, name, (base / value).resolve())


def _resolve_paths(config: Config, base: Path) -> Config:
    resolve_paths(config, base)  # experiment_dir
    resolve_paths(config.training, base)  # init_from
    for files in (
        config.data.train,
        config.data.dev,
        *config.data.test.values(),
        *getattr(config.data, "extra_train", ()),
    ):  # (task: pairs has none)
        resolve_paths(files, base)
    if config.task == "pairs":
        resolve_paths(config.model.embeddings, base)
    guided = config.training.guided_alignment
    resolve_paths(guided, base)  # its first rounds and aligners (links: self)
    if guided is not None and guided.links not in ("eflomal", "self") and not Path(guided.links).is_absolute():
        guided.links = str((base / guided.links).resolve())  # a links file, read like the data files
    return config


def _describe(error: ValidationError) -> str:
    lines = []
    for e in error.errors():
        loc, message, kind, attention = list(e["loc"]), e["msg"], None, None
        if loc[:1] == ["model"] and loc[1:2] and loc[1] in MODEL_TYPES:  # the tag of ModelSection: its type
            kind = loc.pop(1)
        if loc[:2] == ["model", "attention"] and loc[2:3] and loc[2] in ATTENTION_TYPES:  # AttentionSection's
            attention = loc.pop(2)
        tags = e["type"] in ("union_tag_invalid", "union_tag_not_found")
        if tags and loc == ["model"]:
            loc, message = ["model", "type"], f"Input should be {' or '.join(map(repr, MODEL_TYPES))}"
        elif tags and loc == ["model", "attention"]:
            loc = ["model", "attention", "type"]
            message = f"Input should be {', '.join(map(repr, ATTENTIONS))} (a name, or {{type: NAME, its options}})"
        elif e["type"] == "extra_forbidden":
            message = _not_a_field(loc, kind, attention)
        where = ".".join(str(part) for part in loc) or "(top level)"
        lines.append(f"  {where}: {message}")
    return "\n".join(lines)


def _not_a_field(loc: list, kind: str | None, attention: str | None) -> str:
    """Why ``loc`` is not a field where it was given: a field of another model type, an option of
    another attention variant (or its flat spelling, given for a variant without it), or unknown."""
    name = loc[-1]
    if kind == "rnn" and len(loc) == 2 and name in FLAT_OPTIONS:
        option = FLAT_OPTIONS[name]
        return f"an option of {of_types(types_with(option))} (model.attention.{option})"
    if kind and len(loc) == 2:
        owners = [other for other in MODEL_TYPES if other != kind and name in MODEL_TYPE_FIELDS[other]]
        if owners:
            return f"a field of model.type: {owners[0]} (this model's type is {kind})"
    if attention and len(loc) == 3 and types_with(name):
        return f"an option of {of_types(types_with(name))} (this attention is {attention})"
    return "unknown field"


def validated(section: type[S], raw, source: str = "config", saved: bool = False) -> S:
    """``raw`` (a mapping read from YAML) as ``section``, or AttnmtError naming every field at fault.
    ``saved``: a config that attnmt wrote into a model folder, perhaps an older attnmt
    (ModelConfig.fields_of_the_other_type)."""
    if not isinstance(raw, dict):
        raise AttnmtError(f"{source}: expected a mapping of sections, got {type(raw).__name__}")
    try:
        return section.model_validate(raw, context={"saved": saved})
    except ValidationError as e:
        raise AttnmtError(f"{source}: invalid configuration\n{_describe(e)}") from None


def config_from_dict(raw: dict, base: Path, source: str = "config", saved: bool = False) -> Config:
    return _resolve_paths(validated(Config, raw, source, saved), base)


MAX_CONFIG_BYTES = 1_000_000  # a config is a page of settings; a huge one is a mistake or an attack


def load_config(path: str | Path, saved: bool = False) -> Config:
    """The config of a YAML file; ``saved``: the config.yaml of a model folder, which attnmt wrote."""
    path = Path(path)
    return config_from_dict(read_yaml_file(path), path.resolve().parent, source=str(path), saved=saved)


def read_yaml_file(path: Path):
    """What a YAML config file holds (bounded in size; errors name the file)."""
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise AttnmtError(f"{path}: {size:,} bytes is too large for a config (at most {MAX_CONFIG_BYTES:,})")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise AttnmtError(f"{path}: no such config file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise AttnmtError(f"{path}: cannot read config: {e}") from None
    try:
        return parse_yaml(text, str(path))
    except yaml.YAMLError as e:
        raise AttnmtError(f"{path}: not valid YAML: {e}") from None


def parse_yaml(text: str, name: str):
    """What the YAML ``text`` of a config (or of part of one) holds, read by ConfigLoader;
    yaml.YAMLError, its line and column in ``name``, otherwise."""
    loader = ConfigLoader(text)
    loader.name = name  # (for the errors' "in NAME, line L, column C")
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


MAX_CONFIG_DEPTH = 50  # levels of nesting: a config has four or five


class ConfigLoader(yaml.SafeLoader):
    """yaml.safe_load's loader (plain mappings, lists, strings and numbers: never a Python object),
    with three changes for configs, each an error naming the line and column instead of a traceback:
    nesting deeper than MAX_CONFIG_DEPTH (50,000 ``[`` took the recursive composer past Python's
    recursion limit), integers of more digits than Python converts (4,300: a ValueError), and
    numbers such as ``1e-4`` read as floats, as YAML 1.2 reads them (PyYAML's YAML 1.1 wants a dot,
    and strict sections would refuse the string it made)."""

    depth = 0

    def compose_node(self, parent, index):
        if self.depth >= MAX_CONFIG_DEPTH:
            raise yaml.composer.ComposerError(
                None, None, f"nested more than {MAX_CONFIG_DEPTH} levels deep", self.peek_event().start_mark
            )
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_yaml_int(self, node):
        try:
            return super().construct_yaml_int(node)
        except ValueError:
            raise yaml.constructor.ConstructorError(
                None, None, f"an integer of more than {sys.get_int_max_str_digits():,} digits", node.start_mark
            ) from None


ConfigLoader.add_constructor("tag:yaml.org,2002:int", ConfigLoader.construct_yaml_int)
ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def config_to_yaml(config: Config) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False, allow_unicode=True)
