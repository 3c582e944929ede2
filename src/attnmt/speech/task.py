"""Speech recognition (task: speech): audio in, its transcript out, with attention over the audio
frames (location-aware attention, Chorowski et al. 2015)."""

from __future__ import annotations

from attnmt.core.task import Task
from attnmt.seq2seq.model import architecture
from attnmt.speech.error_rates import speech_test_set_reports
from attnmt.speech.recognizer import Recognizer
from attnmt.speech.training import prepare_vocabulary, speech_training_loop
from attnmt.training.metrics import test_set_summary


def speech_test_scores(config, device, log, progress: bool) -> tuple[dict, list[dict]]:
    """CER and WER of the best checkpoint on each test set of the config."""
    recognizer = Recognizer(config.experiment_dir, device=device)
    reports = speech_test_set_reports(
        recognizer, recognizer.test_sets, log=log, cache=config.experiment_dir / "features", progress=progress
    )
    return test_set_summary(
        reports,
        lambda r: {k: r[k] for k in ("cer", "wer", "beam")},
        lambda r: f"CER {r['cer']:.2f}%, WER {r['wer']:.2f}% ({r['utterances']} utterances, beam {r['beam']})",
        log,
    )


def figure_writers(request, model) -> list:
    from attnmt.speech.plots import speech_writers  # matplotlib: only when drawing

    return speech_writers(request, model)


TASK = Task(
    name="speech",
    what="a speech model (it transcribes audio)",
    inputs="audio",
    prepare=prepare_vocabulary,
    training_loop=speech_training_loop,
    test_scores=speech_test_scores,
    load=Recognizer,
    architecture=lambda config: f"{config.speech.n_mels} log-mels, " + architecture(config.model),
    figure_writers=figure_writers,
    fine_tunes=True,
)
