"""Models: RNN encoder, attention variants, RNN decoder, the RNN encoder-decoder, the Transformer,
all behind one interface (base.EncoderDecoder)."""

from attnmt.models.base import EncoderDecoder, StepOutput
from attnmt.models.seq2seq import BOS, EOS, PAD, UNK, Seq2Seq, build_model
from attnmt.models.transformer import Transformer

__all__ = ["BOS", "EOS", "PAD", "UNK", "EncoderDecoder", "Seq2Seq", "StepOutput", "Transformer", "build_model"]
