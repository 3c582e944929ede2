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

from attnmt.core import threads
from attnmt.core.checkpoint import load_weights, save_model, tensor_shapes
from attnmt.core.config import CorpusFiles, Section, config_to_yaml, read_yaml_file, resolve_paths, validated
from attnmt.core.errors import AttnmtError
from attnmt.core.files import atomic_write_text, file_sha256
from attnmt.core.folders import inference_device, model_config, weights_path
from attnmt.data.batching import epoch_batches, training_batch
from attnmt.data.corpus import read_corpus
from attnmt.seq2seq.inference import Translator
from attnmt.translation.alignment_layer import AlignmentLayer, layer_for
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


def load_aligner_config(path: str | Path) -> AlignerConfig:
    """The config file, its relative paths read from its folder (as in a training config)."""
    path = Path(path)
    config = validated(AlignerConfig, read_yaml_file(path), source=str(path))
    for section in (config, config.train):
        resolve_paths(section, path.resolve().parent)
    return config


def _translation_model(config: AlignerConfig) -> Translator:
    if not config.model.is_dir():
        raise AttnmtError(f"model: {config.model}: no such folder (a trained translation model)")
    task = model_config(config.model).task
    if task != "translation":
        raise AttnmtError(f"model: {config.model} is a model of task {task}, not a translation model")
    translator = Translator(config.model, config.checkpoint, device=config.device)
    for parameter in translator.model.parameters():
        parameter.requires_grad_(False)
    return translator


def _training_pairs(config: AlignerConfig, translator: Translator, log: Callable[[str], None]):
    """The encoded pairs the layer learns from, those longer than the model's data.max_length left out."""
    if config.train is None:
        corpus = training_corpus(translator.config, log)
    else:
        corpus = read_corpus(config.train.as_spec())
    src_ids = translator.src_subwords.encode(corpus.sources)
    tgt_ids = translator.tgt_subwords.encode(corpus.targets)
    limit = translator.config.data.max_length
    keep = [i for i in range(len(src_ids)) if limit is None or max(len(src_ids[i]), len(tgt_ids[i])) <= limit]
    if not keep:
        raise AttnmtError(f"train: no sentence pair within the model's data.max_length ({limit} pieces)")
    if len(keep) < len(src_ids):
        log(f"aligner: left out {len(src_ids) - len(keep)} pair(s) longer than {limit} pieces")
    return [src_ids[i] for i in keep], [tgt_ids[i] for i in keep]


def train_aligner(config: AlignerConfig, log: Callable[[str], None] = print) -> Path:
    """Trains the alignment layer of ``config`` and writes its folder; returns the folder."""
    inference_device(config.device)
    threads.choose(config.threads, log)
    translator = _translation_model(config)
    sources, targets = _training_pairs(config, translator, log)
    torch.manual_seed(config.seed)
    device = translator.device
    layer = layer_for(translator.model, len(translator.src_subwords), len(translator.tgt_subwords),
                      config.size, config.diagonal_buckets, config.null_prior, config.jump_width).to(device)
    optimizer = torch.optim.Adam(layer.parameters(), lr=config.learning_rate)
    log(f"aligner: training a layer of size {config.size} on {len(sources):,} pairs, the model in "
        f"{config.model} frozen, {config.steps} steps")
    sizes = [max(len(s), len(t)) + 1 for s, t in zip(sources, targets)]
    total, tokens, started, step, epoch = 0.0, 0, time.perf_counter(), 0, 0
    while step < config.steps:
        for indices in epoch_batches(sizes, config.batch_size, None, 100, config.seed, epoch):
            batch = training_batch([sources[i] for i in indices], [targets[i] for i in indices]).to(device)
            loss = layer.loss(translator.model, batch, uniform_prior=step < config.lexicon_steps)
            optimizer.zero_grad(set_to_none=True)
            (loss / batch.target_tokens).backward()
            optimizer.step()
            step, total, tokens = step + 1, total + float(loss.detach()), tokens + batch.target_tokens
            if step % LOG_EVERY == 0 or step == config.steps:
                log(f"aligner: step {step}/{config.steps}, epoch {epoch + 1}: loss {total / tokens:.3f} per "
                    f"target piece ({time.perf_counter() - started:.0f} s)")
                total, tokens = 0.0, 0
            if step == config.steps:
                break
        epoch += 1
    return _save(config, layer, translator)


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
