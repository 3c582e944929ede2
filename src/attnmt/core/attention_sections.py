"""The attention of an RNN model, ``model.attention`` (attnmt.core.config.RNNConfig): a section of
its own whose ``type`` chooses the variant, and with it the class: each variant's class holds its
options and their checks, and nothing else.

    attention: bahdanau                                        # a variant by name, its options at their defaults
    attention: {type: location, kernel: 15, channels: 4}       # ... or with its options
    attention: {type: luong-general, local: local-p, window: 5, input_feeding: false}
    attention: {type: coverage, fertility: 2, normalizer: csparsemax, fertility_bound: 1.5}

An option of another variant is an error naming it (``model.attention.kernel: an option of
attention type location only (this attention is bahdanau)``).

Before the attention was a section, its options were fields of the model section beside
``attention: NAME`` (``location_kernel: 15``, ``local_attention: local-p``, ...): FLAT_OPTIONS. That
spelling still reads, into this one (``nested``): a config can keep it, and so can the config.yaml
of a model folder written then, which holds every option of every variant, those of the others at
their defaults (or, in a saved folder, at whatever values that version left unused).
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BeforeValidator, Discriminator, Field, Tag, ValidationInfo, field_validator, model_validator

from attnmt.core.sections import FERTILITY_BOUND, RNN_NORMALIZERS, Section, Width

ATTENTIONS = (
    "none",
    "bahdanau",
    "luong-dot",
    "luong-general",
    "luong-concat",
    "luong-location",
    "location",
    "coverage",
)
LUONG_SCORES = ("luong-dot", "luong-general", "luong-concat", "luong-location")  # query: the current state
LOCAL_ATTENTIONS = ("none", "local-m", "local-p")  # Luong et al. (2015): global, local-m, local-p
LOCAL_WINDOW = 10  # D of local attention (Luong et al.'s)


class AttentionConfig(Section):
    """What every variant has: its type, which chooses its class (AttentionSection)."""

    type: Literal[ATTENTIONS] = "bahdanau"

    @property
    def name(self) -> str:
        """The attention in words: "bahdanau", "luong-general local-p (D=10)", "bahdanau sparsemax"."""
        return self.type

    @model_validator(mode="after")
    def of_a_variant(self):
        if ATTENTION_TYPES.get(self.type) is not type(self):
            raise ValueError(f"{type(self).__name__} is not the section of attention type {self.type}")
        return self


class NoAttentionConfig(AttentionConfig):
    """type: none: no attention; the context is the final encoder state, the same at every step."""

    type: Literal["none"] = "none"


class ScoredAttentionConfig(AttentionConfig):
    """What the variants that score the source have (every one but none): what turns the scores into
    weights. softmax (every weight above 0), or sparsemax (Martins & Astudillo 2016) or 1.5-entmax
    (Peters et al. 2019), which give most positions exactly 0, or csparsemax, constrained sparsemax
    (Malaviya et al. 2018): no source word gets more than fertility_bound attention over the output."""

    normalizer: Literal[RNN_NORMALIZERS] = "softmax"
    fertility_bound: float = Field(FERTILITY_BOUND, gt=0, le=100)

    @property
    def name(self) -> str:
        name = self.score_name
        if self.normalizer != "softmax":
            name += f" {self.normalizer}"
        if self.normalizer == "csparsemax":
            name += f" (fertility {self.fertility_bound:g})"
        return name

    @property
    def score_name(self) -> str:
        """The score and its own options in words (``name`` adds the normalizer)."""
        return self.type

    @field_validator("fertility_bound")
    @classmethod
    def bounds_csparsemax(cls, value, info: ValidationInfo):
        # (the default is allowed with any normalizer: a saved config writes every option)
        normalizer = info.data.get("normalizer", "csparsemax")  # (absent: its own error is reported)
        if value != FERTILITY_BOUND and normalizer != "csparsemax":
            raise ValueError(f"bounds csparsemax attention: only with normalizer: csparsemax (here {normalizer})")
        return value


class BahdanauConfig(ScoredAttentionConfig):
    """type: bahdanau: additive attention (Bahdanau et al. 2014), of the previous decoder state."""

    type: Literal["bahdanau"] = "bahdanau"


class LuongConfig(ScoredAttentionConfig):
    """type: luong-dot, luong-general, luong-concat or luong-location: Luong et al.'s (2015) scores of
    the current decoder state, with input feeding or not; global, or local around an aligned position
    p_t: t (local-m, monotonic) or predicted from the state (local-p, with a Gaussian around p_t),
    each step attending within ``window`` (D) source positions of p_t."""

    type: Literal[LUONG_SCORES]
    input_feeding: bool = True  # feed the previous attentional vector h~_{t-1} back into the RNN
    local: Literal[LOCAL_ATTENTIONS] = "none"
    window: int = Field(LOCAL_WINDOW, gt=0, le=1000)  # D: the window is [p_t - D, p_t + D]

    @property
    def score_name(self) -> str:
        return self.type if self.local == "none" else f"{self.type} {self.local} (D={self.window})"

    @field_validator("local")
    @classmethod
    def global_for_csparsemax(cls, value, info: ValidationInfo):
        if value != "none" and info.data.get("normalizer") == "csparsemax":
            raise ValueError(
                f"{value}: normalizer csparsemax bounds each source word's attention over the whole "
                "output: it is for global attention (local: none)"
            )
        return value

    @field_validator("window")
    @classmethod
    def of_local_attention(cls, value, info: ValidationInfo):
        # (the default is allowed with global attention: a saved config writes every option)
        local = info.data.get("local", "local-m")  # (absent: its own error is reported)
        if value != LOCAL_WINDOW and local == "none":
            raise ValueError("the half-width of local attention: only with local: local-m or local-p (here none)")
        return value


class LocationConfig(ScoredAttentionConfig):
    """type: location: location-aware attention (Chorowski et al. 2015), whose score reads a
    convolution of the previous step's weights: ``channels`` filters of width ``kernel``."""

    type: Literal["location"] = "location"
    channels: Width = 10
    kernel: Width = 31  # odd, so that the convolution keeps the source length

    @field_validator("kernel")
    @classmethod
    def odd(cls, value):
        if value % 2 == 0:
            raise ValueError(f"{value}: the width must be odd, so that the convolution keeps the source length")
        return value


class CoverageConfig(ScoredAttentionConfig):
    """type: coverage: coverage attention (Tu et al. 2016; See et al. 2017): the additive score also
    reads C_j, the attention source word j has had so far. ``fertility`` N > 0 divides it by Tu et
    al.'s fertility Phi_j = N sigmoid(u_f h_j); 0: the plain sum of its past weights (See et al.).
    ``dim`` d > 0: Tu et al.'s NN-based coverage instead, a d-dimensional vector per source word that
    a GRU updates at each step."""

    type: Literal["coverage"] = "coverage"
    fertility: int = Field(0, ge=0, le=100)
    dim: int = Field(0, ge=0, le=256)

    @property
    def score_name(self) -> str:
        name = self.type
        if self.fertility:
            name += f" (fertility N={self.fertility})"
        if self.dim:
            name += f" (NN-based, d={self.dim})"
        return name

    @field_validator("dim")
    @classmethod
    def nn_based(cls, value, info: ValidationInfo):
        if value and info.data.get("fertility"):
            raise ValueError(
                "Tu et al.'s NN-based coverage has no fertility, which divides linguistic coverage "
                f"(the sum of the weights): not with fertility (here {info.data['fertility']})"
            )
        if value and info.data.get("normalizer") == "csparsemax":
            raise ValueError(
                "Tu et al.'s NN-based coverage: not with normalizer csparsemax, whose bounds need the sum "
                "of the weights"
            )
        return value


# The class of each type (the tags of AttentionSection)
ATTENTION_TYPES: dict[str, type[AttentionConfig]] = {
    "none": NoAttentionConfig,
    "bahdanau": BahdanauConfig,
    **dict.fromkeys(LUONG_SCORES, LuongConfig),
    "location": LocationConfig,
    "coverage": CoverageConfig,
}
assert tuple(ATTENTION_TYPES) == ATTENTIONS


def _attention_type(value):
    """The tag of AttentionSection: the attention's type (bahdanau unless it says otherwise)."""
    kind = value.get("type", "bahdanau") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if isinstance(kind, str) else None


def _by_name(value):
    """``attention: location`` is ``attention: {type: location}``: the variant, its options at their defaults."""
    return {"type": value} if isinstance(value, str) else value


# model.attention of an RNN: the class of its type, from a mapping or from the type's name alone
AttentionSection = Annotated[
    Union[tuple(Annotated[section, Tag(kind)] for kind, section in ATTENTION_TYPES.items())],  # noqa: UP007
    Discriminator(_attention_type),
    BeforeValidator(_by_name),
]


# The options of the attention as the model section spelt them before model.attention was a
# section: their names in model.attention (``nested``)
FLAT_OPTIONS = {
    "input_feeding": "input_feeding",
    "local_attention": "local",
    "local_window": "window",
    "location_channels": "channels",
    "location_kernel": "kernel",
    "coverage_fertility": "fertility",
    "coverage_dim": "dim",
    "attention_normalizer": "normalizer",
    "fertility_bound": "fertility_bound",
}


def types_with(option: str) -> list[str]:
    """The attention types that have ``option`` (a field of model.attention)."""
    return [kind for kind, section in ATTENTION_TYPES.items() if option in section.model_fields]


def option_default(option: str):
    """The default of ``option`` (a field of model.attention; the same in every variant that has it)."""
    return ATTENTION_TYPES[types_with(option)[0]].model_fields[option].default


def of_types(kinds: list[str]) -> str:
    """Whose option it is: 'attention type location only', 'attention types luong-dot, luong-general
    or luong-concat only', 'every attention type but none'."""
    if len(kinds) == 1:
        return f"attention type {kinds[0]} only"
    others = [kind for kind in ATTENTIONS if kind not in kinds]
    if len(others) == 1:
        return f"every attention type but {others[0]}"
    return f"attention types {', '.join(kinds[:-1])} or {kinds[-1]} only"


def nested(data: dict, saved: bool) -> dict:
    """The model section ``data`` with the attention's options in the flat spelling (FLAT_OPTIONS)
    moved into model.attention, those that its type has. The others are dropped where they have
    their defaults (an older config.yaml wrote them all), or whatever their values in a model
    folder's config (``saved``: that version left them unused); otherwise they stay where they
    are, and the model section's check names them (attnmt.core.config._describe)."""
    flat = {name: data[name] for name in FLAT_OPTIONS if name in data}
    if not flat:
        return data
    data = {name: value for name, value in data.items() if name not in flat}
    attention = data.get("attention", "bahdanau")
    if isinstance(attention, AttentionConfig):
        attention = attention.model_dump(exclude_unset=True) | {"type": attention.type}
    attention = _by_name(attention)
    if not isinstance(attention, dict):  # (neither a name nor a section: the error reported is its own)
        return {**data, **flat}
    attention = dict(attention)
    kind = _attention_type(attention)
    section = ATTENTION_TYPES.get(kind) if kind is not None else None
    for name, value in flat.items():
        option = FLAT_OPTIONS[name]
        if option in attention:
            raise ValueError(f"{name} and attention.{option} are one option, given twice: give attention.{option}")
        if section is None or option in section.model_fields:  # (an unknown type: the error reported is its own)
            attention[option] = value
        elif not (saved or _same(value, option_default(option))):
            data[name] = value  # an option of other variants: an error naming it
    data["attention"] = attention
    return data


def _same(value, default) -> bool:
    return type(value) is type(default) and value == default
