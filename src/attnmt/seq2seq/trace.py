"""Look inside one greedy translation: every quantity of every decoder step.

For each step t the trace holds what the papers draw: the scores e_j of each encoder state,
the weights a_j made of them (softmax, or the trace's ``normalizer``), the context vector
c_t = sum_j a_j h_j, the decoder state, and the most probable next tokens. It is computed from
the same modules as ``translate``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from attnmt.core.devices import model_device, to_numpy
from attnmt.data.batching import make_batch
from attnmt.data.subwords import EOS
from attnmt.seq2seq import search
from attnmt.seq2seq.prefix import Prefixes


@dataclass
class StepTrace:
    token: str  # the token chosen at this step (greedy)
    token_id: int
    probability: float
    scores: np.ndarray | None  # (S,) attention scores e_j before the normalizer; None without attention
    weights: np.ndarray | None  # (S,) weights a_j = normalizer(e)_j
    context: np.ndarray  # (M,) context vector c_t
    state: np.ndarray  # (H,) decoder state s_t (top layer)
    # As attnmt.seq2seq.StepOutput gives them. Transformer: scores None; weights the last layer's
    # cross-attention averaged over heads (as in Translation.attention); context that attention's
    # output, state the top layer's output.
    top_k: list[tuple[str, float]] = field(default_factory=list)  # next-token candidates and probabilities
    # chosen under a prefix (its token, or a piece spelling its last word) or by the length limit
    # (EOS, the only token a search may write there), not as the most probable token; probability
    # and top_k stay the model's own
    constrained: bool = False

    def __repr__(self) -> str:
        # The sizes of the vectors, not their numbers (a trace's steps would print tens of thousands of characters)
        weights = "no attention" if self.weights is None else f"{len(self.weights)} weights"
        return (
            f"StepTrace({self.token!r}, p {self.probability:.3f}, {weights}, context {np.size(self.context)}, "
            f"state {np.size(self.state)}, top {len(self.top_k)})"
        )


@dataclass(frozen=True)
class CoverageUse:
    """How a model's attention reads the coverage C_j, the attention each source token has had
    before the step (the sum of the trace's earlier weights)."""

    in_score: bool = False  # coverage attention: C_j is a term of the score
    fertility: int = 0  # ... divided by Tu et al.'s fertility Phi_j (at most this many) where > 0
    dim: int = 0  # ... NN-based: a d-dimensional C_j that a GRU updates from the weights (the sum drawn) where > 0
    bound: float | None = None  # csparsemax: each weight at most bound - C_j; the last token unbounded


def coverage_use(model_config) -> CoverageUse | None:
    """What a model (its config's model section) reads of the coverage; None where nothing."""
    attention = model_config.attention if model_config.type == "rnn" else None
    in_score = attention is not None and attention.type == "coverage"
    csparsemax = attention is not None and attention.type != "none" and attention.normalizer == "csparsemax"
    bound = attention.fertility_bound if csparsemax else None
    if not in_score and bound is None:
        return None
    return CoverageUse(in_score, attention.fertility if in_score else 0, attention.dim if in_score else 0, bound)


@dataclass
class DecodingTrace:
    source: str
    source_tokens: list[str]  # subword pieces, ending in "</s>"
    encoder_states: np.ndarray  # (S, M): one row per source token
    steps: list[StepTrace]
    text: str  # the greedy translation
    # Speech (attnmt.speech.recognizer): the log-mels (frames, n_mels), frames per encoder state, ms per frame
    features: np.ndarray | None = None
    frames_per_state: int | None = None
    hop_ms: float | None = None
    # What made each step's weights of its scores: softmax, sparsemax or entmax15
    # (attnmt.seq2seq.attention.normalize); None where there are no scores (Transformer, no attention)
    normalizer: str | None = None
    # What the attention reads of the coverage (coverage attention, csparsemax); None where nothing
    coverage: CoverageUse | None = None

    @property
    def tokens(self) -> list[str]:
        return [s.token for s in self.steps]

    def coverage_before(self, step: int) -> np.ndarray:
        """C_j before ``step`` (S,): the sum of the earlier steps' weights, the attention each source
        token has had (what linguistic coverage reads, and csparsemax bounds)."""
        earlier = [s.weights for s in self.steps[:step]]
        return np.sum(earlier, axis=0, dtype=np.float64) if earlier else np.zeros(len(self.source_tokens))

    def __repr__(self) -> str:
        states = "x".join(map(str, np.shape(self.encoder_states)))
        speech = "" if self.features is None else f", {len(self.features)} audio frames"
        return (
            f"DecodingTrace({self.source!r} -> {self.text!r}, {len(self.source_tokens)} source tokens, "
            f"{len(self.steps)} steps, encoder states {states}{speech})"
        )

    @property
    def attention(self) -> np.ndarray | None:
        if not self.steps or self.steps[0].weights is None:
            return None
        return np.stack([s.weights for s in self.steps])


@torch.inference_mode()
def trace(
    translator,
    text: str,
    top_k: int = 5,
    max_length: int | None = None,
    stop: Callable[[], bool] | None = None,
    prefixes: Prefixes | None = None,
    tag: str = "",
) -> DecodingTrace:
    """Greedy decoding of one sentence, recording each step (``stop``, ``prefixes``: see ``trace_source``;
    ``tag``: put before the source, Translator.source_ids)."""
    src_ids = translator.source_ids([text], tag)[0]
    batch = make_batch([src_ids])
    return trace_source(
        translator,
        batch.src,
        batch.src_lengths,
        text,
        translator.src_subwords.pieces(src_ids + [EOS]),
        top_k,
        max_length,
        stop,
        prefixes,
    )


@torch.inference_mode()
def trace_source(
    translator,
    src: torch.Tensor,
    src_lengths: torch.Tensor,
    source: str,
    source_tokens: list[str],
    top_k: int = 5,
    max_length: int | None = None,
    stop: Callable[[], bool] | None = None,
    prefixes: Prefixes | None = None,
) -> DecodingTrace:
    """Greedy decoding of one source given as a batch of one (token ids, or audio features),
    recording each step; ``source_tokens`` label its encoder states. ``stop``: asked between two
    decoder steps; when it says True, attnmt.seq2seq.decoding.DecodingStopped. ``prefixes``: what
    the output begins with (attnmt.seq2seq.prefix, of a batch of one): those steps take the
    prefix's token, or the most probable piece that spells its last word, as the searches do."""
    model = translator.model
    model.eval()
    device = model_device(model)
    src, src_lengths = src.to(device), src_lengths.to(device)
    # (greedy search's one output is the same with or without a coverage penalty: none here, for
    # a model without attention too)
    settings = translator.config.decoding.model_copy(update={"coverage_penalty": 0.0})
    recorder = _StepRecorder(translator, top_k)
    [[hypothesis]] = search.decode(
        model,
        src,
        src_lengths,
        settings,
        beam=1,
        prefixes=prefixes,
        stop=stop,
        observers=(recorder,),
        max_length=max_length or None,
    )
    memory = recorder.memory
    mc = translator.config.model
    normalizer = mc.attention.normalizer if mc.type == "rnn" and mc.attention.type != "none" else None
    return DecodingTrace(
        source,
        source_tokens,
        to_numpy(memory.states[0].float(), copy=True),
        recorder.steps,
        translator.tgt_subwords.decode(hypothesis.tokens),
        normalizer=normalizer,
        coverage=coverage_use(mc),
    )


class _StepRecorder:
    """The trace as an observer of greedy search's loop (search.decode, decoding.run_eager): the
    encoder's memory, and each step's quantities, the token the search chose, with the model's own
    probabilities (not a prefix's restriction of them, StepOutput.model_log_probs);
    ``constrained`` where the prefix or the length limit (EOS, the only token there) restricted
    the choice."""

    def __init__(self, translator, top_k: int):
        self.pieces, self.top_k = translator.tgt_subwords.pieces, top_k
        self.steps: list[StepTrace] = []
        self.memory = None

    def begin(self, memory):
        self.memory = memory

    def observe(self, t: int, step, greedy):
        own = step.log_probs if step.model_log_probs is None else step.model_log_probs
        probs = own[0].exp()
        best = int(greedy.prev[0])
        restricted = step.model_log_probs is not None and bool((step.log_probs[0] != own[0]).any())
        top = probs.topk(min(self.top_k, probs.numel()))
        self.steps.append(
            StepTrace(
                token=self.pieces([best])[0],
                token_id=best,
                probability=float(probs[best]),
                scores=_row(step.scores),
                weights=_row(step.weights),
                context=_row(step.context),
                state=_row(step.output),
                top_k=[(self.pieces([i])[0], p) for p, i in zip(top.values.tolist(), top.indices.tolist())],
                constrained=restricted or t + 1 >= greedy.max_lengths[0],
            )
        )


def _row(batch_of_one: torch.Tensor | None) -> np.ndarray | None:
    return None if batch_of_one is None else to_numpy(batch_of_one[0].float(), copy=True)
