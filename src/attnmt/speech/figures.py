"""Figures of speech recognition: the attention above the spectrogram, on one time axis, cropped
to the speech (the silence before and after it left out).

Each encoder state covers ``frames_per_state`` frames of ``hop_ms``, so the attention of output
character t over the states is drawn as a row whose cells span the same seconds as the frames
below: where the decoder listened while writing each character.
"""

from __future__ import annotations

import numpy as np
from matplotlib.colors import PowerNorm
from matplotlib.figure import Figure

from attnmt.viz.drawing import HIGHLIGHT, check_step, new_figure

SPACE = "␣"


def _seconds(obj) -> tuple[float, float]:
    """Seconds per feature frame and per encoder state."""
    frame = obj.hop_ms / 1000
    return frame, frame * obj.frames_per_state


def _char_labels(tokens: list[str]) -> list[str]:
    return [SPACE if t in ("▁", " ") else "</s>" if t == "</s>" else t.replace("▁", SPACE) for t in tokens]


def _spectrogram(ax, features: np.ndarray, frame: float):
    ax.imshow(
        features.T,
        origin="lower",
        aspect="auto",
        cmap="magma",
        interpolation="nearest",
        extent=(0, features.shape[0] * frame, 0, features.shape[1]),
    )
    ax.set_ylabel("mel bin", fontsize=9)
    ax.set_xlabel("time (s)", fontsize=9)


def speech_span(features: np.ndarray, frame: float, margin: float = 0.1) -> tuple[float, float]:
    """The seconds (start, end) between the first and the last frame louder than the quiet frames
    (a fifth of the way from the quietest to the loudest, by mean log-mel), widened by ``margin``
    seconds: the stretch of the recording that holds speech, without the silence around it."""
    energy = np.asarray(features, dtype=np.float64).mean(axis=1)
    quiet, loud = np.percentile(energy, 5), np.percentile(energy, 95)
    voiced = np.flatnonzero(energy > quiet + 0.2 * (loud - quiet))
    total = len(energy) * frame
    if len(voiced) == 0:
        return 0.0, total
    return max(0.0, voiced[0] * frame - margin), min(total, (voiced[-1] + 1) * frame + margin)


def spectrogram_attention(transcription, title: str | None = None, crop: bool = True) -> Figure:
    """Attention (rows: output characters; columns: encoder states, placed on the time axis) above
    the log-mel spectrogram of the utterance. Takes a recognizer's Transcription or DecodingTrace.

    The weights are coloured on a square-root scale from 0 to the largest weight of the matrix: a
    character's attention often spreads over a few states, and on a linear 0-1 scale its cells
    would be nearly white. ``crop``: the time axis shows the speech only (see ``speech_span``),
    not the silence before and after it."""
    features = np.asarray(transcription.features)
    attention = np.asarray(transcription.attention, dtype=np.float64)
    frame, state = _seconds(transcription)
    labels = _char_labels(transcription.tokens)
    start, end = speech_span(features, frame) if crop else (0.0, features.shape[0] * frame)
    height = 1.6 + 0.22 * len(labels) + 1.8
    fig = new_figure(max(6.0, min(16.0, 2.5 + (end - start) * 3.5)), height)
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[0.22 * len(labels) + 0.4, 1.8])
    top.set_label("attention")
    largest = float(attention.max(initial=0.0)) or 1.0
    image = top.imshow(
        attention,
        aspect="auto",
        cmap="Blues",
        norm=PowerNorm(0.5, vmin=0.0, vmax=largest),
        interpolation="nearest",
        extent=(0, attention.shape[1] * state, len(labels) - 0.5, -0.5),
    )
    top.set_yticks(range(len(labels)), labels, fontsize=8)
    top.set_ylabel("output characters", fontsize=9)
    bar = fig.colorbar(image, ax=[top, bottom], shrink=0.5, aspect=25, pad=0.02)
    bar.set_label("attention weight (square-root scale)", fontsize=7)
    bar.ax.tick_params(labelsize=6)
    bottom.set_label("spectrogram")
    _spectrogram(bottom, features, frame)
    bottom.set_xlim(start, end)
    if title:
        fig.suptitle(title, fontsize=11, parse_math=False)
    return fig


def speech_step_figure(trace, step: int) -> Figure:
    """Decoder step ``step`` of a speech trace: the attention weights a_j over time above the
    spectrogram, and the most probable next characters."""
    check_step(trace, step)
    s = trace.steps[step]
    frame, state = _seconds(trace)
    features = np.asarray(trace.features)
    fig = new_figure(max(6.0, min(16.0, 2.0 + features.shape[0] * frame * 2.5)), 5.0)
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[1.2, 1.8])
    top.set_label("weights")
    top.set_ylim(0, 1)
    if s.weights is not None:
        weights = np.asarray(s.weights)
        top.bar(np.arange(len(weights)) * state, weights, width=state, align="edge", color=HIGHLIGHT)
        top.set_ylim(0, max(float(weights.max()) * 1.15, 0.05))  # spread weights stay visible
    top.set_ylabel("attention a_j", fontsize=9)
    written = "".join(_char_labels(trace.tokens[:step]))
    candidates = ", ".join(f"{_char_labels([token])[0]} {p:.2f}" for token, p in s.top_k)
    top.set_title(
        f"step {step}: after {written!r} writes {_char_labels([s.token])[0]!r}  (top: {candidates})",
        fontsize=9,
        parse_math=False,
    )
    _spectrogram(bottom, features, frame)
    bottom.set_xlim(*speech_span(features, frame))
    return fig
