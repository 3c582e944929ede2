"""Sentence pairs (task: pairs): the decomposable attention model of Parikh et al. (2016), which
classifies a premise and a hypothesis (entailment, contradiction, neutral) by attending between them."""

from __future__ import annotations

from pathlib import Path

from attnmt.core.errors import AttnmtError


class PairsTask:
    name = "pairs"
    what = "a sentence-pair classifier"
    inputs = "pairs"

    def prepare(self, config, log, force: bool):
        from attnmt.pairs.data import prepare_pairs

        prepare_pairs(config, log=log, force=force)

    def training_loop(self, config, device, processes, log, progress: bool):
        from attnmt.pairs.training import pair_training_loop

        return pair_training_loop(config, device, processes, log, progress)

    def test_scores(self, config, device, log, progress: bool) -> tuple[dict, list[dict]]:
        from attnmt.pairs.training import pair_test_scores

        return pair_test_scores(config, device, log, progress)

    def load(self, folder: Path, checkpoint: str, quantize: str | None, device):
        from attnmt.pairs.classifier import PairClassifier

        if quantize is not None:
            raise AttnmtError(f"{folder}: quantize is for translation models; this is a sentence-pair classifier")
        return PairClassifier(folder, checkpoint, device)

    def architecture(self, config) -> str:
        m = config.model
        return (f"decomposable attention, hidden {m.hidden_size}, embeddings {m.embedding_size}"
                f"{', intra-sentence attention' if m.intra_attention else ''}")

    def figure_writers(self, request, model) -> list:
        from attnmt.pairs.plots import pair_writers

        return pair_writers(request, model)


TASK = PairsTask()
