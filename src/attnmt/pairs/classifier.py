"""Python API of a sentence-pair classifier (task: pairs): load a trained folder, classify pairs,
see every step of the decomposable attention model.

    >>> import attnmt
    >>> model = attnmt.load("runs/quickstart-pairs/model")
    >>> [r] = model.classify([("three red cars are parked", "three blue cars are parked")])
    >>> r.label, r.probabilities, r.premise_attention.shape
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import torch
import torch.nn.functional as F

from attnmt.core.config import Config, PairFiles
from attnmt.core.devices import model_device, to_numpy
from attnmt.core.errors import AttnmtError
from attnmt.core.folders import inference_device, inside_folder, load_model, model_config, weights_path
from attnmt.data.batching import inference_batches, pad
from attnmt.data.subwords import EOS, Subwords, subword_paths, valid_text
from attnmt.pairs.data import EncodedPairs, check_labels, encode_pairs, read_pairs
from attnmt.pairs.evaluation import classification_report
from attnmt.pairs.model import DecomposableAttention, PairOutput, build_pair_model


@dataclass
class PairBatch:
    premise: torch.Tensor  # (B,la) ids padded with PAD, each sentence ending in EOS
    hypothesis: torch.Tensor  # (B,lb)
    labels: torch.Tensor | None = None  # (B,) class indices

    def to(self, device: torch.device) -> PairBatch:
        if device.type == "cpu":
            return self
        return PairBatch(
            self.premise.to(device), self.hypothesis.to(device), None if self.labels is None else self.labels.to(device)
        )


def pair_batch(premise_ids: list[list[int]], hypothesis_ids: list[list[int]], labels: list[int] | None = None):
    return PairBatch(
        pad(premise_ids)[0], pad(hypothesis_ids)[0], None if labels is None else torch.tensor(labels, device="cpu")
    )  # made on the CPU, then moved


@torch.inference_mode()
def run_pairs(
    model: DecomposableAttention, premise_ids: list[list[int]], hypothesis_ids: list[list[int]], batch_size: int
) -> Iterator[tuple[list[int], PairOutput]]:
    """The model's outputs for the pairs, in batches of similar length: (indices, their outputs)."""
    model.eval()
    device = model_device(model)
    sizes = [max(len(p), len(h)) for p, h in zip(premise_ids, hypothesis_ids)]
    for indices in inference_batches(sizes, batch_size):
        batch = pair_batch([premise_ids[i] for i in indices], [hypothesis_ids[i] for i in indices]).to(device)
        yield indices, model(batch.premise, batch.hypothesis)


def predict(model: DecomposableAttention, data: EncodedPairs, batch_size: int) -> tuple[list[int], float]:
    """The predicted class of every pair of ``data``, and the mean cross-entropy against its labels."""
    predicted, loss = [0] * len(data), 0.0
    for indices, out in run_pairs(model, data.premise_ids, data.hypothesis_ids, batch_size):
        gold = torch.tensor([data.label_ids[i] for i in indices], device=out.logits.device)
        loss += float(F.cross_entropy(out.logits.float(), gold, reduction="sum"))
        for i, label in zip(indices, out.logits.argmax(dim=-1).tolist()):
            predicted[i] = label
    return predicted, loss / len(data)


@dataclass
class PairResult:
    """One pair and every step of the model on it. Matrices have the premise's tokens as rows and the
    hypothesis's as columns (each sentence ends in "</s>")."""

    premise: str
    hypothesis: str
    premise_tokens: list[str]  # subword pieces, ending in "</s>"
    hypothesis_tokens: list[str]
    label: str  # the most probable class
    probabilities: dict[str, float]  # of every class, in the model's order of labels
    scores: np.ndarray  # attend: e_ij = F(a_i)^T F(b_j)
    premise_attention: np.ndarray  # softmax_j(e_ij): row i, what premise word i attends to (beta_i); rows sum to 1
    hypothesis_attention: np.ndarray  # softmax_i(e_ij): column j, what hypothesis word j attends to (alpha_j)
    compared_premise: np.ndarray  # compare: v1_i = G([a_i; beta_i]), one row per premise token
    compared_hypothesis: np.ndarray  # v2_j = G([b_j; alpha_j]), one row per hypothesis token
    premise_summary: np.ndarray  # aggregate: v1 = sum_i v1_i
    hypothesis_summary: np.ndarray  # v2 = sum_j v2_j
    class_scores: np.ndarray  # y = H([v1; v2]), one per label, before the softmax
    truncated: bool = False  # a sentence had more than max_tokens pieces: its first max_tokens were used
    # what made the attention of the scores: softmax, or sparsemax or entmax15 (exact zeros; the
    # model's attention_normalizer)
    normalizer: str = "softmax"

    @property
    def labels(self) -> list[str]:
        return list(self.probabilities)

    def _repr_html_(self) -> str:  # Jupyter: the attention with the label
        from attnmt.pairs.figures import show_pair

        return show_pair(self)._repr_html_()

    def attention(self, direction: str = "premise") -> np.ndarray:
        """premise_attention ("premise": rows sum to 1) or hypothesis_attention ("hypothesis": columns sum to 1)."""
        if direction not in DIRECTIONS:
            raise AttnmtError(f"direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
        return self.premise_attention if direction == "premise" else self.hypothesis_attention


DIRECTIONS = ("premise", "hypothesis")


class PairClassifier:
    """A trained decomposable attention model with its vocabulary and labels."""

    inputs = "pairs"
    what = "a sentence-pair classifier"

    def __init__(self, folder: str | Path, checkpoint: str = "best", device: str | torch.device = "cpu"):
        self.device = inference_device(device)
        self.folder = Path(folder)
        self.config: Config = model_config(self.folder)
        if self.config.task != "pairs":
            raise AttnmtError(f"{self.folder}: a {self.config.task} model, not a sentence-pair classifier")
        self.labels: list[str] = self.config.data.labels
        check_labels(self.labels, f"{self.folder / 'config.yaml'}: data.labels")  # (they are written by classify)
        self.subwords = Subwords(inside_folder(self.folder, subword_paths(self.folder, joint=True)[0]))
        self.model = load_model(
            partial(build_pair_model, self.config.model, len(self.subwords), len(self.labels)),
            weights_path(self.folder, checkpoint),
            self.device,
        )

    @property
    def test_sets(self) -> dict[str, PairFiles]:
        """The test sets of the model's config (data.test), name -> files."""
        return dict(self.config.data.test)

    def describe(self) -> dict:
        """What the model is, as the server's /models says it (no decoder: its other fields None or 0)."""
        none = dict.fromkeys(
            ("rnn_type", "input_feeding", "decoder_hidden", "d_model", "heads", "feed_forward", "norm")
        )
        return {
            "type": "decomposable",
            "attention": "decomposable",
            "encoder_layers": 0,
            "decoder_layers": 0,
            "beam": 0,
            "labels": self.labels,
            **none,
            "attention_normalizer": self.config.model.attention_normalizer,
        }

    def files_of_test_set(self, files: PairFiles) -> list[Path]:
        """Every file a test set of the config reads (attnmt.data.test_sets keeps them inside the folder)."""
        return [files.tsv]

    def files_like_training(self, path: str | Path) -> PairFiles:
        """A TSV file whose columns are those of the training data (data.train)."""
        return self.config.data.train.model_copy(update={"tsv": Path(path)})

    def classify(
        self, pairs: list[tuple[str, str]], batch_size: int = 64, max_tokens: int | None = None
    ) -> list[PairResult]:
        """One PairResult per (premise, hypothesis), in order. A sentence of more than ``max_tokens``
        subword pieces is cut to its first ``max_tokens`` (its result says ``truncated``)."""
        if isinstance(pairs, tuple) and len(pairs) == 2 and all(isinstance(s, str) for s in pairs):
            raise TypeError("classify() takes a list of (premise, hypothesis) pairs; wrap a single pair in a list")
        pairs = [(valid_text(p), valid_text(h)) for p, h in pairs]
        for number, (premise, hypothesis) in enumerate(pairs, start=1):
            if not premise.strip() or not hypothesis.strip():
                raise AttnmtError(f"pair {number}: the {'premise' if not premise.strip() else 'hypothesis'} is empty")
        premises, truncated_p = self._encode([p for p, _ in pairs], max_tokens)
        hypotheses, truncated_h = self._encode([h for _, h in pairs], max_tokens)
        results: list[PairResult | None] = [None] * len(pairs)
        for indices, out in run_pairs(self.model, premises, hypotheses, batch_size):
            for row, i in enumerate(indices):
                results[i] = self._result(
                    pairs[i], premises[i], hypotheses[i], out, row, truncated_p[i] or truncated_h[i]
                )
        return results

    def _encode(self, texts: list[str], max_tokens: int | None) -> tuple[list[list[int]], list[bool]]:
        ids = self.subwords.encode(texts)
        truncated = [max_tokens is not None and len(s) > max_tokens for s in ids]
        return [(s[:max_tokens] if cut else s) + [EOS] for s, cut in zip(ids, truncated)], truncated

    def _result(
        self,
        pair: tuple[str, str],
        premise: list[int],
        hypothesis: list[int],
        out: PairOutput,
        row: int,
        truncated: bool,
    ) -> PairResult:
        la, lb = len(premise), len(hypothesis)

        def take(tensor: torch.Tensor, *lengths: int) -> np.ndarray:
            return to_numpy(tensor[(row, *(slice(n) for n in lengths))].float())

        probabilities = torch.softmax(out.logits[row].float(), dim=-1).tolist()
        return PairResult(
            *pair,
            self.subwords.pieces(premise),
            self.subwords.pieces(hypothesis),
            self.labels[int(np.argmax(probabilities))],
            dict(zip(self.labels, probabilities)),
            take(out.scores, la, lb),
            take(out.premise_weights, la, lb),
            take(out.hypothesis_weights, la, lb),
            take(out.compared_premise, la),
            take(out.compared_hypothesis, lb),
            take(out.premise_summary),
            take(out.hypothesis_summary),
            take(out.logits),
            truncated,
            self.config.model.attention_normalizer,
        )

    def evaluate(
        self, files: PairFiles, batch_size: int = 64, max_tokens: int | None = None, log: Callable[[str], None] = print
    ) -> dict:
        """Accuracy, per-class precision, recall and F1, and the confusion matrix on a labelled TSV
        file (see attnmt.pairs.evaluation.classification_report), with the predicted label of each pair.
        A sentence of more than ``max_tokens`` subword pieces is cut to its first ``max_tokens``,
        with a warning naming its line, so that no line can ask for unbounded work."""
        name = str(files.tsv)
        data = encode_pairs(read_pairs(files), self.subwords, self.labels, name, None, log=lambda message: None)
        for i, size in enumerate(data.sizes() if max_tokens is not None else []):
            if size > max_tokens + 1:  # (+1: the EOS)
                data.premise_ids[i] = _cut(data.premise_ids[i], max_tokens)
                data.hypothesis_ids[i] = _cut(data.hypothesis_ids[i], max_tokens)
                log(
                    f"warning: {name}, line {data.corpus.lines[i]}: more than {max_tokens} subword tokens in a "
                    f"sentence; its first {max_tokens} were used (--max-tokens)"
                )
        predicted, loss = predict(self.model, data, batch_size)
        report = classification_report(data.corpus.labels, [self.labels[p] for p in predicted], self.labels)
        report.update(
            loss=loss, dropped_empty=data.corpus.dropped_empty, predictions=[self.labels[p] for p in predicted]
        )
        return report

    def translate(self, *args, **kwargs):
        raise AttnmtError(
            f"{self.folder} is a sentence-pair classifier (task: pairs), not a translation model: "
            "use classify() (attnmt classify MODEL_DIR with premise<TAB>hypothesis lines)"
        )


def _cut(ids: list[int], max_tokens: int) -> list[int]:
    """Ids ending in EOS, cut to ``max_tokens`` pieces and the EOS."""
    return ids if len(ids) <= max_tokens + 1 else ids[:max_tokens] + [EOS]


# ------------------------------------------------------------------------------ attnmt classify


def parse_pair_line(line: str, number: int) -> tuple[str, str]:
    """premise<TAB>hypothesis (further columns ignored); AttnmtError naming the line otherwise."""
    fields = line.split("\t")
    if len(fields) < 2:
        raise AttnmtError(f"line {number}: expected premise<TAB>hypothesis, found no tab")
    premise, hypothesis = fields[0], fields[1]
    for side, text in (("premise", premise), ("hypothesis", hypothesis)):
        if not text.strip():
            raise AttnmtError(f"line {number}: the {side} is empty")
    return premise, hypothesis


def format_result(result: PairResult) -> str:
    """label<TAB>LABEL=probability ... (every class, in the model's order)."""
    return result.label + "\t" + " ".join(f"{label}={p:.4f}" for label, p in result.probabilities.items())


def classify_lines(
    model: PairClassifier, lines: list[str], batch_size: int = 64, max_tokens: int | None = None
) -> tuple[list[str], list[str], list[str]]:
    """One output line per input line, in order: the label and probabilities of a pair, or
    "ERROR<TAB>message" for a line that is not one; the messages of those errors; warnings (a
    sentence cut to ``max_tokens``)."""
    outputs: list[str | None] = [None] * len(lines)
    errors, warnings, good = [], [], []
    for number, line in enumerate(lines, start=1):
        try:
            good.append((number - 1, parse_pair_line(line, number)))
        except AttnmtError as e:
            outputs[number - 1] = f"ERROR\t{e}"
            errors.append(str(e))
    results = model.classify([pair for _, pair in good], batch_size, max_tokens) if good else []
    for (index, _), result in zip(good, results):
        outputs[index] = format_result(result)
        if result.truncated:
            warnings.append(
                f"line {index + 1}: more than {max_tokens} subword tokens in a sentence; its first "
                f"{max_tokens} were used (--max-tokens)"
            )
    return outputs, errors, warnings
