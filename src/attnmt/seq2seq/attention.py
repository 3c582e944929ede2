"""Attention: score every encoder state h_j against a decoder state s, softmax, weighted sum.

    e_j  = score(s, h_j)                  one number per source position
    a    = softmax(e)  over real (non-padding) positions
    c    = sum_j a_j h_j                  the context vector

The variants differ in ``score``, and in what turns the scores into weights (``normalizer``):
softmax, whose weights are all above 0, or sparsemax (Martins & Astudillo 2016) and 1.5-entmax
(Peters et al. 2019), which give most source positions exactly 0, or constrained sparsemax
(Malaviya et al. 2018), which also keeps each position's attention over the whole output below
its fertility (attnmt.seq2seq.constrained). (The additive ones compute v^T tanh(.) through
attnmt.core.speed.v_tanh: the same value, faster on a CPU.) Local attention (Luong et al. 2015)
keeps each step to a window of the source around an aligned position p_t, with any of Luong's
scores. Queries have shape (batch, steps, query_size), so one call scores a single decoder step
(steps = 1) or every step at once when the decoder states are known in advance (Luong attention
without input feeding).
``keys`` are what ``project_keys`` makes of the encoder states, once per sentence.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import entmax
import torch
from torch import Tensor, nn

from attnmt.core import speed
from attnmt.core.errors import AttnmtError
from attnmt.core.speed import Linear
from attnmt.core.sections import FERTILITY_BOUND, RNN_NORMALIZERS
from attnmt.seq2seq.constrained import csparsemax, fertility_bounds


def normalize(scores: Tensor, normalizer: str, upper: Tensor | None = None) -> Tensor:
    """Weights a from scores e (..., S), -inf where a position may not be attended; they sum to 1
    over S:

        softmax     a_j = exp(e_j) / sum_k exp(e_k)                        every a_j > 0
        sparsemax   a = argmin_{p in simplex} ||p - e||^2 = [e_j - tau]_+  (Martins & Astudillo 2016)
        entmax15    a_j = [e_j / 2 - tau]_+^2                              (1.5-entmax, Peters et al. 2019)
        csparsemax  a = argmin_{p in simplex, p <= u} ||p - e||^2 = clip(e_j - tau, 0, u_j)
                    (constrained sparsemax, Malaviya et al. 2018; ``upper``: the bounds u)

    tau is the threshold that makes the weights sum to 1; positions scored below it get exactly 0.
    The sparse maps come from the entmax package (csparsemax: attnmt.seq2seq.constrained);
    half-precision scores go to them in float32 (as to softmax under autocast): their threshold is a
    difference of running sums."""
    if normalizer == "softmax":
        return torch.softmax(scores, dim=-1)
    if scores.dtype in (torch.float16, torch.bfloat16):
        scores = scores.float()
    if normalizer == "sparsemax":
        return entmax.sparsemax(scores, dim=-1)
    if normalizer == "entmax15":
        return entmax.entmax15(scores, dim=-1)
    if normalizer == "csparsemax":
        if upper is None:
            raise ValueError("csparsemax bounds the weights: give their upper bounds")
        return csparsemax(scores, upper)
    raise ValueError(f"unknown attention normalizer {normalizer!r}; choose one of {', '.join(RNN_NORMALIZERS)}")


class Attention(nn.Module, ABC):
    #: True when the query is the previous decoder state s_{t-1} (Bahdanau, location);
    #: False when it is the current state s_t (Luong).
    query_is_previous_state = False
    #: True when the score reads each query's previous weights a_{t-1} (location): such queries
    #: cannot share one memory row (a beam search's hypotheses, attnmt.seq2seq.decoder.Memory).
    reads_previous_weights = False
    #: True when the score reads each query's coverage, the sum of its weights so far (coverage
    #: attention; DecoderState.coverage): such queries cannot share one memory row either.
    reads_coverage = False
    #: True when the weights depend on the target position t of each query (local-m): the decoder
    #: then counts its steps (DecoderState.step).
    reads_step = False
    #: what turns the scores into weights (``normalize``): softmax, sparsemax, entmax15 or csparsemax
    normalizer = "softmax"
    #: csparsemax: the most attention a source position may have over the whole output (Malaviya et
    #: al.'s constant fertility); the last real position is unbounded (their sink)
    fertility_bound = FERTILITY_BOUND
    #: NN-based coverage (Tu et al.): the size d of each source position's coverage vector, which a
    #: GRU updates (next_coverage); 0: the coverage is the sum of the weights
    coverage_dim = 0

    def project_keys(self, memory: Tensor) -> Tensor:
        """Work that depends on the source only, done once per sentence."""
        return memory

    @property
    def keeps_coverage(self) -> bool:
        """Whether the decoder keeps the coverage of each query (DecoderState.coverage): for the score
        (coverage attention) or for the bounds of constrained sparsemax."""
        return self.reads_coverage or self.normalizer == "csparsemax"

    @property
    def reads_own_past(self) -> bool:
        """Whether each query's weights depend on what that query attended to before (its previous
        weights or its coverage), so that a beam search's hypotheses need their own rows."""
        return self.reads_previous_weights or self.keeps_coverage

    def next_coverage(self, coverage: Tensor, weights: Tensor, query: Tensor, keys: Tensor) -> Tensor:
        """The coverage after a step that attended with ``weights`` (B,S): the sum of the weights so far
        (coverage (B,S)). ``query`` (B,Q) s_{t-1} and ``keys`` (B,S,K) for a coverage that learns its update."""
        return coverage + weights

    def weights_of(self, scores: Tensor, mask: Tensor, coverage: Tensor | None) -> Tensor:
        """normalize(scores), within the fertility bounds for csparsemax (coverage (B,T,S), mask (B,S))."""
        if self.normalizer != "csparsemax":
            return normalize(scores, self.normalizer)
        if coverage is None:
            raise ValueError("csparsemax attention needs the coverage of each query: decode step by step")
        return normalize(scores, self.normalizer, fertility_bounds(coverage, mask, self.fertility_bound))

    @abstractmethod
    def score(self, query: Tensor, keys: Tensor, prev_weights: Tensor | None) -> Tensor:
        """Scores e (B,T,S) of each query against each source position. ``prev_weights`` (B,T,S): what
        the query attended to before, where the score reads it: the previous step's weights a_{t-1}
        (``reads_previous_weights``) or the coverage sum_{t'<t} a_{t'} (``reads_coverage``)."""

    def forward(
        self,
        query: Tensor,
        memory: Tensor,
        keys: Tensor,
        mask: Tensor,
        prev_weights: Tensor | None = None,
        steps: Tensor | None = None,
        coverage: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """query (B,T,Q), memory (B,S,M), mask (B,S) True at real tokens -> context c (B,T,M),
        weights a (B,T,S) and scores e (B,T,S), -inf at padding. ``steps`` (B,T): the target
        position t of each query, read where ``reads_step``; ``coverage`` (B,T,S), the sum of each
        query's past weights, where ``keeps_coverage``."""
        scores = self.score(query, keys, prev_weights)
        scores = scores.masked_fill(~mask.unsqueeze(1), float("-inf"))
        weights = self.weights_of(scores, mask, coverage)
        context = torch.bmm(weights, memory)
        return context, weights, scores


class BahdanauAttention(Attention):
    """Additive attention (Bahdanau et al., 2014): e_j = v^T tanh(W_s s_{t-1} + W_h h_j)."""

    query_is_previous_state = True

    def __init__(self, query_size: int, memory_size: int, hidden_size: int):
        super().__init__()
        self.W_s = Linear(query_size, hidden_size, bias=False)
        self.W_h = Linear(memory_size, hidden_size, bias=True)
        self.v = nn.Linear(hidden_size, 1, bias=False)

    def project_keys(self, memory):
        return self.W_h(memory)  # W_h h_j for all j, once per sentence

    def score(self, query, keys, prev_weights):
        return speed.v_tanh(self.v.weight, self.W_s(query).unsqueeze(2), keys.unsqueeze(1))


class LuongDotAttention(Attention):
    """Luong et al. (2015), dot: e_j = s_t^T h_j (needs equal sizes)."""

    def score(self, query, keys, prev_weights):
        return torch.bmm(query, keys.transpose(1, 2))


class LuongGeneralAttention(Attention):
    """Luong et al. (2015), general: e_j = s_t^T W h_j; W h_j is computed once per sentence."""

    def __init__(self, query_size: int, memory_size: int):
        super().__init__()
        self.W = Linear(memory_size, query_size, bias=False)

    def project_keys(self, memory):
        return self.W(memory)

    def score(self, query, keys, prev_weights):
        return torch.bmm(query, keys.transpose(1, 2))


class LuongLocationAttention(Attention):
    """Luong et al. (2015), location: e = W_a s_t, a score for each source position j from the
    decoder state alone (the states h_j are not read: where to look, not what is there). W_a has a
    row for each position up to ``max_positions``; a longer source is an error."""

    def __init__(self, query_size: int, max_positions: int):
        super().__init__()
        self.W_a = Linear(query_size, max_positions, bias=False)

    def score(self, query, keys, prev_weights):
        S = keys.size(1)
        if S > self.W_a.out_features:
            raise AttnmtError(
                f"luong-location attention scores at most {self.W_a.out_features} source positions "
                f"(model.max_positions), and this source has {S}"
            )
        return torch.nn.functional.linear(query, self.W_a.weight[:S])


class LuongConcatAttention(BahdanauAttention):
    """Luong et al. (2015), concat: e_j = v^T tanh(W [s_t; h_j]).

    W [s; h] = W_s s + W_h h: the additive score, but of the current decoder state s_t.
    """

    query_is_previous_state = False


class LocationAttention(Attention):
    """Location-aware (hybrid) attention, Chorowski et al. (2015):

    f   = F * a_{t-1}                                   convolution of the previous weights
    e_j = w^T tanh(W s_{t-1} + V h_j + U f_j + b)
    """

    query_is_previous_state = True
    reads_previous_weights = True

    def __init__(self, query_size: int, memory_size: int, hidden_size: int, channels: int, kernel: int):
        super().__init__()
        if kernel % 2 == 0:
            raise ValueError("location_kernel must be odd so the convolution keeps the source length")
        self.F = nn.Conv1d(1, channels, kernel, padding=kernel // 2, bias=False)
        self.W = Linear(query_size, hidden_size, bias=False)
        self.V = Linear(memory_size, hidden_size, bias=True)  # carries the bias b
        self.U = Linear(channels, hidden_size, bias=False)
        self.w = nn.Linear(hidden_size, 1, bias=False)

    def project_keys(self, memory):
        return self.V(memory)

    def score(self, query, keys, prev_weights):
        if query.size(1) != 1:
            raise ValueError("location attention scores one decoder step at a time")
        f = self.F(prev_weights).transpose(1, 2)  # (B,1,S) -> (B,S,channels)
        # W s (B,1,H) broadcasts over V h + U f (B,S,H)
        return speed.v_tanh(self.w.weight, self.W(query), keys + self.U(f)).unsqueeze(1)


class CoverageAttention(Attention):
    """Coverage attention (Tu et al. 2016; See et al. 2017): the additive score also reads how much
    attention each source position has had so far, so that the decoder can learn to look elsewhere
    once a word is translated (against words translated twice, or left out):

        C_j = sum_{t'<t} a_{t'}(j) / Phi_j                     the coverage of position j
        e_j = v^T tanh(W_s s_{t-1} + W_h h_j + w_c C_j)

    Phi_j = 1 (See et al.; Tu et al.'s linguistic coverage without fertility), or with ``fertility``
    N > 0 Tu et al.'s fertility Phi_j = N sigmoid(u_f^T h_j), the number of target words position j
    is expected to produce, at most N. The decoder keeps the plain sum of the weights
    (DecoderState.coverage); Phi_j depends on the source alone and is computed with the keys.

    With ``dim`` d > 0, Tu et al.'s NN-based coverage instead: C_j is a d-dimensional vector that a
    GRU updates after each step from what the step did with position j,

        C_j <- GRU(C_j; a_t(j), h_j, s_{t-1})                   (``next_coverage``)
        e_j = v^T tanh(W_s s_{t-1} + W_h h_j + W_c C_j)

    (the GRU's input weights on h_j are applied once per sentence, with the keys).
    """

    query_is_previous_state = True
    reads_coverage = True

    def __init__(self, query_size: int, memory_size: int, hidden_size: int, fertility: int = 0, dim: int = 0):
        super().__init__()
        if fertility and dim:
            raise ValueError(
                "Tu et al.'s fertility divides linguistic coverage (the sum of the weights); "
                "NN-based coverage (dim > 0) has none"
            )
        self.W_s = Linear(query_size, hidden_size, bias=False)
        self.W_h = Linear(memory_size, hidden_size, bias=True)
        self.w_c = Linear(max(dim, 1), hidden_size, bias=False)
        self.v = nn.Linear(hidden_size, 1, bias=False)
        self.fertility, self.coverage_dim, self.hidden_size = fertility, dim, hidden_size
        self.u_f = nn.Linear(memory_size, 1) if fertility else None
        if dim:  # the GRU's weights on its inputs a_t(j), h_j, s_{t-1} and on C_j, each for its 3 gates (r, z, n)
            self.gru_a = Linear(1, 3 * dim, bias=True)
            self.gru_h = Linear(memory_size, 3 * dim, bias=False)
            self.gru_s = Linear(query_size, 3 * dim, bias=False)
            self.gru_c = Linear(dim, 3 * dim, bias=True)

    def project_keys(self, memory):
        """W_h h_j, and as more last features: with fertility 1 / Phi_j (B,S,H+1); with NN-based
        coverage the GRU's input from h_j (B,S,H+3d)."""
        keys = self.W_h(memory)
        if self.u_f is not None:
            phi = self.fertility * torch.sigmoid(self.u_f(memory))
            return torch.cat([keys, (1 / phi).to(keys.dtype)], dim=-1)
        if self.coverage_dim:
            return torch.cat([keys, self.gru_h(memory).to(keys.dtype)], dim=-1)
        return keys

    def score(self, query, keys, prev_weights):
        if query.size(1) != 1:
            raise ValueError("coverage attention scores one decoder step at a time")
        keys, extra = keys[..., : self.hidden_size], keys[..., self.hidden_size :]
        if self.coverage_dim:  # C_j: (B,1,S,d) -> (B,S,d)
            coverage = prev_weights.squeeze(1)
        else:  # C_j: (B,1,S) -> (B,S,1), divided by Phi_j with fertility
            coverage = prev_weights.transpose(1, 2)
            if self.u_f is not None:
                coverage = coverage * extra
        # W_s s (B,1,H) broadcasts over W_h h + w_c C (B,S,H)
        return speed.v_tanh(self.v.weight, self.W_s(query), keys + self.w_c(coverage.to(keys.dtype))).unsqueeze(1)

    def next_coverage(self, coverage, weights, query, keys):
        if not self.coverage_dim:
            return coverage + weights
        x = (
            keys[..., self.hidden_size :]
            + self.gru_a(weights.unsqueeze(-1).to(keys.dtype))
            + self.gru_s(query).unsqueeze(1)
        )  # (B,S,3d): the GRU's input a_t(j), h_j, s_{t-1}
        x_r, x_z, x_n = x.chunk(3, dim=-1)
        c_r, c_z, c_n = self.gru_c(coverage).chunk(3, dim=-1)
        r, z = torch.sigmoid(x_r + c_r), torch.sigmoid(x_z + c_z)
        candidate = torch.tanh(x_n + r * c_n)
        return (1 - z) * candidate + z * coverage


class LocalAttention(Attention):
    """Local attention, Luong et al. (2015): step t attends only to the source positions j within D
    of an aligned position p_t, scored by one of Luong's global scores e_j (``scorer``):

        local-m  p_t = t                                          (monotonic)
                 a_t = softmax(e) over |j - p_t| <= D
        local-p  p_t = (S - 1) sigmoid(v_p^T tanh(W_p s_t))        (predicted; S the source length)
                 a_t(j) = softmax(e)_j exp(-(j - p_t)^2 / (2 sigma^2)),  sigma = D / 2,  over |j - p_t| <= D

    Positions count from 0, so p_t spans the source (the paper's p_t = S sigmoid(.) counts from 1).
    local-p's weights are not renormalised after the Gaussian, as in the paper: they sum to at
    most 1, and p_t learns through the Gaussian. local-m keeps p_t to the last source position
    once t passes it (the paper does not say what happens there)."""

    def __init__(self, scorer: Attention, kind: str, window: int, query_size: int, hidden_size: int):
        super().__init__()
        if kind not in ("local-m", "local-p"):
            raise ValueError(f"unknown local attention {kind!r}; choose local-m or local-p")
        self.scorer, self.kind, self.D = scorer, kind, window
        self.query_is_previous_state = scorer.query_is_previous_state
        self.reads_step = kind == "local-m"
        if kind == "local-p":
            self.W_p = Linear(query_size, hidden_size, bias=False)
            self.v_p = nn.Linear(hidden_size, 1, bias=False)

    def project_keys(self, memory):
        return self.scorer.project_keys(memory)

    def score(self, query, keys, prev_weights):
        return self.scorer.score(query, keys, prev_weights)

    def aligned_position(self, query: Tensor, mask: Tensor, steps: Tensor | None) -> Tensor:
        """p_t (B,T) of each query (B,T,Q), in float32 (under bf16 autocast too: positions to the Gaussian)."""
        last = (mask.sum(-1, keepdim=True) - 1).float()  # S - 1
        if self.kind == "local-m":
            return torch.minimum(steps.float(), last)
        return last * torch.sigmoid(self.v_p(torch.tanh(self.W_p(query))).float()).squeeze(-1)

    def forward(self, query, memory, keys, mask, prev_weights=None, steps=None, coverage=None):
        p = self.aligned_position(query, mask, steps)
        j = torch.arange(mask.size(-1), device=mask.device, dtype=p.dtype)
        distance = j - p.unsqueeze(-1)  # (B,T,S): j - p_t
        window = mask.unsqueeze(1) & (distance.abs() <= self.D)
        scores = self.score(query, keys, prev_weights).masked_fill(~window, float("-inf"))
        weights = normalize(scores, self.normalizer)
        if self.kind == "local-p":
            sigma = self.D / 2
            weights = (weights * torch.exp(-distance.square() / (2 * sigma**2))).to(weights.dtype)
        context = torch.bmm(weights, memory)
        return context, weights, scores


def window_mask(prev_weights: Tensor, mask: Tensor, left: int, right: int) -> Tensor:
    """Attention within a window (as in Chorowski et al. 2014): a step attends only to the real
    positions j with m - left <= j <= m + right, m the median of the previous step's weights
    a_{t-1} (the first position where their running sum reaches 1/2).
    prev_weights (B,S), mask (B,S) -> (B,S) bool."""
    median = (prev_weights.cumsum(-1) < 0.5).sum(-1, keepdim=True)
    median = torch.minimum(median, mask.sum(-1, keepdim=True) - 1)  # a real position, whatever the rounding
    j = torch.arange(mask.size(-1), device=mask.device)
    return mask & (j >= median - left) & (j <= median + right)


def build_attention(
    name: str,
    query_size: int,
    memory_size: int,
    hidden_size: int,
    location_channels: int = 10,
    location_kernel: int = 31,
    local: str = "none",
    local_window: int = 10,
    max_positions: int = 1024,
    normalizer: str = "softmax",
    coverage_fertility: int = 0,
    fertility_bound: float = FERTILITY_BOUND,
    coverage_dim: int = 0,
) -> Attention | None:
    """The attention named in the config; None for 'none' (fixed context, no attention). ``local``:
    local-m or local-p around the score ``name`` (LocalAttention); none: global. ``normalizer``:
    what turns its scores into weights (``normalize``), ``fertility_bound`` bounding csparsemax's.
    ``coverage_fertility``: N of coverage attention's fertility (0: none); ``coverage_dim``: d of its
    NN-based coverage (0: the sum of the weights)."""
    for option, value in (("coverage_fertility", coverage_fertility), ("coverage_dim", coverage_dim)):
        if value and name != "coverage":
            raise ValueError(f"{option} is coverage attention's (model.attention: coverage), not {name!r}'s")
    if coverage_dim and normalizer == "csparsemax":
        raise ValueError("csparsemax's bounds need the sum of the weights: not with NN-based coverage (coverage_dim)")
    attention = _attention(
        name,
        query_size,
        memory_size,
        hidden_size,
        location_channels,
        location_kernel,
        local,
        local_window,
        max_positions,
        coverage_fertility,
        coverage_dim,
    )
    if attention is not None:
        if normalizer not in RNN_NORMALIZERS:
            raise ValueError(f"unknown attention normalizer {normalizer!r}; choose one of {', '.join(RNN_NORMALIZERS)}")
        if normalizer == "csparsemax" and local != "none":
            raise ValueError(
                "csparsemax bounds each source word's attention over the whole output: it takes global "
                f"attention, not {local}"
            )
        attention.normalizer, attention.fertility_bound = normalizer, fertility_bound
    return attention


def _attention(
    name,
    query_size,
    memory_size,
    hidden_size,
    location_channels,
    location_kernel,
    local,
    local_window,
    max_positions,
    coverage_fertility,
    coverage_dim,
) -> Attention | None:
    if local != "none":
        if not name.startswith("luong-"):
            raise ValueError(
                f"local attention ({local}) takes a Luong score (luong-dot, luong-general, "
                f"luong-concat, luong-location), not {name!r}"
            )
        scorer = build_attention(name, query_size, memory_size, hidden_size, max_positions=max_positions)
        return LocalAttention(scorer, local, local_window, query_size, hidden_size)
    if name == "none":
        return None
    if name == "bahdanau":
        return BahdanauAttention(query_size, memory_size, hidden_size)
    if name == "luong-dot":
        if query_size != memory_size:
            raise ValueError(f"luong-dot needs decoder size ({query_size}) = encoder output size ({memory_size})")
        return LuongDotAttention()
    if name == "luong-general":
        return LuongGeneralAttention(query_size, memory_size)
    if name == "luong-location":
        return LuongLocationAttention(query_size, max_positions)
    if name == "luong-concat":
        return LuongConcatAttention(query_size, memory_size, hidden_size)
    if name == "location":
        return LocationAttention(query_size, memory_size, hidden_size, location_channels, location_kernel)
    if name == "coverage":
        return CoverageAttention(query_size, memory_size, hidden_size, coverage_fertility, coverage_dim)
    raise ValueError(
        f"unknown attention {name!r}; choose one of none, bahdanau, luong-dot, "
        "luong-general, luong-concat, luong-location, location, coverage"
    )


__all__ = [
    "RNN_NORMALIZERS",
    "normalize",
    "Attention",
    "BahdanauAttention",
    "LuongDotAttention",
    "LuongGeneralAttention",
    "LuongConcatAttention",
    "LuongLocationAttention",
    "LocationAttention",
    "CoverageAttention",
    "LocalAttention",
    "build_attention",
    "window_mask",
]
