"""Export of a Transformer to CTranslate2, a C++ inference engine for Transformers.

    attnmt export runs/de-en --ct2 runs/de-en-ct2            # or --quantization int8

The converter fills CTranslate2's model specification (ctranslate2.specs.TransformerSpec) with
the weights of attnmt's Transformer and lets CTranslate2's ``Converter`` validate, optionally
quantize and save it. Needs ``pip install 'attnmt[ct2]'``. Translate with the exported folder:

    translator = ctranslate2.Translator("runs/de-en-ct2")
    translator.translate_batch([pieces], beam_size=5)   # pieces: source subwords, without "</s>"

The vocabulary is written in attnmt's id order (pad, unk, bos, eos = "<pad>", "<unk>", "<s>",
"</s>", then sentencepiece's pieces), so CTranslate2's token ids are attnmt's. Beam scores differ
in normalization: CTranslate2 divides by length ** length_penalty, attnmt by Wu et al.'s
((5 + length) / 6) ** alpha; with length_penalty=0 both are the summed log-probabilities.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from attnmt.core.devices import to_numpy
from attnmt.core.errors import AttnmtError
from attnmt.data.subwords import BOS, EOS, PAD, UNK

# attnmt never produces PAD or BOS (its decode_step sets their logits to -inf); the exported
# output layer gets this bias on them so that CTranslate2 does not either, with no option to pass.
NEVER = -1e9


def export_ct2(
    model_dir: str | Path,
    out_dir: str | Path,
    quantization: str | None = None,
    force: bool = False,
    checkpoint: str = "best",
) -> Path:
    """Converts the Transformer in ``model_dir`` (its ``checkpoint`` weights: best, last or
    averaged) into a CTranslate2 model folder ``out_dir``."""
    from attnmt.seq2seq.inference import Translator

    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        raise AttnmtError(
            "export to CTranslate2 needs the ctranslate2 package: "
            "pip install 'attnmt[ct2]' (or pip install ctranslate2)"
        ) from None
    translator = Translator(model_dir, checkpoint)
    if translator.config.model.type != "transformer":
        raise AttnmtError(
            f"{model_dir} holds an RNN model; CTranslate2 export is for Transformer models only "
            "(CTranslate2 has no specification for attnmt's RNN encoder-decoder with attention)"
        )
    if translator.config.model.attention_normalizer != "softmax":
        raise AttnmtError(
            f"{model_dir} attends with {translator.config.model.attention_normalizer} "
            "(model.attention_normalizer); CTranslate2's Transformer attends with softmax only"
        )
    out_dir = Path(out_dir)
    if out_dir.exists() and not force:
        raise AttnmtError(f"{out_dir} exists: remove it or choose another --ct2 folder")
    try:
        _converter(translator).convert(str(out_dir), quantization=quantization, force=True)
    except (OSError, ValueError) as e:
        raise AttnmtError(f"export to {out_dir} failed: {e}") from None
    return out_dir


def _converter(translator):
    """A ctranslate2 Converter whose model is ``translator``'s (defined here so that importing
    attnmt.translation.export needs no ctranslate2)."""
    from ctranslate2.converters import Converter

    class AttnmtConverter(Converter):
        def _load(self):
            return transformer_spec(
                translator.model, vocabulary(translator.src_subwords), vocabulary(translator.tgt_subwords)
            )

    return AttnmtConverter()


def vocabulary(subwords) -> list[str]:
    """Token strings in id order. CTranslate2 finds its special tokens by name: check that
    attnmt's special ids carry the names the spec's config expects."""
    tokens = subwords.pieces(list(range(len(subwords))))
    expected = {PAD: "<pad>", UNK: "<unk>", BOS: "<s>", EOS: "</s>"}
    for i, name in expected.items():
        if tokens[i] != name:
            raise AttnmtError(f"{subwords.path}: id {i} is {tokens[i]!r}, CTranslate2 export expects {name!r}")
    return tokens


def transformer_spec(model, src_vocab: list[str], tgt_vocab: list[str]):
    """The TransformerSpec of attnmt's Transformer ``model`` (attnmt.seq2seq.transformer)."""
    from ctranslate2.specs import TransformerDecoderSpec, TransformerEncoderSpec, TransformerSpec

    from ctranslate2.specs.common_spec import Activation

    config = model.config
    pre_norm = config.norm == "pre"
    activation = {"relu": Activation.RELU, "silu": Activation.SWISH, "gelu": Activation.GELU}[config.activation]
    # With pre-norm both stacks end in a LayerNorm (the spec's layer_norm); post-norm has none.
    spec = TransformerSpec(
        TransformerEncoderSpec(config.encoder_layers, config.heads, pre_norm=pre_norm, activation=activation),
        TransformerDecoderSpec(config.decoder_layers, config.heads, pre_norm=pre_norm, activation=activation),
    )
    # Both stacks scale embeddings by sqrt(d_model), or not (model.scale_embeddings)
    spec.encoder.scale_embeddings = spec.decoder.scale_embeddings = config.scale_embeddings
    spec.config.add_source_eos = True  # attnmt ends every source with </s>
    spec.config.layer_norm_epsilon = model.encoder_layers[0].norms[0].eps  # torch's 1e-5, not CT2's 1e-6
    _set_stack(spec.encoder, model.src_embed, model.encoder_norm)
    for layer_spec, layer in zip(spec.encoder.layer, model.encoder_layers):
        _set_attention(layer_spec.self_attention, layer.self_attention, layer.norms[0], self_attention=True)
        _set_feed_forward(layer_spec.ffn, layer.feed_forward, layer.norms[1])
    _set_stack(spec.decoder, model.tgt_embed, model.decoder_norm)
    for layer_spec, layer in zip(spec.decoder.layer, model.decoder_layers):
        _set_attention(layer_spec.self_attention, layer.self_attention, layer.norms[0], self_attention=True)
        _set_attention(layer_spec.attention, layer.cross_attention, layer.norms[1], self_attention=False)
        _set_feed_forward(layer_spec.ffn, layer.feed_forward, layer.norms[2])
    _set_linear(spec.decoder.projection, model.generator)
    bias = spec.decoder.projection.bias.copy()
    bias[[PAD, BOS]] = NEVER
    spec.decoder.projection.bias = bias
    spec.register_source_vocabulary(src_vocab)
    spec.register_target_vocabulary(tgt_vocab)
    return spec


def _array(tensor: torch.Tensor) -> np.ndarray:
    return to_numpy(tensor.float(), copy=True)


def _set_stack(spec, embeddings, final_norm):
    embedding_spec = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    embedding_spec.weight = _array(embeddings.tokens.weight)
    # The position table attnmt adds (learned or sinusoidal), given explicitly: CTranslate2's
    # built-in sinusoids are laid out [sin..., cos...], attnmt's interleaved (or in halves, but
    # computed in float64: model.positions sinusoidal-halves).
    table = embeddings.learned.weight if embeddings.learned is not None else embeddings.table
    spec.position_encodings.encodings = _array(table)
    if isinstance(final_norm, torch.nn.LayerNorm):
        _set_norm(spec.layer_norm, final_norm)


def _set_attention(spec, attention, norm, self_attention: bool):
    """CTranslate2 fuses the projections: [W_q; W_k; W_v] for self-attention, W_q and [W_k; W_v]
    for cross-attention; W_o is the last linear. The sublayer's LayerNorm is applied before it
    (pre-norm) or after the residual sum (post-norm), as the spec's pre_norm says."""
    linears = [attention.W_q, attention.W_k, attention.W_v]
    if self_attention:
        _set_fused(spec.linear[0], linears)
    else:
        _set_linear(spec.linear[0], attention.W_q)
        _set_fused(spec.linear[1], linears[1:])
    _set_linear(spec.linear[-1], attention.W_o)
    _set_norm(spec.layer_norm, norm)


def _set_feed_forward(spec, feed_forward, norm):
    _set_linear(spec.linear_0, feed_forward.W_1)
    _set_linear(spec.linear_1, feed_forward.W_2)
    _set_norm(spec.layer_norm, norm)


def _set_linear(spec, linear):
    spec.weight = _array(linear.weight)
    if linear.bias is not None:
        spec.bias = _array(linear.bias)


def _set_fused(spec, linears):
    spec.weight = np.concatenate([_array(linear.weight) for linear in linears])
    spec.bias = np.concatenate([_array(linear.bias) for linear in linears])


def _set_norm(spec, norm):
    spec.gamma = _array(norm.weight)
    spec.beta = _array(norm.bias)
