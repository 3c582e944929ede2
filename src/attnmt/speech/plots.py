"""`attnmt plot` of a speech model (attnmt.viz.plan asks the task for these writers)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from attnmt.core.errors import AttnmtError
from attnmt.viz import figures
from attnmt.viz.plan import FigureRequest, Writer


def speech_writers(r: FigureRequest, model) -> list[Writer]:
    """A speech model's figures: the "sentence" is a sound file; --out draws the attention above
    the spectrogram, --step the step view over the spectrogram, --states and --gif as for text."""
    from attnmt.speech import figures as speech

    unusable = [o for o, v in (("--head-view", r.head_view), ("--grid", r.grid), ("--merge-words", r.merge_words)) if v]
    if unusable or (r.out and Path(r.out).suffix.lower() == ".html"):
        raise AttnmtError(
            f"{', '.join(unusable) or '--out FILE.html'}: not for speech models "
            "(--out FILE.png/.svg, --step, --states, --gif)"
        )
    out = r.out or (None if r.sentence_figures() else "attention.png")
    writers = []
    if out:
        [t] = model.transcribe([r.sentence], beam=r.beam)
        fig = speech.spectrogram_attention(t, title=f"{Path(r.sentence).name}  \u2192  {t.text}")
        writers.append(partial(figures.save, fig, out))
    if r.states or r.steps or r.gif:
        trace = model.trace(r.sentence, top_k=r.top_k)
        if r.states:
            writers.append(
                partial(figures.save, figures.encoder_states_figure(trace, max_dims=r.dims or None), r.states)
            )
        for number, path in r.steps:
            writers.append(partial(figures.save, speech.speech_step_figure(trace, number), path))
        if r.gif:
            writers.append(partial(figures.decoding_animation, trace, r.gif, fps=r.fps))
    return writers
