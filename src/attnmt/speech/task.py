"""Speech recognition (task: speech): audio in, its transcript out, with attention over the audio
frames (location-aware attention, Chorowski et al. 2015)."""

from __future__ import annotations

from pathlib import Path


class SpeechTask:
    name = "speech"
    what = "a speech model (it transcribes audio)"
    inputs = "audio"

    def prepare(self, config, log, force: bool):
        from attnmt.speech.training import prepare_vocabulary

        prepare_vocabulary(config, log, force)

    def training_loop(self, config, device, processes, log, progress: bool):
        from attnmt.speech.training import speech_training_loop

        return speech_training_loop(config, device, processes, log, progress)

    def test_scores(self, config, device, log, progress: bool) -> tuple[dict, list[dict]]:
        """CER and WER of the best checkpoint on each test set of the config."""
        from attnmt.speech.error_rates import speech_test_set_reports
        from attnmt.speech.recognizer import Recognizer
        from attnmt.training.metrics import test_set_summary

        recognizer = Recognizer(config.experiment_dir, device=device)
        reports = speech_test_set_reports(recognizer, recognizer.test_sets, log=log,
                                          cache=config.experiment_dir / "features", progress=progress)
        return test_set_summary(
            reports, lambda r: {k: r[k] for k in ("cer", "wer", "beam")},
            lambda r: f"CER {r['cer']:.2f}%, WER {r['wer']:.2f}% ({r['utterances']} utterances, beam {r['beam']})",
            log)

    def load(self, folder: Path, checkpoint: str, quantize: str | None, device):
        from attnmt.speech.recognizer import Recognizer

        return Recognizer(folder, checkpoint, quantize, device)

    def architecture(self, config) -> str:
        from attnmt.seq2seq.model import architecture

        return f"{config.speech.n_mels} log-mels, " + architecture(config.model)

    def figure_writers(self, request, model) -> list:
        from attnmt.speech.plots import speech_writers

        return speech_writers(request, model)


TASK = SpeechTask()
