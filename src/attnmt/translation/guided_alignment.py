"""Guided alignment (Garg et al. 2019; also Chen et al. 2016): the attention is trained towards
reference word links beside the translation loss.

For a pair whose reference links each target piece t to the source pieces A_t, the reference
attention is uniform over them, and the loss is its cross-entropy with the model's attention a_t:

    q_t,j = 1 / |A_t|  for j in A_t (0 elsewhere)
    L_align = - sum over t with A_t non-empty of  sum_j q_t,j log a_t,j
    L = L_translation + weight * L_align

Both are sums over target tokens, divided together by the batch's tokens. Target pieces without
a link (unaligned words, EOS) add nothing. Word links become piece links: every piece of target
word j is linked to every piece of source word i ("units: words"); with "units: pieces" the file
counts pieces already (a character model's characters). The links come from a Pharaoh file of
one line per line of data.train, from eflomal run on the training text (grow-diag-final of
both directions, as Garg et al. do with GIZA++), or from the attention of a first model trained
without guidance ("links: self", Garg et al.'s alignment without an outside aligner: one direction,
or both symmetrized), cached in EXPERIMENT/alignment/. The file, the reference rows q and the loss
are attnmt.translation.reference_links's (the aligners are trained towards links too).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Callable, Iterable, Iterator

from torch import Tensor

from attnmt.core.config import Config, GuidedAlignment
from attnmt.core.errors import AttnmtError
from attnmt.core.files import atomic_write_text, atomic_writer, file_sha256, write_error
from attnmt.core.folders import model_config, weights_path
from attnmt.data import store
from attnmt.data.corpus import CorpusPairs, chunked
from attnmt.data.store import StoredPairs
from attnmt.data.subwords import UNK, Subwords
from attnmt.seq2seq.inference import Translator
from attnmt.seq2seq.links import without_eos
from attnmt.translation.align import (
    align,
    align_both_ways,
    default_method,
    format_pharaoh,
    grow_diag_final,
    piece_lists,
)
from attnmt.translation.aligner import load_aligner
from attnmt.translation.reference_links import stream_link_file
from attnmt.viz.words import word_spans

Link = tuple[int, int]  # (source index, target index), 0-based


def trained_attention(
    model, batch, guided: GuidedAlignment, window: tuple[int, int] | None = None
) -> tuple[Tensor, Tensor]:
    """Teacher forcing of ``batch``: what enters the output layer (B,T,H) and the attention that
    guided alignment trains (B,T,S): an RNN's attention (within ``window``), or the mean of the
    chosen heads of one Transformer decoder layer's cross-attention (with ``full_context``, of the
    pass that sees the whole target)."""
    if hasattr(model, "cross_attention_of"):
        states, weights = model.cross_attention_of(
            batch.src, batch.src_lengths, batch.tgt_in, guided.layer, guided.full_context
        )
        return states, weights[:, guided.heads].mean(dim=1)
    return model.decoder_outputs(batch.src, batch.src_lengths, batch.tgt_in, window)


def piece_links(word_links: list[Link], src_pieces: list[str], tgt_pieces: list[str]) -> list[Link] | None:
    """Word links (i, j) -> links between the pieces of source word i and those of target word j.
    None when the pieces do not make as many words as the links need (a pair to leave out)."""
    src_words, tgt_words = word_spans(src_pieces), word_spans(tgt_pieces)
    if any(i >= len(src_words) or j >= len(tgt_words) for i, j in word_links):
        return None
    return sorted({(s, t) for i, j in word_links for s in range(*src_words[i]) for t in range(*tgt_words[j])})


def eflomal_file(config: Config, pairs: Callable[[], Iterable[tuple[str, str]]], log: Callable[[str], None]) -> Path:
    """EXPERIMENT/alignment/train.eflomal.links: eflomal's grow-diag-final links of every training
    pair of ``pairs()`` (a new pass over the source and target texts at each call, their
    whitespace words separated by single spaces), computed once; a file made from other text is
    computed again. The pairs are read as they pass: once for their SHA-256 (the file's stamp: an
    unchanged text costs a read, nothing written), and where the links are made once more, their
    words written to eflomal's input files (in EXPERIMENT/alignment, removed after) and the links
    read back and written a line at a time."""
    from attnmt.translation.statistical_align import EflomalInput

    folder = config.experiment_dir / "alignment"
    path, stamp = folder / "train.eflomal.links", folder / "train.eflomal.sha256"
    if path.is_file() and stamp.is_file():
        digest = _TextDigest()
        for source, target in pairs():
            digest.add(source, target)
        if stamp.read_text().strip() == digest.hexdigest():
            return path
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise write_error(path, e) from None
    with EflomalInput(folder) as words:
        digest = _TextDigest()
        for source, target in pairs():
            digest.add(source, target)
            words.add(source, target)
        log(f"word links: aligning {words.pairs:,} training pairs with eflomal")
        with atomic_writer(path) as out:
            for forward, backward in words.links():
                out.write(format_pharaoh(grow_diag_final(forward, backward)) + "\n")
    atomic_write_text(stamp, digest.hexdigest() + "\n")
    return path


class _TextDigest:
    """The SHA-256 of pairs' texts, added a pair at a time: of "SOURCE\tTARGET" lines joined by
    "\n" (no newline after the last), the stamp of the links files made of them."""

    def __init__(self):
        self.sha, self.first = hashlib.sha256(), True

    def add(self, source: str, target: str):
        self.sha.update(("" if self.first else "\n").encode() + (source + "\t" + target).encode())
        self.first = False

    def hexdigest(self) -> str:
        return self.sha.hexdigest()


SELF_BATCH = 32  # pairs per batch of forced decoding (attnmt align's default; the links do not depend on it)
SELF_CHUNK = 10_000  # pairs aligned at a time (their attention matrices are held in memory)
SELF_READ = 2_000  # pairs read and encoded at a time, to check the vocabularies and find the usable pairs
UNKNOWN_LIMIT = 0.1  # a first round that does not know more of the training text's pieces has another vocabulary


def self_links_file(config: Config, pairs: Callable[[], Iterable[tuple[str, str]]], log: Callable[[str], None]) -> Path:
    """EXPERIMENT/alignment/train.self.links: the word links of every training pair of ``pairs()``
    (whitespace words; a new pass over the texts at each call) read from the forced attention of
    training.guided_alignment.first_round, as `attnmt align` reads them by default (argmax, no
    shift; a Transformer's last layer, heads averaged), or from their alignment layers
    (first_round_aligner, first_round_backward_aligner); with first_round_backward, both directions
    symmetrized (`attnmt align --backward --symmetrize`). Computed once; its stamp holds the SHA-256
    of the text and of each first round's (and aligner's) weights and how they are read, so a
    changed text, model or reading is aligned again. The texts are streamed: a pass for the stamp,
    one for the first rounds' vocabularies, and one that aligns SELF_CHUNK usable pairs at a time
    and writes their links as they come (what is held is a chunk, whatever the corpus)."""
    ga: GuidedAlignment = config.training.guided_alignment
    rounds = {"first_round": ga.first_round, "first_round_backward": ga.first_round_backward}
    rounds = {name: folder for name, folder in rounds.items() if folder is not None}
    weights = {name: _first_round_weights(config, name, folder) for name, folder in rounds.items()}
    aligners = {name: getattr(ga, f"{name}_aligner") for name in rounds if getattr(ga, f"{name}_aligner")}
    for name, folder in aligners.items():
        weights[f"{name}_aligner"] = _aligner_weights(name, folder)
    digest, count = _TextDigest(), 0
    for source, target in pairs():
        digest.add(source, target)
        count += 1
    stamp_text = (
        f"text {digest.hexdigest()}\n"
        + "".join(f"{name} {file_sha256(path)}\n" for name, path in weights.items())
        + f"symmetrize {ga.symmetrization}\n"
    )
    # and how each direction's weights are read: links read another way (a default changed) are redone
    stamp_text += "".join(f"{name} reading {default_method(name in aligners)}\n" for name in rounds)
    folder = config.experiment_dir / "alignment"
    path, stamp = folder / "train.self.links", folder / "train.self.sha256"
    if path.is_file() and stamp.is_file() and stamp.read_text() == stamp_text:
        return path
    both = f" and {ga.first_round_backward} ({ga.symmetrization})" if ga.first_round_backward else ""
    what = "the alignment layers" if aligners else "the attention"
    log(f"word links: aligning {count:,} training pairs with {what} of {ga.first_round}{both}")
    models = {name: _first_round(name, rounds[name], config.training.device, name in aligners) for name in rounds}
    _check_vocabularies(models, pairs)
    layers = {name: _first_round_aligner(name, folder, models[name]) for name, folder in aligners.items()}
    unusable = 0
    with atomic_writer(path) as out:
        usable: list[tuple[str, str]] = []  # the texts of the usable pairs waiting to be aligned
        waiting: list[bool] = []  # of each pair since the last alignment: whether it is one of them

        def write_chunk():
            links = iter(
                _attention_links(models, layers, ga.symmetrization, *map(list, zip(*usable))) if usable else ()
            )
            for is_usable in waiting:
                out.write((format_pharaoh(next(links)) if is_usable else "") + "\n")
            usable.clear()
            waiting.clear()

        for chunk in chunked(pairs(), SELF_READ):
            for pair, fits in zip(chunk, _with_their_words(models, chunk)):
                unusable += not fits
                if fits:
                    usable.append(pair)
                waiting.append(fits)
                if len(usable) == SELF_CHUNK:
                    write_chunk()
        write_chunk()
    if unusable:
        log(
            f"word links: {unusable:,} training pair(s) whose pieces under a first round's "
            "subwords do not make their words get no links"
        )
    atomic_write_text(stamp, stamp_text)
    return path


def _first_round_weights(config: Config, name: str, folder: Path) -> Path:
    """The weights ``folder`` aligns with, once it is known to be a trained translation model of
    the right direction (an error naming the field otherwise)."""
    field = f"training.guided_alignment.{name}"
    if not folder.is_dir():
        raise AttnmtError(f"{field}: {folder}: no such folder (the first round: a trained translation model)")
    if folder.resolve() == config.experiment_dir.resolve():
        raise AttnmtError(f"{field}: {folder} is this experiment's own folder; the first round is another model")
    try:
        trained = model_config(folder)
    except AttnmtError as error:
        raise AttnmtError(f"{field}: {error}") from None
    if trained.task != "translation":
        raise AttnmtError(f"{field}: {folder} is a model of task {trained.task}, not a translation model")
    ours, theirs = config.data.train.as_spec(), trained.data.train.as_spec()
    if theirs == (_reversed(ours) if name == "first_round" else ours):
        direction = "target -> source" if name == "first_round" else "source -> target"
        wanted = "source -> target" if name == "first_round" else "target -> source"
        raise AttnmtError(f"{field}: {folder} was trained on data.train {direction}; it must be {wanted}")
    weights = weights_path(folder, "best")
    if not weights.is_file():
        raise AttnmtError(f"{field}: {folder} has no weights (best.safetensors or last.safetensors): train it first")
    return weights


def _reversed(spec: dict) -> dict:
    if "tsv" in spec:
        return {**spec, "src_column": spec["tgt_column"], "tgt_column": spec["src_column"]}
    return {"src": spec["tgt"], "tgt": spec["src"]}


def _first_round(name: str, folder: Path, device: str, has_aligner: bool):
    try:
        model = Translator(folder, device=device)
    except AttnmtError as error:
        raise AttnmtError(f"training.guided_alignment.{name}: {error}") from None
    if not model.model.has_attention and not has_aligner:
        raise AttnmtError(
            f"training.guided_alignment.{name}: {folder} has attention 'none': it has no attention "
            "weights to align with"
        )
    return model


def _check_vocabularies(models: dict, pairs: Callable[[], Iterable[tuple[str, str]]]):
    """An error if a first round does not know more than UNKNOWN_LIMIT of either side's pieces of
    the whole text (read a chunk at a time, the unknown pieces counted)."""
    counts = {name: [[0, 0], [0, 0]] for name in models}  # per side (sources, targets): [unknown, pieces]
    for chunk in chunked(pairs(), SELF_READ):
        sources, targets = [s for s, _ in chunk], [t for _, t in chunk]
        for name, model in models.items():
            backward = name == "first_round_backward"
            sides = (model.tgt_subwords, model.src_subwords) if backward else (model.src_subwords, model.tgt_subwords)
            for side, subwords, texts in zip(counts[name], sides, (sources, targets)):
                ids = [i for line in subwords.encode(texts) for i in line]
                side[0] += sum(i == UNK for i in ids)
                side[1] += len(ids)
    for name, model in models.items():
        for side, (unknown, pieces) in zip(("sources", "targets"), counts[name]):
            share = unknown / max(pieces, 1)
            if share > UNKNOWN_LIMIT:
                raise AttnmtError(
                    f"training.guided_alignment.{name}: {model.folder} does not know {share:.0%} of the "
                    f"pieces of the training {side}: its vocabulary is not of this text or this direction"
                )


def _with_their_words(models: dict, pairs: list[tuple[str, str]]) -> list[bool]:
    """Of each pair, whether every first round cuts its texts into pieces that make their
    whitespace words."""
    sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
    usable = [True] * len(pairs)
    for name, model in models.items():
        src, tgt = (targets, sources) if name == "first_round_backward" else (sources, targets)
        src_pieces, tgt_pieces = piece_lists(model, src, tgt)
        for k, (sp, tp) in enumerate(zip(src_pieces, tgt_pieces)):
            usable[k] = (
                usable[k]
                and len(word_spans(without_eos(sp))) == len(src[k].split())
                and len(word_spans(without_eos(tp))) == len(tgt[k].split())
            )
    return usable


def _aligner_weights(name: str, folder: Path) -> Path:
    weights = folder / "aligner.safetensors"
    if not weights.is_file():
        raise AttnmtError(
            f"training.guided_alignment.{name}_aligner: {folder}: not an aligner folder (no "
            "aligner.safetensors; attnmt train-aligner writes it)"
        )
    return weights


def _first_round_aligner(name: str, folder: Path, model: Translator):
    try:
        return load_aligner(folder, model)
    except AttnmtError as error:
        raise AttnmtError(f"training.guided_alignment.{name}_aligner: {error}") from None


def _attention_links(
    models: dict, layers: dict, symmetrization: str, sources: list[str], targets: list[str]
) -> list[list[Link]]:
    """The links of the first round (or both), from their attention or their alignment layers."""
    forward, backward = models["first_round"], models.get("first_round_backward")
    if backward is None:
        return align(forward, sources, targets, batch_size=SELF_BATCH, aligner=layers.get("first_round"))
    aligners = (layers.get("first_round"), layers.get("first_round_backward"))
    return align_both_ways(forward, backward, sources, targets, symmetrization, aligners, batch_size=SELF_BATCH)


LINKS = "links"  # EXPERIMENT/store/links: the reference piece links of the stored training pairs
LINK_CHUNK = 2_000  # pairs whose links are written at a time


def attach_links(
    config: Config,
    train: StoredPairs,
    src_sw: Subwords,
    tgt_sw: Subwords,
    log: Callable[[str], None] = print,
    check: bool = True,
) -> None:
    """Sets ``train.alignments``: the reference piece links of every training pair (none where its
    line has no usable links), from the config's guided_alignment, read from a store of their own
    beside the pairs' (EXPERIMENT/store/links, attnmt.data.store), made unless it was made from
    the same links file and pairs. ``check``: its files checked against their SHA-256."""
    ga: GuidedAlignment = config.training.guided_alignment
    pairs_store = config.experiment_dir / store.FOLDER
    if ga.links in ("eflomal", "self"):  # a file of one line per training pair, made from their text
        stored = train.lines  # (each pair's line in data.train)
        if ga.links == "eflomal":  # (streamed through eflomal's files)
            path = eflomal_file(config, lambda: training_texts(config, stored), log)
        else:  # (the first rounds align them a chunk at a time)
            path = self_links_file(config, lambda: training_texts(config, stored), log)
        lines, one_based = None, False
    else:  # a file of one line per line of data.train
        counts = store.read_manifest(pairs_store).parts[0].counts
        path, lines, one_based = Path(ga.links), counts["empty"] + counts["encoded"] + counts["held_out"], ga.one_based
    folder = pairs_store / LINKS
    settings = {"pairs": file_sha256(pairs_store / store.MANIFEST), "units": ga.units, "one_based": one_based}
    if store.stale_reason(folder, [path], settings) is not None:
        _write_links(folder, train, path, lines, one_based, src_sw, tgt_sw, ga.units, settings)
        check = False
    links = store.PairStore(folder, check).parts["train"]
    train.alignments = store.StoredLinks(links)
    if links.counts["unusable"]:
        log(
            f"guided alignment: {links.counts['unusable']:,} training pair(s) have links beyond their words or "
            "pieces; they train without the alignment loss"
        )
    if not links.counts["linked"]:
        raise AttnmtError(f"training.guided_alignment: no training pair has a usable link in {ga.links}")


def training_texts(config: Config, lines: Iterable[int]) -> Iterator[tuple[str, str]]:
    """The text of the training pairs at ``lines`` (ascending: a store's) of data.train, read line by
    line as they pass, their words separated by single spaces (what eflomal and the first rounds
    align: whitespace words). AttnmtError if a line is not one of the corpus's pairs (a corpus
    changed since the store was prepared)."""
    wanted = (int(line) for line in lines)
    line_wanted = next(wanted, None)
    pairs = CorpusPairs(config.data.train.as_spec())
    for line, source, target in pairs:
        if line == line_wanted:
            yield " ".join(source.split()), " ".join(target.split())
            line_wanted = next(wanted, None)
    if line_wanted is not None:
        raise AttnmtError(
            f"{config.data.train.tsv or config.data.train.src}: line {line_wanted + 1} is not a sentence pair of "
            "the training corpus that the store was prepared from: the corpus changed while it was read"
        )


def _write_links(
    folder: Path,
    train: StoredPairs,
    path: Path,
    lines: int | None,
    one_based: bool,
    src_sw: Subwords,
    tgt_sw: Subwords,
    units: str,
    settings: dict,
):
    """The piece links of every training pair into the store at ``folder``, from the word (or piece)
    links of ``path``: a file of one line per line of data.train (``lines`` of them), or, with
    ``lines`` None, of one line per training pair. Both files and the pairs are read as they go."""
    by_line = stream_link_file(path, len(train) if lines is None else lines, one_based)
    position, counts = -1, {"unusable": 0, "linked": 0}
    pair_lines = train.lines
    with store.StoreWriter(folder, store.token_dtype(max(len(src_sw), len(tgt_sw)))) as writer:
        writer.start_part("train")
        for start in range(0, len(train), LINK_CHUNK):
            chunk = []
            for i in range(start, min(start + LINK_CHUNK, len(train))):
                wanted = i if lines is None else int(pair_lines[i])
                while position < wanted:  # (the lines of pairs not trained on are read past)
                    word_links, position = next(by_line), position + 1
                src_ids, tgt_ids = train.src_ids[i], train.tgt_ids[i]
                links = _pair_links(word_links, src_sw.pieces(src_ids), tgt_sw.pieces(tgt_ids), units)
                counts["unusable"] += links is None
                counts["linked"] += bool(links)
                chunk.append(links or [])
            writer.add(
                store.EncodedChunk.of(
                    [int(pair_lines[i]) for i in range(start, start + len(chunk))],
                    [[s for s, _ in links] for links in chunk],
                    [[t for _, t in links] for links in chunk],
                    writer.dtype,
                )
            )
        for _ in by_line:  # (to its end: a file of another length is an error)
            pass
        writer.count(counts)
        writer.finish([store.input_file(path)], settings)


def _pair_links(links: list[Link], src_pieces: list[str], tgt_pieces: list[str], units: str) -> list[Link] | None:
    if units == "words":
        return piece_links(links, src_pieces, tgt_pieces)
    if any(i >= len(src_pieces) or j >= len(tgt_pieces) for i, j in links):
        return None
    return links
