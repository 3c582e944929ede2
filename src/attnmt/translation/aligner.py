"""Training an alignment layer (attnmt.translation.alignment_layer) on a frozen translation model,
its own config file, and the folder it is written to.

    attnmt train-aligner aligner.yaml       # model: runs/en-fr  (the rest has defaults)
    attnmt align runs/en-fr --aligner runs/en-fr/aligner --src ... --tgt ...

The folder holds ``aligner.yaml`` (the config, paths absolute) and ``aligner.safetensors`` (the
layer, stamped with the SHA-256 of the translation model's weights it was trained on: an aligner
is used only with those weights).
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Callable, Literal

import torch
from pydantic import Field
from torch import Tensor

from attnmt.core import threads
from attnmt.core.checkpoint import load_weights, save_model, tensor_shapes
from attnmt.core.config import CorpusFiles, Section, config_to_yaml, read_yaml_file, resolve_paths, validated
from attnmt.core.errors import AttnmtError
from attnmt.core.files import atomic_write_text, file_sha256
from attnmt.core.folders import inference_device, model_config, weights_path
from attnmt.data.batching import Batch, epoch_batches, training_batch
from attnmt.data.corpus import read_corpus
from attnmt.data.subwords import PAD
from attnmt.seq2seq.inference import Translator
from attnmt.translation.agreement import NO_WORD, disagreement, piece_words, word_index_tensor, word_posteriors
from attnmt.translation.alignment_layer import AlignmentLayer, frozen_features, layer_for
from attnmt.translation.prepare import training_corpus

CONFIG_FILE, WEIGHTS_FILE = "aligner.yaml", "aligner.safetensors"
LOG_EVERY = 100  # steps between two lines of the log


class AlignerConfig(Section):
    model: Path  # the folder of a trained translation model; it stays frozen
    checkpoint: Literal["best", "last"] = "best"  # which of its weights
    out: Path | None = None  # where the aligner is written; default MODEL/aligner
    # the pairs it learns from; default the model's own training pairs (data.train less held-out sets)
    train: CorpusFiles | None = None
    size: int = Field(256, gt=0)  # d: the prior's query and key size, the lexicon's embedding size
    # D: a learnt bias of the prior for each distance from the diagonal, in this many buckets (0:
    # none), and p0: the prior of a NULL word that explains target words no source word wrote (0:
    # none). With both, E4's AER fell in every direction and symmetrization (docs/alignment.md).
    diagonal_buckets: int = Field(41, ge=0)
    null_prior: float = Field(0.1, ge=0, lt=1)
    # w: a learnt jump term (where the previous target piece went, +-w pieces), as in an HMM (0:
    # none); another point off every E4 figure (docs/alignment.md)
    jump_width: int = Field(8, ge=0)
    # agreement training (Liang et al. 2006; attnmt.translation.agreement): the layer of the model
    # of the opposite direction (fr->en for an en->fr model) trained at the same time, on the same
    # pairs, each rewarded with weight ``agreement`` for the links the other finds; written to
    # backward_out (default BACKWARD_MODEL/aligner); 4 measured best of 1, 4, 8 and 16 on E4 (docs/alignment.md)
    backward_model: Path | None = None
    backward_out: Path | None = None
    agreement: float = Field(4.0, ge=0)
    steps: int = Field(3000, gt=0)
    # the first steps learn the lexicon alone, under a uniform prior (IBM model 1, as statistical
    # aligners start): learnt together from the start, the prior can settle on one source piece
    # whose lexicon then predicts every target piece alike
    lexicon_steps: int = Field(500, ge=0)
    batch_size: int = Field(64, gt=0)  # sentence pairs per step
    learning_rate: float = Field(0.003, gt=0)  # Adam
    seed: int = 42
    device: str = "cpu"
    threads: int | None = Field(None, gt=0)

    @property
    def folder(self) -> Path:
        return self.out if self.out is not None else self.model / "aligner"

    def backward(self) -> AlignerConfig:
        """The config of the backward direction's layer, as written to its folder: its model is
        backward_model, its partner this one."""
        return self.model_copy(update={"model": self.backward_model, "out": self.backward_out or
                                       self.backward_model / "aligner", "backward_model": self.model,
                                       "backward_out": self.folder})


def load_aligner_config(path: str | Path) -> AlignerConfig:
    """The config file, its relative paths read from its folder (as in a training config)."""
    path = Path(path)
    config = validated(AlignerConfig, read_yaml_file(path), source=str(path))
    for section in (config, config.train):
        resolve_paths(section, path.resolve().parent)
    return config


def _translation_model(config: AlignerConfig, field: str = "model") -> Translator:
    """config.model, frozen; errors name ``field``, the config field that gave it."""
    if not config.model.is_dir():
        raise AttnmtError(f"{field}: {config.model}: no such folder (a trained translation model)")
    task = model_config(config.model).task
    if task != "translation":
        raise AttnmtError(f"{field}: {config.model} is a model of task {task}, not a translation model")
    translator = Translator(config.model, config.checkpoint, device=config.device)
    for parameter in translator.model.parameters():
        parameter.requires_grad_(False)
    return translator


def _training_texts(config: AlignerConfig, translator: Translator,
                    log: Callable[[str], None]) -> tuple[list[str], list[str]]:
    """The (source, target) texts the layer learns from: train, or the model's own training pairs."""
    corpus = training_corpus(translator.config, log) if config.train is None else read_corpus(config.train.as_spec())
    return corpus.sources, corpus.targets


def _within_limit(translator: Translator, src_ids: list[list[int]], tgt_ids: list[list[int]]) -> list[bool]:
    limit = translator.config.data.max_length
    return [limit is None or max(len(s), len(t)) <= limit for s, t in zip(src_ids, tgt_ids)]


class _Direction:
    """One direction of training: its frozen model, its layer and the pairs encoded for it (with,
    for agreement training, the word index of every piece)."""

    def __init__(self, config: AlignerConfig, translator: Translator, sources: list[str], targets: list[str]):
        self.translator = translator
        self.src_ids, self.tgt_ids = translator.src_subwords.encode(sources), translator.tgt_subwords.encode(targets)
        self.layer = layer_for(translator.model, len(translator.src_subwords), len(translator.tgt_subwords),
                               config.size, config.diagonal_buckets, config.null_prior,
                               config.jump_width).to(translator.device)

    def keep(self, kept: list[int]):
        self.src_ids, self.tgt_ids = [self.src_ids[i] for i in kept], [self.tgt_ids[i] for i in kept]

    def words(self) -> tuple[list[list[int]], list[list[int]]]:
        """The piece -> word indices of every pair's source and target."""
        def of(subwords, ids):
            return [piece_words(subwords.pieces(piece_ids)) for piece_ids in ids]

        return of(self.translator.src_subwords, self.src_ids), of(self.translator.tgt_subwords, self.tgt_ids)

    def batch(self, indices: list[int]) -> Batch:
        return training_batch([self.src_ids[i] for i in indices],
                              [self.tgt_ids[i] for i in indices]).to(self.translator.device)

    def explain(self, batch: Batch, uniform_prior: bool) -> tuple[Tensor, Tensor]:
        """-log p of the batch's real target pieces (summed) and the layer's piece posteriors r (B,T,S)."""
        features = frozen_features(self.translator.model, batch)
        log_output, alignment = self.layer(*features, batch.src, batch.tgt_out, uniform_prior)
        return -log_output[batch.tgt_out != PAD].sum(), alignment


def _directions(config: AlignerConfig, log: Callable[[str], None]) -> list[_Direction]:
    """The forward direction, and with backward_model the backward one on the same pairs (its
    source the forward target); pairs longer than either model's data.max_length left out."""
    translator = _translation_model(config)
    sources, targets = _training_texts(config, translator, log)
    directions = [_Direction(config, translator, sources, targets)]
    if config.backward_model is not None:
        backward = _translation_model(config.backward(), "backward_model")
        directions.append(_Direction(config, backward, targets, sources))
    fits = [all(ok) for ok in zip(*(_within_limit(d.translator, d.src_ids, d.tgt_ids) for d in directions))]
    kept = [i for i, ok in enumerate(fits) if ok]
    if not kept:
        raise AttnmtError(f"train: no sentence pair within the model's data.max_length "
                          f"({translator.config.data.max_length} pieces)")
    if len(kept) < len(fits):
        log(f"aligner: left out {len(fits) - len(kept)} pair(s) longer than data.max_length pieces")
        for direction in directions:
            direction.keep(kept)
    return directions


class _Agreement:
    """The word indices of both directions' pieces and the pairs whose words the two models cut alike."""

    def __init__(self, forward: _Direction, backward: _Direction):
        (self.src_f, self.tgt_f), (self.src_b, self.tgt_b) = forward.words(), backward.words()
        count = lambda words: max(words, default=NO_WORD) + 1  # noqa: E731
        self.alike = [count(self.src_f[i]) == count(self.tgt_b[i]) and count(self.tgt_f[i]) == count(self.src_b[i])
                      for i in range(len(self.src_f))]

    def loss(self, indices: list[int], forward: tuple[Batch, Tensor], backward: tuple[Batch, Tensor]) -> Tensor:
        """The summed squared disagreement of the two directions' word posteriors, over the batch."""
        def words_of(batch, alignment, src_words, tgt_words):
            tgt = word_index_tensor([tgt_words[i] for i in indices], batch.tgt_out.size(1))
            src = word_index_tensor([src_words[i] for i in indices], batch.src.size(1))
            return word_posteriors(alignment, tgt.to(alignment.device), src.to(alignment.device))

        agree = torch.tensor([self.alike[i] for i in indices], dtype=torch.float32)
        return disagreement(words_of(*forward, self.src_f, self.tgt_f), words_of(*backward, self.src_b, self.tgt_b),
                            agree.to(forward[1].device))

    def words(self, indices: list[int]) -> int:
        return sum(max(self.tgt_f[i], default=NO_WORD) + 1 for i in indices if self.alike[i])


def train_aligner(config: AlignerConfig, log: Callable[[str], None] = print) -> Path:
    """Trains the alignment layer of ``config`` (and with backward_model the backward direction's,
    by agreement) and writes its folder (their folders); returns the (forward) folder."""
    inference_device(config.device)
    threads.choose(config.threads, log)
    torch.manual_seed(config.seed)
    directions = _directions(config, log)
    agreement = _Agreement(*directions) if len(directions) == 2 else None
    optimizer = torch.optim.Adam([p for d in directions for p in d.layer.parameters()], lr=config.learning_rate)
    forward = directions[0]
    log(f"aligner: training a layer of size {config.size} on {len(forward.src_ids):,} pairs, the model in "
        f"{config.model} frozen" + (f", and by agreement (weight {config.agreement}) one on {config.backward_model}"
                                    if agreement else "") + f", {config.steps} steps")
    sizes = [max(len(s), len(t)) + 1 for s, t in zip(forward.src_ids, forward.tgt_ids)]
    totals, started, step, epoch = [0.0] * 4, time.perf_counter(), 0, 0  # nll, pieces, disagreement, words
    while step < config.steps:
        for indices in epoch_batches(sizes, config.batch_size, None, 100, config.seed, epoch):
            uniform = step < config.lexicon_steps
            batches = [d.batch(indices) for d in directions]
            explained = [d.explain(b, uniform) for d, b in zip(directions, batches)]
            loss = sum(nll / b.target_tokens for (nll, _), b in zip(explained, batches))
            totals[0] += float(explained[0][0].detach())
            totals[1] += batches[0].target_tokens
            if agreement is not None:
                words = max(agreement.words(indices), 1)
                disagreeing = agreement.loss(indices, (batches[0], explained[0][1]), (batches[1], explained[1][1]))
                loss = loss + config.agreement * disagreeing / words
                totals[2], totals[3] = totals[2] + float(disagreeing.detach()), totals[3] + words
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            if step % LOG_EVERY == 0 or step == config.steps:
                log(f"aligner: step {step}/{config.steps}, epoch {epoch + 1}: loss {totals[0] / totals[1]:.3f} per "
                    "target piece" + (f", disagreement {totals[2] / totals[3]:.3f} per word" if agreement else "")
                    + f" ({time.perf_counter() - started:.0f} s)")
                totals = [0.0] * 4
            if step == config.steps:
                break
        epoch += 1
    if agreement is not None:
        _save(config.backward(), directions[1].layer, directions[1].translator)
    return _save(config, forward.layer, forward.translator)


def _save(config: AlignerConfig, layer: AlignmentLayer, translator: Translator) -> Path:
    folder = config.folder
    folder.mkdir(parents=True, exist_ok=True)
    stamp = {"model_weights_sha256": file_sha256(weights_path(config.model, config.checkpoint)),
             "src_vocab": len(translator.src_subwords), "tgt_vocab": len(translator.tgt_subwords)}
    save_model(layer, folder / WEIGHTS_FILE, stamp)
    atomic_write_text(folder / CONFIG_FILE, config_to_yaml(config))
    return folder


def load_aligner(folder: str | Path, translator: Translator) -> AlignmentLayer:
    """The alignment layer in ``folder``, for ``translator``: an error unless it was trained on the
    very weights ``translator`` holds."""
    folder = Path(folder)
    config_path, weights = folder / CONFIG_FILE, folder / WEIGHTS_FILE
    if not config_path.is_file() or not weights.is_file():
        raise AttnmtError(f"{folder}: not an aligner folder (no {CONFIG_FILE} and {WEIGHTS_FILE}; "
                          "attnmt train-aligner writes them)")
    config = validated(AlignerConfig, read_yaml_file(config_path), source=str(config_path))
    shapes = tensor_shapes(weights)
    if not {"W_q.weight", "W_k.weight", "E.weight", "W_o.weight"} <= shapes.keys():
        raise AttnmtError(f"{weights}: not the weights of an alignment layer")
    size, memory_size = shapes["W_k.weight"]
    layer = AlignmentLayer(shapes["W_q.weight"][1], memory_size, shapes["E.weight"][0], shapes["W_o.weight"][0], size,
                           shapes["D"][0] if "D" in shapes else 0, 0.5 if "p0" in shapes else 0.0,  # (p0: loaded)
                           (shapes["J"][0] - 1) // 2 if "J" in shapes else 0)
    stamp = load_weights(layer, weights)
    if not _made_for(stamp, translator):
        raise AttnmtError(f"{folder}: this aligner was trained on the weights of {config.model} "
                          f"({config.checkpoint}), not on those of {translator.weights}: train one for this model "
                          "with attnmt train-aligner")
    return layer.to(translator.device).eval()


def _made_for(stamp: dict, translator: Translator) -> bool:
    return stamp.get("model_weights_sha256") == file_sha256(translator.weights)


class OutputAligner:
    """Word links of (source, output) pairs from an alignment layer trained on ``translator``:
    what ``Translator.aligner`` holds, so that its translations' links (``Translation.alignment``,
    ``translate(align=True)``, the server's ``"align": true``, ``attnmt translate --report-align``)
    come from the layer rather than from the attention."""

    def __init__(self, folder: str | Path, translator: Translator):
        self.folder = Path(folder)
        self.layer = load_aligner(folder, translator)
        self.translator = translator

    def __call__(self, sources: list[str], outputs: list[str], method: str | None = None, threshold: float = 0.5,
                 batch_size: int = 32) -> list[list[tuple[int, int]]]:
        from attnmt.translation.align import align

        return align(self.translator, sources, outputs, batch_size, method, threshold, aligner=self.layer)

    def __repr__(self) -> str:
        return f"OutputAligner({str(self.folder)!r})"


def folder_aligner(translator: Translator) -> OutputAligner | None:
    """The aligner of the model's own folder, MODEL/aligner (where attnmt train-aligner writes it by
    default), if there is one and it was trained on the weights ``translator`` holds; otherwise
    None (its links come from the attention), with a warning if it was trained on other weights."""
    folder = translator.folder / "aligner"
    if not (folder / CONFIG_FILE).is_file() or not (folder / WEIGHTS_FILE).is_file():
        return None
    try:
        return OutputAligner(folder, translator)
    except AttnmtError as error:
        warnings.warn(f"word links from the attention, not from the aligner: {error}", stacklevel=2)
        return None


def load_translator(folder: Path, checkpoint: str = "best", quantize: str | None = None,
                    device: str | torch.device = "cpu") -> Translator:
    """A translation model as attnmt.load gives it: with its folder's aligner (folder_aligner)."""
    translator = Translator(folder, checkpoint, quantize, device)
    translator.aligner = folder_aligner(translator)
    return translator
