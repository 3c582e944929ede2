"""The server's limits: what one request may ask for, and how requests are batched. The defaults
here are those of ``attnmt serve`` too, whose limit options are generated from these fields
(attnmt.cli.serve): a field's metadata holds its option's help, and how the option differs from
the field where it does (flag, metavar, unit)."""

from dataclasses import dataclass, field, fields

from attnmt.core.errors import AttnmtError


def limit(default, help: str | None, **option):
    """A limit: its default and the help of its option ``--NAME-WITH-DASHES`` of ``attnmt serve``
    (None: not on the command line, only through create_app). ``option`` where the command line
    differs: flag (the option's name), metavar, scale (the option's value is the field's x scale),
    zero (True: 0 is allowed, not only positive values)."""
    return field(default=default, metadata={"help": help, **option})


@dataclass(frozen=True)
class ServerLimits:
    """What one request may ask for (checked before any decoding), and how requests are batched."""

    max_body_bytes: int = limit(
        1_000_000,
        "larger request bodies get 413 (with a speech model, plus one sound file of --max-audio-bytes in base64)",
    )
    max_sentences: int = limit(64, "texts per /translate request")
    max_chars: int = limit(1000, "characters per text")
    max_tokens: int = limit(256, "subword tokens per text (after encoding)")  # end of sentence excluded
    max_beam: int = limit(16, "largest beam (and n_best) a request may ask")
    max_top_k: int = limit(50, None)  # top_k of /trace
    # max_work: by default that of one text at the beam and token limits (16 x 257), which takes well under the timeout
    max_work: int = limit(4_112, "beam x (subword tokens + 1), summed over the texts of a request (and of a batch)")
    # max_answer_values: about 20 MB of JSON
    max_answer_values: int = limit(2_000_000, "numbers in one answer (attention weights, vectors); 422 beyond")
    # waiting for the model included; the body must have arrived by then too (408 beyond)
    timeout: float = limit(30.0, "seconds per request from its arrival; 503 beyond (408 for a body not sent by then)")
    # max_connections: uvicorn's limit_concurrency. Each may hold a body of max_body_bytes while it is read, so
    # the bodies of all take at most this many times as much (100 MB by default)
    max_connections: int = limit(100, "connections served at once; uvicorn answers 503 beyond")
    max_batch: int = limit(64, "sentences of concurrent /translate requests decoded together (dynamic batching)")
    # 1 = one request at a time (attnmt serve --no-batching)
    batch_wait: float = limit(
        0.005,
        "a batch is decoded once no request has come for this many milliseconds",
        flag="--max-batch-wait",
        metavar="MS",
        scale=1000,
        zero=True,
    )  # seconds here
    # max_audio_bytes: about 60 s of 16 kHz WAV
    max_audio_bytes: int = limit(
        2_000_000, "speech models: bytes of one sound file (sent as base64, for which the body limit makes room)"
    )
    max_audio_seconds: float = limit(30.0, "speech models: seconds of one sound file")

    def __post_init__(self):
        for name in (f.name for f in fields(self) if f.type in (int, "int")):
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
