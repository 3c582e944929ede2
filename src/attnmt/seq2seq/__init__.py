"""Models: RNN encoder, attention variants, RNN decoder, the RNN encoder-decoder, the Transformer,
all behind one interface (base.EncoderDecoder)."""

from attnmt.seq2seq.base import EncoderDecoder, StepOutput
from attnmt.seq2seq.model import BOS, EOS, PAD, UNK, Seq2Seq, build_model
from attnmt.seq2seq.transformer import Transformer

__all__ = ["BOS", "EOS", "PAD", "UNK", "EncoderDecoder", "Seq2Seq", "StepOutput", "Transformer", "build_model"]
