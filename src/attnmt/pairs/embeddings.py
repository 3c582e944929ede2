"""The word embeddings a pair model starts from (model.embeddings of task: pairs):

    model: DIR     the embeddings of a trained attnmt translation model (its ``side``); the pair
                   model then uses that model's subwords (attnmt.pairs.data copies them)
    word2vec: FILE vectors trained with gensim's word2vec (skip-gram) on a text corpus, in the
                   pieces of the pair model's subwords; pieces the corpus lacks keep their random start

Multi30k's English side, the domain of SICK (image captions), is the corpus of docs/decomposable.md.
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Callable, Iterator

import torch
from torch import Tensor

from attnmt.core.checkpoint import read_checkpoint
from attnmt.core.config import EmbeddingsConfig, load_config
from attnmt.core.errors import AttnmtError
from attnmt.data.corpus import stream_lines
from attnmt.data.subwords import Subwords

# The embedding weights of each side of each kind of translation model (model.type, side).
EMBEDDING_WEIGHTS = {
    ("rnn", "src"): "encoder.embed.weight",
    ("rnn", "tgt"): "tgt_embed.weight",
    ("transformer", "src"): "src_embed.tokens.weight",
    ("transformer", "tgt"): "tgt_embed.tokens.weight",
}


def initial_embeddings(
    source: EmbeddingsConfig, subwords: Subwords, random_start: Tensor, seed: int, log: Callable[[str], None] = print
) -> Tensor:
    """The embedding matrix (vocabulary x size) to start from, in place of ``random_start``."""
    size = random_start.size(1)
    if source.model is not None:
        weights = translation_embeddings(source.model, source.side)
        what = f"the {source.side} embeddings of {source.model}"
    else:
        weights = word2vec_embeddings(source.word2vec, subwords, random_start, source.epochs, source.window, seed, log)
        what = f"word2vec vectors of {source.word2vec}"
    if tuple(weights.shape) != tuple(random_start.shape):
        raise AttnmtError(
            f"model.embeddings: {what} are {weights.size(0)} x {weights.size(1)}, the pair model's "
            f"{random_start.size(0)} x {size} (vocabulary x model.embedding_size): set "
            f"model.embedding_size: {weights.size(1)}"
        )
    return weights


def translation_embeddings(folder: Path, side: str) -> Tensor:
    """The embeddings of one side of a trained attnmt translation model (best checkpoint)."""
    config = load_config(folder / "config.yaml", saved=True)
    if config.task != "translation":
        raise AttnmtError(f"model.embeddings.model: {folder} is not a translation model (task: {config.task})")
    path = folder / "best.safetensors"
    tensors, _ = read_checkpoint(path if path.is_file() else folder / "last.safetensors")
    return tensors[EMBEDDING_WEIGHTS[config.model.type, side]].float()


def word2vec_embeddings(
    corpus: Path,
    subwords: Subwords,
    random_start: Tensor,
    epochs: int,
    window: int,
    seed: int,
    log: Callable[[str], None] = print,
) -> Tensor:
    """``random_start`` with the row of each piece that occurs in ``corpus`` replaced by its
    skip-gram vector, scaled to the spread of the random rows (so that neither kind dominates)."""
    try:
        from gensim.models import Word2Vec
    except ImportError:
        raise AttnmtError("model.embeddings.word2vec needs gensim: pip install 'attnmt[vectors]'") from None
    sentences = _EncodedLines(corpus, subwords)
    if next(iter(sentences), None) is None:
        raise AttnmtError(f"{corpus}: no sentences to train word2vec on")
    # One worker and a fixed hash: the same vectors at every run (gensim's default hash is Python's, salted).
    vectors = Word2Vec(
        sentences,
        vector_size=random_start.size(1),
        window=window,
        min_count=1,
        sg=1,
        workers=1,
        epochs=epochs,
        seed=seed,
        hashfxn=_stable_hash,
    ).wv
    weights = random_start.clone()
    known = [(i, piece) for i, piece in enumerate(subwords.pieces(range(len(subwords)))) if piece in vectors]
    if known:
        trained = torch.tensor(vectors[[piece for _, piece in known]], device=random_start.device)
        weights[[i for i, _ in known]] = trained * (random_start.std() / trained.std())
    log(
        f"word2vec on {sentences.count:,} sentences of {corpus}: vectors for {len(known):,} of the {len(subwords):,} "
        "subwords"
    )
    return weights


ENCODE_LINES = 2_000  # lines read and encoded at a time for word2vec


class _EncodedLines:
    """The non-blank lines of a text file as lists of pieces, read and encoded ENCODE_LINES at a
    time at each pass over them (gensim makes one for the vocabulary and one per epoch): the
    corpus streamed, never held. ``count``: the sentences of the last whole pass."""

    def __init__(self, path: Path, subwords: Subwords):
        self.path, self.subwords, self.count = path, subwords, 0

    def __iter__(self) -> Iterator[list[str]]:
        chunk, count = [], 0
        for line in stream_lines(self.path):
            if line.strip():
                chunk.append(line)
            if len(chunk) == ENCODE_LINES:
                yield from self.subwords.sp.encode(chunk, out_type=str)
                count, chunk = count + len(chunk), []
        if chunk:
            yield from self.subwords.sp.encode(chunk, out_type=str)
        self.count = count + len(chunk)


def _stable_hash(text: str) -> int:
    return zlib.crc32(text.encode("utf-8"))
