"""Subword vocabularies with sentencepiece, stored in the experiment folder.

Every model attnmt trains uses the same special ids (pad 0, unk 1, bos 2, eos 3), so
token ids mean the same thing in the model, the batches and the decoder.
A joint vocabulary is one model ``spm/joint.model`` for both sides; separate ones are
``spm/src.model`` and ``spm/tgt.model``.
"""

from __future__ import annotations

import os
import random
import re
import tempfile
from itertools import chain
from pathlib import Path
from typing import Callable, Iterable, TypeVar

import sentencepiece as spm
import yaml

from attnmt.core.config import Config, SubwordConfig, config_to_yaml
from attnmt.core.errors import AttnmtError
from attnmt.core.files import atomic_write_text, write_error

PAD, UNK, BOS, EOS = 0, 1, 2, 3

# The words whose pieces a Subwords keeps (``Subwords.encode``): at most about 30 MB of them.
WORD_CACHE_WORDS = 1 << 17

_LONE_SURROGATES = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """``text`` with lone surrogates (which JSON escapes like "\\ud800" and undecodable file names
    produce, and which UTF-8 cannot encode) replaced by U+FFFD, the replacement character."""
    return _LONE_SURROGATES.sub("\ufffd", text)


class Subwords:
    """One sentencepiece model: text <-> ids, and the pieces for display."""

    def __init__(self, path: Path, threads: int = -1):
        """``threads``: how many threads encode a list of texts (-1: as many as the machine has cores)."""
        self.path = Path(path)
        try:
            self.sp = spm.SentencePieceProcessor(model_file=str(path), num_threads=threads)
        except (OSError, RuntimeError) as e:
            raise AttnmtError(f"{path}: not a valid sentencepiece model ({e})") from None
        # each word's pieces (None: a word the model's normalization changes), where words are cut alone
        self._word_pieces: dict[str, list[int] | None] | None = {} if cuts_words_alone(self.sp) else None

    def __len__(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, texts: list[str]) -> list[list[int]]:
        """Each text's piece ids, as sentencepiece cuts the text.

        Where the model cuts each word on its own (``cuts_words_alone``: attnmt's models, OPUS-MT's),
        a text's pieces are its words' pieces one after the other. So a word is cut by sentencepiece
        once and its pieces kept (at most WORD_CACHE_WORDS words, then forgotten all at once): in a
        corpus most words come back, and looking one up costs a fraction of cutting it (3.6x faster
        on one core). Only a word that the model's normalization leaves as it is, alone, is kept (not
        one that NFKC or case folding change: its texts are cut whole), and only texts whose spaces
        are those sentencepiece sees take that way (``_spaced_as_sentencepiece_sees``); any other
        text is cut whole. (A word normalized alone is normalized as in any text: a space is a
        starter, which NFKC's reordering and composition never cross.)"""
        words = self._word_pieces
        if words is None:
            return self._cut_whole(texts)
        pieces: list[list[int] | None] = [None] * len(texts)
        whole = []
        look_up = words.__getitem__
        for i, text in enumerate(texts):
            if _spaced_as_sentencepiece_sees(text):
                try:
                    pieces[i] = list(chain.from_iterable(map(look_up, text.split())))
                    continue
                except (KeyError, TypeError):  # a word not seen yet, or one that is not cut alone (None)
                    pass
            whole.append(i)
        if whole:
            self._keep_words([texts[i] for i in whole])
            for i, ids in zip(whole, self._cut_whole([texts[i] for i in whole])):
                pieces[i] = ids
        return pieces

    def _cut_whole(self, texts: list[str]) -> list[list[int]]:
        return self.sp.encode([valid_text(t) for t in texts], out_type=int)

    def _keep_words(self, texts: list[str]):
        """The pieces of the words of ``texts`` not kept yet, cut by sentencepiece."""
        words = self._word_pieces
        new = list(
            {
                word
                for text in texts
                if _spaced_as_sentencepiece_sees(text)
                for word in text.split()
                if word not in words
            }
        )
        if not new:
            return
        new = new[:WORD_CACHE_WORDS]
        if len(words) + len(new) > WORD_CACHE_WORDS:
            words.clear()
        for word, normalized, ids in zip(new, self.sp.normalize(new), self.sp.encode(new, out_type=int)):
            words[word] = ids if normalized == "▁" + word else None

    def decode(self, ids: list[int]) -> str:
        return self.sp.decode(ids)

    def pieces(self, ids: list[int]) -> list[str]:
        return [self.sp.id_to_piece(i) for i in ids]

    def spellings(self) -> list[str]:
        """The text of every piece, in id order ("▁" for a space); "" for the pieces that spell no
        text (control, unknown, unused and byte pieces)."""
        sp = self.sp
        return [
            "" if sp.is_control(i) or sp.is_unknown(i) or sp.is_unused(i) or sp.is_byte(i) else sp.id_to_piece(i)
            for i in range(len(self))
        ]

    def vocabulary(self) -> list[tuple[str, float]]:
        """Every piece with its score, in id order: two models with the same vocabulary cut texts
        into the same ids (the file itself also names the text it was trained on)."""
        return [(self.sp.id_to_piece(i), self.sp.get_score(i)) for i in range(len(self))]


def _spaced_as_sentencepiece_sees(text: str) -> bool:
    """Whether str.split cuts ``text`` into the words sentencepiece sees: every character printable,
    so that the only whitespace is U+0020 (Python's split also cuts at tabs, U+001C-U+001F and
    U+0085, which sentencepiece's normalization maps to a space or removes)."""
    return text.isprintable()


def cuts_words_alone(sp: spm.SentencePieceProcessor) -> bool:
    """Whether the model cuts each space-separated word of a text on its own, so that the text's
    pieces are its words' pieces one after the other: a BPE, unigram or character model that
    splits at whitespace (sentencepiece's default), marks the start of each word with "▁"
    (the dummy prefix; whitespace not a suffix), collapses runs of spaces, and has no piece of its
    own that spans two words. (Read from the model's own settings, with protobuf.)"""
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(sp.serialized_model_proto())
    trainer, normalizer = proto.trainer_spec, proto.normalizer_spec
    kinds, piece = sentencepiece_model_pb2.TrainerSpec.ModelType, sentencepiece_model_pb2.ModelProto.SentencePiece
    spans_words = any(p.type == piece.USER_DEFINED and ("▁" in p.piece[1:] or " " in p.piece) for p in proto.pieces)
    return (
        trainer.model_type in (kinds.UNIGRAM, kinds.BPE, kinds.CHAR)
        and trainer.split_by_whitespace
        and not trainer.treat_whitespace_as_suffix
        and normalizer.add_dummy_prefix
        and normalizer.remove_extra_whitespaces
        and not spans_words
    )


def subword_paths(folder: Path, joint: bool) -> tuple[Path, Path]:
    folder = Path(folder) / "spm"
    if joint:
        return folder / "joint.model", folder / "joint.model"
    return folder / "src.model", folder / "tgt.model"


Trained = TypeVar("Trained")


def prepared_subwords(
    config: Config,
    paths: list[Path],
    train: Callable[[], Trained],
    load: Callable[[], Trained],
    log: Callable[[str], None] = print,
    force: bool = False,
    tags: list[str] = (),
) -> Trained:
    """The one way every task prepares its subwords: the models at ``paths`` (in the experiment's
    spm/) if they were trained with the config's data.subwords (spm/settings.yaml, written after
    them: without it an earlier prepare died half-way), read by ``load()``; else, or with
    ``force``, ``train()``. Models trained with other settings are an error, never silently
    reused. ``tags`` (pieces of their own, data.extra_train's) are settings too. Then the config is
    written into the folder, which holds everything the model needs."""
    folder = config.experiment_dir
    settings = folder / "spm" / "settings.yaml"
    wanted = config.data.subwords.model_dump(mode="json") | ({"tags": list(tags)} if tags else {})
    if all(path.is_file() for path in paths) and settings.is_file() and not force:
        stored = yaml.safe_load(settings.read_text(encoding="utf-8"))
        if {**SubwordConfig().model_dump(mode="json"), **stored} != wanted:  # (fields added since: defaults)
            raise AttnmtError(
                f"{settings.parent} holds subwords trained with other settings ({stored}); "
                "use 'attnmt prepare --force' to retrain them, or another experiment_dir"
            )
        log(f"subword model(s) already in {settings.parent}")
        subwords = load()
    else:
        subwords = train()
        atomic_write_text(settings, yaml.safe_dump(wanted))
    atomic_write_text(folder / "config.yaml", config_to_yaml(config))
    return subwords


def train_subwords(
    pairs: Iterable[tuple[str, str]], config: SubwordConfig, folder: Path, seed: int = 0, tags: list[str] = ()
) -> tuple[Subwords, Subwords]:
    """Trains the sentencepiece model(s) on the training pairs, read once as they come, and stores
    them in ``folder/spm``: a model learns from at most config.max_sentences of its sentences, a
    sample drawn while they pass (`Sample`); ``tags``: pieces of their own in the source vocabulary
    (always cut as one piece)."""
    src_path, tgt_path = subword_paths(folder, config.joint)
    _make_folder(src_path.parent)
    if config.joint:  # one sample of the sentences of both sides
        both = Sample(config.max_sentences, seed)
        for i, (source, target) in enumerate(pairs):
            both.add((0, i), source)
            both.add((1, i), target)
        _train_one(both.texts(), config, src_path, tags)
    else:  # (the same seed: the same lines of both sides, as long as they are as many)
        sources, targets = Sample(config.max_sentences, seed), Sample(config.max_sentences, seed)
        for i, (source, target) in enumerate(pairs):
            sources.add(i, source)
            targets.add(i, target)
        _train_one(sources.texts(), config, src_path, tags)
        _train_one(targets.texts(), config, tgt_path)
    return Subwords(src_path), Subwords(tgt_path)


def train_target_subwords(targets: Iterable[str], config: SubwordConfig, folder: Path, seed: int = 0) -> Subwords:
    """The target side alone, ``folder/spm/tgt.model`` (speech: the source is audio)."""
    _, tgt_path = subword_paths(folder, False)
    _make_folder(tgt_path.parent)
    sample = Sample(config.max_sentences, seed)
    for i, target in enumerate(targets):
        sample.add(i, target)
    _train_one(sample.texts(), config, tgt_path)
    return Subwords(tgt_path)


class Sample:
    """At most ``size`` texts of a stream, each as likely as any other to be kept, drawn as they
    pass (reservoir sampling, Vitter's algorithm R) with ``seed``, so that a corpus of any length
    costs the memory of ``size`` texts and the same corpus gives the same sample. ``texts()``: the
    kept ones in the order of their keys (a stream of at most ``size`` texts: all of them, in order)."""

    def __init__(self, size: int, seed: int):
        self.size, self.random, self.seen, self.kept = size, random.Random(seed), 0, []

    def add(self, key, text: str):
        if self.seen < self.size:
            self.kept.append((key, text))
        else:
            slot = self.random.randrange(self.seen + 1)
            if slot < self.size:
                self.kept[slot] = (key, text)
        self.seen += 1

    def texts(self) -> list[str]:
        return [text for _, text in sorted(self.kept, key=lambda kept: kept[0])]


def _make_folder(folder: Path):
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise AttnmtError(f"cannot create the folder {folder}: {e.strerror or e}") from None


def load_subwords(folder: Path, joint: bool) -> tuple[Subwords, Subwords]:
    src_path, tgt_path = subword_paths(folder, joint)
    for path in (src_path, tgt_path):
        if not path.is_file():
            raise AttnmtError(f"{path}: no subword model; run 'attnmt prepare' first")
    return Subwords(src_path), Subwords(tgt_path)


def _train_one(texts: list[str], config: SubwordConfig, path: Path, tags: list[str] = ()):
    try:
        with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
            prefix = os.path.join(tmp, "model")
            _train_sentencepiece(texts, config, prefix, tags)
            os.replace(prefix + ".model", path)  # atomic: a half-written model is never left behind
    except OSError as e:  # full disk, unwritable folder
        raise write_error(path, e) from None


def _train_sentencepiece(texts: list[str], config: SubwordConfig, prefix: str, tags: list[str] = ()):
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(texts),
            model_prefix=prefix,
            model_type=config.type,
            vocab_size=config.vocab_size,
            hard_vocab_limit=False,
            character_coverage=config.character_coverage,
            normalization_rule_name="nmt_nfkc_cf" if config.lowercase else "nmt_nfkc",
            pad_id=PAD,
            unk_id=UNK,
            bos_id=BOS,
            eos_id=EOS,
            num_threads=os.cpu_count() or 1,
            minloglevel=2,
            max_sentence_length=1 << 16,
            user_defined_symbols=list(tags),
        )
    except RuntimeError as e:
        raise AttnmtError(f"training the subword model failed: {e}") from None
