"""RNN encoder: reads the source sentence into one hidden state per token."""

from __future__ import annotations

from contextlib import nullcontext

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnmt.core import speed
from attnmt.core.speed import Dropout

RNNS = {"gru": nn.GRU, "lstm": nn.LSTM}


class RNNEncoder(nn.Module):
    """Embeddings, then a (bi)directional GRU or LSTM. Without a vocabulary (``vocab_size``
    None) it reads vectors of ``embedding_size`` instead of token ids (the speech encoder's).

    With two directions, the state of token j is [h_j forward; h_j backward] as in
    Bahdanau et al. (2014), so it summarises the words before and after it.
    """

    def __init__(
        self,
        vocab_size: int | None,
        embedding_size: int,
        hidden_size: int,
        num_layers: int,
        bidirectional: bool,
        rnn_type: str,
        dropout: float,
        pad_id: int = 0,
    ):
        super().__init__()
        self.embed = None if vocab_size is None else nn.Embedding(vocab_size, embedding_size, padding_idx=pad_id)
        self.rnn = RNNS[rnn_type](
            embedding_size,
            hidden_size,
            num_layers,
            batch_first=True,
            bidirectional=bidirectional,
            dropout=dropout if num_layers > 1 else 0.0,
        )
        self.dropout = Dropout(dropout)
        self.output_size = hidden_size * (2 if bidirectional else 1)

    def forward(self, src: Tensor, lengths: Tensor, unpacked: bool | None = None) -> tuple[Tensor, Tensor]:
        """src (B,S) token ids, lengths (B,) -> states (B,S,output_size), final (B,output_size).

        States at padding positions are meaningless (the attention masks them); ``final`` is the
        state after the last real token of the top layer, directions concatenated (the backward
        direction ends after the first token)."""
        return self.read(self.dropout(self.embed(src)), lengths, unpacked)

    def read(self, x: Tensor, lengths: Tensor, unpacked: bool | None = None) -> tuple[Tensor, Tensor]:
        """The RNN over vectors x (B,S,embedding_size) -> states, final (see forward). ``unpacked``: each
        direction over the padded batch (``_unpacked``) or the packed batch; None: unpacked on a
        CPU, packed on a GPU (a CUDA graph, which cannot read lengths from the host, asks for
        unpacked)."""
        lengths = lengths.to(x.device)
        # Under CPU autocast nn.GRU runs in float32 anyway, and nn.LSTM fails (oneDNN makes no bf16
        # LSTM of autocast's mixed types): both run in float32.
        with torch.autocast("cpu", enabled=False) if x.device.type == "cpu" else nullcontext():
            # The unpacked trick is for CPUs; on a GPU, cuDNN's fused RNN reads the packed batch.
            if unpacked is None:
                unpacked = speed.enabled() and x.device.type != "cuda"
            states = self._unpacked(x, lengths) if unpacked else self._packed(x, lengths)
        final = states[torch.arange(states.size(0), device=states.device), lengths - 1]
        if self.rnn.bidirectional:
            final = torch.cat([final[:, : self.rnn.hidden_size], states[:, 0, self.rnn.hidden_size :]], dim=-1)
        return self.dropout(states), final

    def _packed(self, x: Tensor, lengths: Tensor) -> Tensor:
        """The textbook way: the RNN over a packed batch, which skips the padding."""
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        return pad_packed_sequence(self.rnn(packed)[0], batch_first=True, total_length=x.size(1))[0]

    def _unpacked(self, x: Tensor, lengths: Tensor) -> Tensor:
        """Each direction over the whole padded batch (see attnmt.core.speed), the backward one on each
        sentence reversed within its length, so padding is never read before a real token: a
        sentence encodes the same alone or in a batch."""
        reverse = _reverse_within_length(lengths, x.size(1))
        for layer in range(self.rnn.num_layers):
            if layer > 0:
                x = speed.dropout(x, self.rnn.dropout, self.training)
            outputs = [speed.rnn_direction(self.rnn, layer, False, x)]
            if self.rnn.bidirectional:  # reversed, run, and back in order (the reversal is its own inverse)
                backward = speed.rnn_direction(self.rnn, layer, True, x.gather(1, reverse.expand_as(x)))
                outputs.append(backward.gather(1, reverse.expand(-1, -1, self.rnn.hidden_size)))
            x = torch.cat(outputs, dim=-1)
        return x


def _reverse_within_length(lengths: Tensor, width: int) -> Tensor:
    """(B,width,1) index: position t of sentence b -> lengths[b]-1-t for real tokens, t on padding."""
    t = torch.arange(width, device=lengths.device).unsqueeze(0)
    return torch.where(t < lengths.unsqueeze(1), lengths.unsqueeze(1) - 1 - t, t).unsqueeze(2)
