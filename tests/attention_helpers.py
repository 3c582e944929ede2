"""model.attention for tests that run every variant with one set of options."""

from __future__ import annotations

from attnmt.core.config import ATTENTION_TYPES, FLAT_OPTIONS, RNNConfig, model_config_of


def attention_of(kind: str, **options) -> dict:
    """The section of attention ``kind`` with those of ``options`` that it has (named as in
    model.attention, or as the model section spelt them before: location_kernel for kernel);
    a test of every variant gives location's kernel, Luong's input feeding, ... to each."""
    fields = ATTENTION_TYPES[kind].model_fields
    named = {FLAT_OPTIONS.get(name, name): value for name, value in options.items()}
    return {"type": kind, **{name: value for name, value in named.items() if name in fields}}


def rnn_fields(**fields) -> dict:
    """An RNN's model section from fields that give the attention by name (``attention: kind``,
    bahdanau if absent) and options of any variant in the flat spelling (``location_kernel: 3``
    for every variant of a test): ``attention`` the section of that variant with those of its
    options (attention_of). A Transformer's fields (``type: transformer``) as they are."""
    if fields.get("type", "rnn") != "rnn":
        return fields
    options = {name: fields.pop(name) for name in list(fields) if name in FLAT_OPTIONS}
    return {**fields, "attention": attention_of(fields.get("attention", "bahdanau"), **options)}


# The sizes of the attention tests' small models (dropout off, location's kernel where it is chosen)
SMALL_RNN = {
    "embedding_size": 16,
    "encoder_hidden": 12,
    "decoder_hidden": 24,
    "attention_size": 10,
    "dropout": 0.0,
    "location_kernel": 5,
}


def small_rnn_config(**fields) -> RNNConfig:
    """The model section of a small RNN (SMALL_RNN's sizes) with ``fields`` over them, given as to
    rnn_fields: the attention by name and any variant's options in the flat spelling."""
    return model_config_of(**rnn_fields(**{**SMALL_RNN, **fields}))
