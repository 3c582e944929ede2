"""Translation (task: translation, the default): text in one language to text in another."""

from __future__ import annotations

from pathlib import Path

from attnmt.seq2seq.inference import Translator


class TranslationTask:
    name = "translation"
    what = "a translation model"
    inputs = "text"

    def prepare(self, config, log, force: bool):
        from attnmt.translation.prepare import prepare

        prepare(config, log=log, force=force)

    def training_loop(self, config, device, processes, log, progress: bool):
        from attnmt.translation.training import translation_training_loop

        return translation_training_loop(config, device, processes, log, progress)

    def test_scores(self, config, device, log, progress: bool) -> tuple[dict, list[dict]]:
        from attnmt.translation.evaluation import translation_test_scores

        return translation_test_scores(config, device, log, progress)

    def load(self, folder: Path, checkpoint: str, quantize: str | None, device) -> Translator:
        return Translator(folder, checkpoint, quantize, device)

    def architecture(self, config) -> str:
        from attnmt.seq2seq.model import architecture

        return architecture(config.model)

    def figure_writers(self, request, model) -> list:
        from attnmt.translation.plots import translation_writers

        return translation_writers(request, model)


TASK = TranslationTask()
