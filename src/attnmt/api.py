"""Python API: load a trained model folder and translate text.

    >>> import attnmt
    >>> model = attnmt.load("runs/quickstart/model")
    >>> [t] = model.translate(["22. November 2026"], beam=5)
    >>> t.text, t.tokens, t.score, t.attention.shape
    >>> [s] = model.score(["22. November 2026"], ["2026-11-22"])   # a given translation's log p(y | x)
    >>> s.log_prob, s.per_token, s.log_probs

The public names live here; the code behind them is in the shared core (attnmt.core.folders:
model folders and devices), the sequence-to-sequence family (attnmt.seq2seq.inference:
Translator; attnmt.seq2seq.results: Translation, Candidate, ScoredTranslation) and each task's
package, which ``load`` asks through the task registry (attnmt.core.task).
"""

from __future__ import annotations

from pathlib import Path

import torch

from attnmt.core.folders import (  # noqa: F401
    WEIGHTS,
    inference_device,
    inside_folder,
    load_folder,
    load_model,
    model_config,
    weights_path,
)
from attnmt.seq2seq.inference import Translator  # noqa: F401
from attnmt.seq2seq.quantize import QUANTIZE, quantize_int8  # noqa: F401
from attnmt.seq2seq.results import Candidate, ScoredTranslation, Translation, links_of  # noqa: F401


def load(folder: str | Path, checkpoint: str = "best", quantize: str | None = None, device: str | torch.device = "cpu"):
    """Loads a trained model folder (the ``experiment_dir`` of its config): a Translator, or for a
    sentence-pair classifier (task: pairs) an attnmt.pairs.classifier.PairClassifier.

    ``device``: where the model runs and decodes ("cpu", "cuda", "cuda:1", ...).

    ``quantize="int8"``: dynamic int8 quantization of the linear layers for CPU translation
    (see ``quantize_int8``); ``quantize="bf16"``: the output layer's product in bfloat16, as in
    bf16 training (faster beam search on CPUs with AVX512-BF16 or AMX; a few translations
    change). See docs/performance.md.

    A sentence-pair classifier (task: pairs) loads as an attnmt.pairs.classifier.PairClassifier, a speech
    model (task: speech) as an attnmt.speech.recognizer.Recognizer, which transcribes audio (docs/speech.md)."""
    return load_folder(folder, checkpoint, quantize, device)
