"""A trained sequence-to-sequence model loaded from its folder for inference: what a translation
model (attnmt.seq2seq.inference.Translator) and a speech model
(attnmt.speech.recognizer.Recognizer) share.

That is the folder's config, the vocabularies and the weights (on a device, quantized if asked),
the decoding settings that every later search reads (``set_decoding``, ``attention_window``),
the heads switched off, what the model is (``describe``, ``repr``) and a search's hypotheses as
Candidates. What a model reads and gives is its subclass's: ``translate``, ``score`` and the
rest of text on a Translator, ``transcribe`` of audio on a Recognizer.
"""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from pathlib import Path

import torch
from pydantic import ValidationError

from attnmt.core import speed
from attnmt.core.config import Config, CoverageConfig, DecodingConfig, LuongConfig, ScoredAttentionConfig
from attnmt.core.devices import to_numpy
from attnmt.core.errors import AttnmtError
from attnmt.core.folders import inference_device, load_model, model_config, weights_path
from attnmt.seq2seq.heads import mask_heads, parse_heads
from attnmt.seq2seq.quantize import QUANTIZE, quantize_int8
from attnmt.seq2seq.results import Candidate


class LoadedSeq2Seq(ABC):
    """A trained sequence-to-sequence model with its vocabularies and decoding settings.

    A subclass says what its requests carry (``inputs``, ``what``), which vocabularies it reads
    (``_vocabularies``: source and target, the source None for audio), how its model is built
    (``_build``), and its test sets (``test_sets``, ``files_of_test_set``)."""

    inputs: str  # what its requests carry: "text", "audio" (the server and the CLI check it first)
    what: str  # what it is, in messages: "a translation model", ...

    def __init__(
        self,
        folder: str | Path,
        checkpoint: str = "best",
        quantize: str | None = None,
        device: str | torch.device = "cpu",
    ):
        if quantize not in QUANTIZE:
            raise AttnmtError(f"quantize must be one of {', '.join(map(repr, QUANTIZE))}, got {quantize!r}")
        self.device = inference_device(device)
        if quantize == "int8" and self.device.type != "cpu":
            raise AttnmtError(f"quantize='int8' is for CPUs; on {self.device} use quantize=None or 'bf16'")
        self.folder = Path(folder)
        self.config: Config = model_config(self.folder)
        self.src_subwords, self.tgt_subwords = self._vocabularies()
        self.weights = weights_path(self.folder, checkpoint)  # the file the weights come from
        self.model = load_model(self._build, self.weights, self.device)
        self.quantize = quantize
        if quantize == "int8":
            self.model = quantize_int8(self.model)
        if quantize == "bf16":  # the output layer's product (a decoder step's largest) in bfloat16
            self.model.generator.compute_dtype = torch.bfloat16
            if self.device.type == "cpu" and not speed.cpu_has_bf16():
                warnings.warn(
                    "quantize='bf16' (--bf16) on a CPU without bf16 units (AVX512-BF16 or AMX): the "
                    "product is emulated and slower than float32 here",
                    stacklevel=3,
                )
        self.attention_window = self.config.decoding.attention_window

    @abstractmethod
    def _vocabularies(self) -> tuple:
        """The source and target subwords of the folder (the source None where it is not text);
        an AttnmtError if the folder is not of this class's task."""

    @abstractmethod
    def _build(self) -> torch.nn.Module:
        """The model of the config, before its weights are loaded."""

    @property
    @abstractmethod
    def test_sets(self) -> dict:
        """The test sets of the model's config (data.test), name -> files."""

    @abstractmethod
    def files_of_test_set(self, files) -> list[Path]:
        """Every file a test set of the config reads (attnmt.data.test_sets keeps them inside the
        folder)."""

    @property
    def attention_window(self) -> tuple[int, int] | None:
        """(left, right): each decoder step attends only within that many source positions of the
        median of the previous step's weights (as in Chorowski et al. 2014); None: over the whole
        source. The config's decoding.attention_window unless set here; RNN attention only.
        Setting it changes the decoding settings (config.decoding), which every decoding call
        passes on: never the model."""
        return self.config.decoding.attention_window

    @attention_window.setter
    def attention_window(self, window: tuple[int, int] | None):
        decoder = getattr(self.model, "decoder", None)  # (read only: an RNN decoder, its attention)
        if window is not None and getattr(decoder, "attention", None) is None:
            raise AttnmtError(
                f"{self.folder}: an attention window is for RNN decoders with attention; this model "
                f"is a {self.config.model.type} with attention {getattr(self.config.model, 'attention', 'multi-head')}"
            )
        try:
            decoding = DecodingConfig.model_validate({**self.config.decoding.model_dump(), "attention_window": window})
        except ValidationError as error:
            raise AttnmtError(
                f"attention window {window!r}: give two whole numbers >= 0 (left, right), "
                f"or None ({error.errors()[0]['msg']})"
            ) from None
        self.config = self.config.model_copy(update={"decoding": decoding})

    def set_decoding(self, **settings):
        """Changes decoding settings for every later call: fields of config.decoding (beam,
        length_penalty, coverage_penalty, max_length_ratio, ...), validated as in a config; an
        unknown field or a wrong value is an AttnmtError naming it. The model is never changed."""
        if "attention_window" in settings:
            self.attention_window = settings.pop("attention_window")
        if settings.get("coverage_penalty") and getattr(getattr(self.model, "decoder", None), "attention", 1) is None:
            raise AttnmtError(
                f"{self.folder}: a coverage penalty sums the attention weights; this model has attention: none"
            )
        try:
            decoding = DecodingConfig.model_validate({**self.config.decoding.model_dump(), **settings})
        except ValidationError as error:
            field = ".".join(map(str, error.errors()[0]["loc"])) or "decoding"
            raise AttnmtError(f"decoding.{field}: {error.errors()[0]['msg']}") from None
        self.config = self.config.model_copy(update={"decoding": decoding})

    def mask_heads(self, heads: str | list[tuple[str, int, int]]):
        """Switches these attention heads of a Transformer off for every later call, the others
        on (attnmt.seq2seq.heads): "cross.2.0,encoder.0.3" or (kind, layer, head) tuples; "":
        all on."""
        mask_heads(self.model, parse_heads(heads) if isinstance(heads, str) else heads)

    def __repr__(self) -> str:
        model = self.config.model
        if model.type == "transformer":
            kind = model.transformer_name
        else:
            kind = f"{model.rnn_type} {model.attention_name} attention"
        parameters = sum(p.numel() for p in self.model.parameters())
        sizes = "/".join("-" if v is None else f"{len(v):,}" for v in (self.src_subwords, self.tgt_subwords))
        quantized = f", {self.quantize}" if self.quantize else ""
        return (
            f"<{type(self).__name__} {self.folder}: {kind}, {parameters:,} parameters, "
            f"vocabularies {sizes}, beam {self.config.decoding.beam}, {self.device}{quantized}>"
        )

    def describe(self) -> dict:
        """What the model is, as the server's /models says it: the fields of its type, the others
        None."""
        m, dc = self.config.model, self.config.decoding
        common = {
            "type": m.type,
            "encoder_layers": m.encoder_layers,
            "decoder_layers": m.decoder_layers,
            "beam": dc.beam,
            "length_penalty": dc.length_penalty,
            "coverage_penalty": dc.coverage_penalty,
        }
        none = dict.fromkeys(
            (
                "rnn_type",
                "input_feeding",
                "local_attention",
                "local_window",
                "attention_normalizer",
                "coverage_fertility",
                "coverage_dim",
                "fertility_bound",
                "decoder_hidden",
                "d_model",
                "heads",
                "feed_forward",
                "norm",
            )
        )
        if m.type == "transformer":
            return {
                **common,
                **none,
                "attention": "multi-head",
                "d_model": m.d_model,
                "heads": m.heads,
                "feed_forward": m.feed_forward,
                "norm": m.norm,
                "attention_normalizer": m.attention_normalizer,
            }
        a = m.attention  # (the API names its options as the model section did before it was a section)
        luong, scored = isinstance(a, LuongConfig), isinstance(a, ScoredAttentionConfig)
        coverage = isinstance(a, CoverageConfig)
        return {
            **common,
            **none,
            "attention": a.type,
            "rnn_type": m.rnn_type,
            "input_feeding": a.input_feeding if luong else True,
            "local_attention": a.local if luong else "none",
            "local_window": a.window if luong and a.local != "none" else None,
            "attention_normalizer": a.normalizer if scored else None,
            "coverage_fertility": a.fertility if coverage else None,
            "coverage_dim": a.dim if coverage else None,
            "fertility_bound": a.fertility_bound if scored and a.normalizer == "csparsemax" else None,
            "decoder_hidden": m.decoder_hidden,
        }

    def candidate(self, hypothesis) -> Candidate:
        """A hypothesis of a search (attnmt.seq2seq.decoding) as a Candidate: its text, pieces,
        score and attention."""
        attention = None if hypothesis.attention is None else to_numpy(hypothesis.attention)
        return Candidate(
            self.tgt_subwords.decode(hypothesis.tokens),
            self.tgt_subwords.pieces(hypothesis.tokens),
            hypothesis.score,
            attention,
        )
