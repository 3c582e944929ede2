"""Listen, attend and spell: a speech encoder under the RNN decoder and its attention.

    x        = normalise(log-mels)                     (B,T,n_mels), mean 0 and variance 1 per bin
    x        = SpecAugment(x)                           in training, if configured: masked bins and frames
    z        = ReLU(Conv2d_stride2(...))                2 or 3 times: T/4 or T/8 frames (Chan et al. 2016)
    h_1..h_S = BiRNN(W z)                               one state per 4 or 8 frames (40 or 80 ms)

and then, as for text, the decoder writes characters one at a time, each attending over h_1..h_S
(location-aware attention, Chorowski et al. 2015, or any other variant). Padding frames are set
to zero before each convolution, so an utterance encodes the same alone or in a batch.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnmt.core import speed
from attnmt.core.config import RNNConfig, SpecAugment, SpeechConfig
from attnmt.core.errors import AttnmtError
from attnmt.data.subwords import EOS, PAD
from attnmt.seq2seq.base import source_mask
from attnmt.seq2seq.decoder import Memory
from attnmt.seq2seq.encoder import RNNEncoder
from attnmt.seq2seq.model import Seq2Seq


def subsampled_lengths(lengths: Tensor, convolutions: int) -> Tensor:
    """Frames left after ``convolutions`` convolutions of kernel 3, stride 2, padding 1."""
    for _ in range(convolutions):
        lengths = (lengths - 1) // 2 + 1
    return lengths


def normalise(x: Tensor, mask: Tensor, mean: Tensor | None = None, std: Tensor | None = None) -> Tensor:
    """Each mel bin to mean 0 and variance 1: with the global ``mean`` and ``std`` if given, else
    over the real frames of each utterance. Padding frames become 0."""
    if mean is None:
        m = mask.unsqueeze(-1).to(x.dtype)
        frames = m.sum(1, keepdim=True).clamp(min=1)
        mean = (x * m).sum(1, keepdim=True) / frames
        std = (((x - mean) * m).square().sum(1, keepdim=True) / frames).sqrt()
    return ((x - mean) / (std + 1e-5)).masked_fill(~mask.unsqueeze(-1), 0.0)


def spec_augment(x: Tensor, lengths: Tensor, settings: SpecAugment) -> Tensor:
    """Random bands of mel bins and stretches of frames set to 0 (the mean after normalising),
    each utterance its own (Park et al. 2019)."""
    x = x.clone()
    for b, length in enumerate(lengths.tolist()):
        for _ in range(settings.freq_masks):
            _zero_band(x[b], 1, x.size(2), settings.freq_width)
        for _ in range(settings.time_masks):
            _zero_band(x[b], 0, length, min(settings.time_width, length // 5))
    return x


def _zero_band(features: Tensor, dim: int, size: int, max_width: int):
    width = int(torch.randint(0, max_width + 1, ()))
    if 0 < width < size:
        start = int(torch.randint(0, size - width + 1, ()))
        features.narrow(dim, start, width).zero_()


class SpeechEncoder(nn.Module):
    """Log-mels (B,T,n_mels) and their lengths -> states (B,S,output_size), S = T/4 or T/8."""

    def __init__(self, model: RNNConfig, speech: SpeechConfig):
        super().__init__()
        self.settings = speech
        self.convolutions = {4: 2, 8: 3}[speech.subsample]
        channels, bins, layers = speech.conv_channels, speech.n_mels, []
        for i in range(self.convolutions):
            layers.append(nn.Conv2d(1 if i == 0 else channels, channels, 3, stride=2, padding=1))
            bins = (bins - 1) // 2 + 1
        self.convs = nn.ModuleList(layers)
        self.project = nn.Linear(channels * bins, model.embedding_size)
        self.rnn = RNNEncoder(
            None,
            model.embedding_size,
            model.encoder_hidden,
            model.encoder_layers,
            model.bidirectional,
            model.rnn_type,
            model.dropout,
        )
        self.output_size = self.rnn.output_size
        # Global normalisation: the training set's mean and deviation per bin, saved with the weights.
        self.register_buffer("mean", torch.zeros(speech.n_mels))
        self.register_buffer("std", torch.ones(speech.n_mels))

    def set_global_statistics(self, features: list[Tensor]):
        frames = torch.cat(features)
        self.mean.copy_(frames.mean(0))
        self.std.copy_(frames.std(0))

    def forward(self, features: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """-> states (B,S,M), final (B,M), lengths (B,) in encoder states."""
        lengths = lengths.to(features.device)
        mask = source_mask(lengths, features.size(1))
        glob = self.settings.normalize == "global"
        x = normalise(features, mask, self.mean if glob else None, self.std if glob else None)
        if self.training and self.settings.spec_augment is not None:
            x = spec_augment(x, lengths, self.settings.spec_augment)
        x = x.unsqueeze(1)  # (B,1,T,n_mels): one input channel
        for conv in self.convs:
            x = torch.relu(conv(x))
            lengths = subsampled_lengths(lengths, 1)
            x = x.masked_fill(~source_mask(lengths, x.size(2))[:, None, :, None], 0.0)
        x = x.transpose(1, 2).flatten(2)  # (B,S,channels*bins)
        states, final = self.rnn.read(self.rnn.dropout(self.project(x)), lengths)
        return states, final, lengths


class SpeechModel(Seq2Seq):
    """Seq2Seq with the speech encoder: same decoder, attention variants, output layer, decoding;
    with speech.ctc_weight > 0, also a CTC output layer on the encoder states (training only)."""

    def __init__(self, config: RNNConfig, speech: SpeechConfig, tgt_vocab_size: int):
        self.speech_config = speech  # (read by build_encoder, which Seq2Seq.__init__ calls)
        super().__init__(config, 0, tgt_vocab_size)
        self.ctc = nn.Linear(self.encoder.output_size, tgt_vocab_size) if speech.ctc_weight > 0 else None

    def ctc_loss(self, memory: Memory, tgt_out: Tensor) -> Tensor:
        """CTC of the transcripts (tgt_out without EOS and padding) over the encoder states, summed
        over the batch; the padding id is CTC's blank (it is never a target)."""
        log_probs = torch.log_softmax(self.ctc(memory.states).float(), dim=-1).transpose(0, 1)  # (S,B,V)
        chars = (tgt_out != PAD) & (tgt_out != EOS)
        return nn.functional.ctc_loss(
            log_probs, tgt_out[chars], memory.mask.sum(1), chars.sum(1), blank=PAD, reduction="sum", zero_infinity=True
        )

    def build_encoder(self, config: RNNConfig, src_vocab_size: int) -> nn.Module:
        return SpeechEncoder(config, self.speech_config)

    def encoder_lengths(self, frames: Tensor) -> Tensor:
        return subsampled_lengths(frames, self.encoder.convolutions)


def build_speech_model(config: RNNConfig, speech: SpeechConfig, tgt_vocab_size: int) -> SpeechModel:
    """The speech model of the config: the speech encoder, the attention and the RNN decoder."""
    speed.configure()  # before the model's first computation
    try:
        return SpeechModel(config, speech, tgt_vocab_size)
    except ValueError as e:
        raise AttnmtError(f"model: {e}") from None
