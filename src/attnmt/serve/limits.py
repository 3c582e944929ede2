"""The server's limits: what one request may ask for, and how requests are batched. The defaults
here are those of ``attnmt serve`` too (cli.py reads them)."""

from dataclasses import dataclass

from attnmt.core.errors import AttnmtError


@dataclass(frozen=True)
class ServerLimits:
    """What one request may ask for (checked before any decoding), and how requests are batched."""

    max_body_bytes: int = 1_000_000  # request body (413 above)
    max_sentences: int = 64  # texts in one /translate request
    max_chars: int = 1000  # characters per text
    max_tokens: int = 256  # subword tokens per text, counted after encoding, end of sentence excluded
    max_beam: int = 16  # beam size (and n_best) of /translate
    max_top_k: int = 50  # top_k of /trace
    max_work: int = 4_112  # beam x (subword tokens + 1) summed over the texts of a request (and a batch): by
    # default that of one text at the beam and token limits (16 x 257), which takes well under the timeout
    max_answer_values: int = 2_000_000  # numbers in one answer (attention weights, vectors): about 20 MB of JSON
    timeout: float = 30.0  # seconds for one request from its arrival, waiting for the model included (503 above)
    max_batch: int = 64  # sentences decoded together by dynamic batching; 1 = one request at a time
    batch_wait: float = 0.005  # seconds the batcher waits for more requests after the first of a batch
    max_audio_bytes: int = 2_000_000  # speech models: one sound file, decoded from base64 (about 60 s of 16 kHz WAV)
    max_audio_seconds: float = 30.0  # speech models: duration of one sound file

    def __post_init__(self):
        for name in ("max_body_bytes", "max_sentences", "max_chars", "max_tokens", "max_beam", "max_top_k",
                     "max_work", "max_answer_values", "max_batch", "max_audio_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise AttnmtError(f"server limit {name} must be a positive integer, got {value!r}")
        if not self.max_audio_seconds > 0:
            raise AttnmtError(f"server limit max_audio_seconds must be positive, got {self.max_audio_seconds!r}")
        if not self.timeout > 0:
            raise AttnmtError(f"server limit timeout must be positive, got {self.timeout!r}")
        if not 0 <= self.batch_wait < self.timeout:
            raise AttnmtError(f"batch_wait must be at least 0 and below the timeout, got {self.batch_wait!r}")

    def body_bytes(self, audio: bool) -> int:
        """The request-body limit the server applies: max_body_bytes, and for a server with a
        speech model as much again as one sound file of max_audio_bytes takes in base64, so that
        a file meets the audio limits (size, then duration), not the body limit first."""
        return self.max_body_bytes + (base64_length(self.max_audio_bytes) if audio else 0)

    @property
    def chunk_work(self) -> int:
        """The work decoded in one go: a large request or batch is decoded in a few chunks, between
        which it stops if every request in it has given up (time limit), so that the model is free
        again soon after a limit passes (a computation under way cannot be interrupted)."""
        return max(1, self.max_work // CHUNKS)


CHUNKS = 2  # chunks of a request of max_work: few, as each costs a whole decoding loop (4 made the worst
# request 1.6x as slow on an idle machine: docs/http-api.md); enough to stop early


def work(token_counts: list[int], beam: int) -> int:
    """The work of decoding texts of these subword token counts with this beam: hypotheses x source
    positions, which the cost of a decoder step (and the number of steps) grows with."""
    return beam * sum(n + 1 for n in token_counts)  # + 1: the end of sentence


def base64_length(size: int) -> int:
    """Characters of ``size`` bytes in base64: 4 for every 3 bytes begun."""
    return -(-size // 3) * 4
