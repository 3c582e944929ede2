"""Python API: load a trained model folder and translate text.

    >>> import attnmt
    >>> model = attnmt.load("runs/quickstart")
    >>> [t] = model.translate(["22. November 2026"], beam=5)
    >>> t.text, t.tokens, t.score, t.attention.shape
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from attnmt.checkpoint import load_weights
from attnmt.config import Config, load_config
from attnmt.data.batching import inference_batches, make_batch
from attnmt.data.subwords import EOS, load_subwords
from attnmt.decoding import BeamRecorder, beam_search, decode, max_output_lengths
from attnmt.errors import AttnmtError
from attnmt.models import build_model


@dataclass
class Candidate:
    """One translation hypothesis."""

    text: str  # detokenized output
    tokens: list[str]  # subword pieces, ending in "</s>" when the model produced it
    score: float  # log-probability / length penalty
    attention: np.ndarray | None  # (len(tokens), len(source_tokens)); None for attention "none"


@dataclass
class Translation:
    source: str
    source_tokens: list[str]  # subword pieces of the source, ending in "</s>"
    candidates: list[Candidate] = field(default_factory=list)  # best first (n-best list)

    @property
    def best(self) -> Candidate:
        return self.candidates[0]

    @property
    def text(self) -> str:
        return self.best.text

    @property
    def tokens(self) -> list[str]:
        return self.best.tokens

    @property
    def score(self) -> float:
        return self.best.score

    @property
    def attention(self) -> np.ndarray | None:
        return self.best.attention


class Translator:
    """A trained model with its vocabularies and decoding settings."""

    def __init__(self, folder: str | Path, checkpoint: str = "best"):
        self.folder = Path(folder)
        config_path = self.folder / "config.yaml"
        if not config_path.is_file():
            raise AttnmtError(f"{self.folder}: not a model folder (no config.yaml)")
        self.config: Config = load_config(config_path)
        self.config.experiment_dir = self.folder  # the folder may have moved since training
        self.src_subwords, self.tgt_subwords = load_subwords(self.folder, self.config.data.subwords.joint)
        self.model = build_model(self.config.model, len(self.src_subwords), len(self.tgt_subwords))
        weights = self.folder / f"{checkpoint}.safetensors"
        if checkpoint == "best" and not weights.exists():
            weights = self.folder / "last.safetensors"
        load_weights(self.model, weights)
        self.model.eval()

    def translate(self, texts: list[str], beam: int | None = None, n_best: int = 1,
                  batch_size: int | None = None) -> list[Translation]:
        """Translates each text; the output has one Translation per input, in order.

        Empty (or whitespace-only) inputs give an empty translation without running the model.
        """
        if isinstance(texts, str):
            raise TypeError("translate() takes a list of strings; wrap a single sentence in a list")
        dc = self.config.decoding
        beam = dc.beam if beam is None else beam
        if beam < 1 or n_best < 1 or n_best > beam:
            raise ValueError(f"need 1 <= n_best <= beam (got beam {beam}, n_best {n_best})")
        src_ids = self.src_subwords.encode(list(texts))
        results = [Translation(text, [], [Candidate("", [], 0.0, None)]) for text in texts]
        todo = [i for i, ids in enumerate(src_ids) if ids]
        for batch_indices in inference_batches([len(src_ids[i]) for i in todo], batch_size or dc.batch_size):
            indices = [todo[j] for j in batch_indices]
            batch = make_batch([src_ids[i] for i in indices])
            with torch.inference_mode():
                decoded = decode(self.model, batch.src, batch.src_lengths, beam=beam, n_best=n_best,
                                 alpha=dc.length_penalty, max_length_ratio=dc.max_length_ratio,
                                 max_length_offset=dc.max_length_offset)
            for i, hypotheses in zip(indices, decoded):
                results[i] = Translation(texts[i], self.src_subwords.pieces(src_ids[i] + [EOS]),
                                         [self._candidate(h) for h in hypotheses])
        return results

    def beam_tree(self, text: str, beam: int | None = None) -> tuple[Translation, list[dict]]:
        """Beam search on one sentence, with its search tree: every candidate looked at, as
        {"id", "parent", "token", "log_prob", "step", "status"}; status is "root", "kept",
        "finished" (ended in EOS) or "pruned" (fell out of the beam)."""
        dc = self.config.decoding
        beam = dc.beam if beam is None else beam
        src_ids = self.src_subwords.encode([text])[0]
        batch = make_batch([src_ids])
        recorder = BeamRecorder(1, beam)
        with torch.inference_mode():
            limits = max_output_lengths(batch.src_lengths, dc.max_length_ratio, dc.max_length_offset)
            [hypotheses] = beam_search(self.model, batch.src, batch.src_lengths, limits, beam=beam, n_best=beam,
                                       alpha=dc.length_penalty, record=recorder)
        translation = Translation(text, self.src_subwords.pieces(src_ids + [EOS]),
                                  [self._candidate(h) for h in hypotheses])
        nodes = [{**asdict(node), "token": self.tgt_subwords.pieces([node.token])[0]} for node in recorder.trees[0]]
        return translation, nodes

    def trace(self, text: str, top_k: int = 5):
        """Greedy translation of one sentence with every quantity of every decoder step
        (scores, weights, context, state, top-k next tokens): see attnmt.trace."""
        from attnmt.trace import trace

        return trace(self, text, top_k)

    def _candidate(self, hypothesis) -> Candidate:
        attention = None if hypothesis.attention is None else hypothesis.attention.numpy()
        return Candidate(self.tgt_subwords.decode(hypothesis.tokens), self.tgt_subwords.pieces(hypothesis.tokens),
                         hypothesis.score, attention)


def load(folder: str | Path, checkpoint: str = "best") -> Translator:
    """Loads a trained model folder (the ``experiment_dir`` of its config)."""
    return Translator(folder, checkpoint)
