"""Training an alignment layer (attnmt.translation.alignment_layer) on a frozen translation model,
its own config file, and the folder it is written to.

    attnmt train-aligner aligner.yaml       # model: runs/en-fr  (the rest has defaults)
    attnmt align runs/en-fr --aligner runs/en-fr/aligner --src ... --tgt ...

The folder holds ``aligner.yaml`` (the config, paths absolute) and ``aligner.safetensors`` (the
layer, stamped with the SHA-256 of the translation model's weights it was trained on: an aligner
is used only with those weights).
"""

from __future__ import annotations

import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Callable, Iterator, Literal

import torch
from pydantic import Field, model_validator
from torch import Tensor

from attnmt.core import threads
from attnmt.core.checkpoint import load_weights, save_model, tensor_shapes
from attnmt.core.config import (
    ConfigPath,
    CorpusFiles,
    Section,
    config_to_yaml,
    read_yaml_file,
    resolve_paths,
    validated,
)
from attnmt.core.errors import AttnmtError
from attnmt.core.files import atomic_write_text, file_sha256
from attnmt.core.folders import inference_device, inside_folder, model_config, weights_path
from attnmt.data.batching import Batch, epoch_batches, training_batch
from attnmt.data import store
from attnmt.data.corpus import CorpusPairs, chunked, stream_lines
from attnmt.data.store import StoredPairs
from attnmt.data.subwords import PAD
from attnmt.seq2seq.inference import Translator
from attnmt.seq2seq.links import Link
from attnmt.translation.align import GuidedAttentionLinks, guided_heads
from attnmt.translation.agreement import NO_WORD, disagreement, piece_words, word_index_tensor, word_posteriors
from attnmt.translation.alignment_layer import AlignmentLayer, frozen_features, layer_for
from attnmt.translation.prepare import training_lines
from attnmt.translation.reference_links import alignment_loss, reference_attention, stream_link_file

CONFIG_FILE, WEIGHTS_FILE = "aligner.yaml", "aligner.safetensors"
LOG_EVERY = 100  # steps between two lines of the log


class AlignerConfig(Section):
    model: ConfigPath  # the folder of a trained translation model; it stays frozen
    checkpoint: Literal["best", "last"] = "best"  # which of its weights
    out: ConfigPath | None = None  # where the aligner is written; default MODEL/aligner
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
    # K: a learnt score of where the next target piece went (+-w pieces), the HMM's backward message
    # beside the jump term's forward one (attnmt.translation.alignment_layer); none with jump_width 0.
    # 1.4 points off E4's AER of both directions averaged, 0.8 in a second round (docs/alignment.md)
    jump_lookahead: bool = True
    # agreement training (Liang et al. 2006; attnmt.translation.agreement): the layer of the model
    # of the opposite direction (fr->en for an en->fr model) trained at the same time, on the same
    # pairs, each rewarded with weight ``agreement`` for the links the other finds; written to
    # backward_out (default BACKWARD_MODEL/aligner); 4 measured best of 1, 4, 8 and 16 on E4 (docs/alignment.md)
    backward_model: ConfigPath | None = None
    backward_out: ConfigPath | None = None
    agreement: float = Field(4.0, ge=0)
    # reference word links the layer is also trained towards, as guided alignment trains the
    # attention: a Pharaoh file of one line per line of the training text (train, or the model's
    # data.train; the backward layer reads it turned around), for instance the links of a first round
    # of layers (self-training, no outside aligner), or "eflomal": each direction's layer towards
    # eflomal's links of that direction, computed on the training text. links_weight weighs their
    # cross-entropy with the layer's word posteriors (attnmt.translation.aligner._Guide)
    links: str | None = None
    links_weight: float = Field(1.0, ge=0)
    links_one_based: bool = False
    # the file links target words to source words: how the backward layer's own config records the
    # file of its partner (so that training from that config reads it the right way round)
    links_reversed: bool = False
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

    @model_validator(mode="after")
    def lookahead_has_jumps(self):
        if self.jump_lookahead and not self.jump_width:
            if "jump_lookahead" in self.model_fields_set:
                raise ValueError("jump_lookahead reads jumps of jump_width pieces: it needs jump_width > 0")
            self.jump_lookahead = False  # the default follows the jumps (and is written so to the folder)
        return self

    @property
    def folder(self) -> Path:
        return self.out if self.out is not None else self.model / "aligner"

    def backward(self) -> AlignerConfig:
        """The config of the backward direction's layer, as written to its folder: its model is
        backward_model, its partner this one."""
        return self.model_copy(
            update={
                "model": self.backward_model,
                "out": self.backward_out or self.backward_model / "aligner",
                "backward_model": self.model,
                "backward_out": self.folder,
                "links_reversed": not self.links_reversed,
            }
        )


def load_aligner_config(path: str | Path) -> AlignerConfig:
    """The config file, its relative paths read from its folder (as in a training config)."""
    path = Path(path)
    config = validated(AlignerConfig, read_yaml_file(path), source=str(path))
    for section in (config, config.train):
        resolve_paths(section, path.resolve().parent)
    if config.links not in (None, "eflomal") and not Path(config.links).is_absolute():
        config.links = str((path.resolve().parent / config.links).resolve())  # a links file, read like the data
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


PASS_PAIRS = 2_000  # pairs encoded at a time while the aligner's pairs are prepared
LINK_PAIRS = 2_000  # pairs whose reference links are written at a time
LINK_DTYPE = store.token_dtype(1 << 17)  # (word positions: uint32, whatever the length of a sentence)


def _training_lines(config: AlignerConfig, translator: Translator, log: Callable[[str], None]):
    """The pairs the layer learns from, (line, source, target), read line by line: train, or the
    model's own training pairs (its data.train less the held-out sets)."""
    if config.train is None:
        return training_lines(translator.config, log)
    return _every_pair(config.train)


def _every_pair(files: CorpusFiles) -> Iterator[tuple[int, str, str]]:
    pairs, read = CorpusPairs(files.as_spec()), False
    for pair in pairs:
        read = True
        yield pair
    if not read:
        raise pairs.empty_error()


def _within_limit(translator: Translator, src_ids: list[list[int]], tgt_ids: list[list[int]]) -> list[bool]:
    limit = translator.config.data.max_length
    return [limit is None or max(len(s), len(t)) <= limit for s, t in zip(src_ids, tgt_ids)]


class _Direction:
    """One direction of training: its frozen model, its layer and the pairs encoded for it, read
    from the aligner's store of them (``pairs``, set by `_prepare_pairs`: their pieces in
    memory-mapped files, a batch read at a time)."""

    def __init__(self, config: AlignerConfig, translator: Translator):
        self.translator = translator
        self.pairs: StoredPairs | None = None
        self.layer = layer_for(
            translator.model,
            len(translator.src_subwords),
            len(translator.tgt_subwords),
            config.size,
            config.diagonal_buckets,
            config.null_prior,
            config.jump_width,
            config.jump_lookahead,
        ).to(translator.device)
        self.guide: _Guide | None = None  # with links: the reference links the layer is also trained towards

    def words(self, indices: list[int]) -> tuple[list[list[int]], list[list[int]]]:
        """The piece -> word indices of the source and the target of the pairs at ``indices``."""
        src_sw, tgt_sw = self.translator.src_subwords, self.translator.tgt_subwords
        return (
            [piece_words(src_sw.pieces(self.pairs.src_ids[i])) for i in indices],
            [piece_words(tgt_sw.pieces(self.pairs.tgt_ids[i])) for i in indices],
        )

    def word_posteriors(
        self, words: tuple[list[list[int]], list[list[int]]], batch: Batch, alignment: Tensor
    ) -> Tensor:
        """The batch's piece posteriors (B,T,S) merged into word posteriors (B, target words, source
        words), as links are read (attnmt.translation.agreement.word_posteriors); ``words``: the
        batch's pairs' `words`."""
        src_words, tgt_words = words
        tgt = word_index_tensor(tgt_words, batch.tgt_out.size(1))
        src = word_index_tensor(src_words, batch.src.size(1))
        return word_posteriors(alignment, tgt.to(alignment.device), src.to(alignment.device))

    def batch(self, indices: list[int]) -> Batch:
        return training_batch([self.pairs.src_ids[i] for i in indices], [self.pairs.tgt_ids[i] for i in indices]).to(
            self.translator.device
        )

    def explain(self, batch: Batch, uniform_prior: bool) -> tuple[Tensor, Tensor]:
        """-log p of the batch's real target pieces (summed) and the layer's piece posteriors r (B,T,S)."""
        features = frozen_features(self.translator.model, batch)
        log_output, alignment = self.layer(*features, batch.src, batch.tgt_out, uniform_prior)
        return -log_output[batch.tgt_out != PAD].sum(), alignment


def _directions(config: AlignerConfig) -> list[_Direction]:
    """The forward direction, and with backward_model the backward one on the same pairs (its
    source the forward target); their pairs are `_prepare_pairs`'s."""
    directions = [_Direction(config, _translation_model(config))]
    if config.backward_model is not None:
        directions.append(_Direction(config, _translation_model(config.backward(), "backward_model")))
    return directions


def _prepare_pairs(config: AlignerConfig, directions: list[_Direction], log: Callable[[str], None], folder: Path):
    """The training pairs read line by line, encoded a chunk at a time for each direction and
    written into a store of each direction's pieces in ``folder`` (attnmt.data.store), pairs longer
    than either model's data.max_length left out; with links, each direction's reference links
    into a store of their own (`_prepare_guides`). What is held is a chunk of pairs, whatever the
    size of the corpus; training reads the pieces from the maps, a batch at a time."""
    translator = directions[0].translator
    dtypes = [
        store.token_dtype(max(len(d.translator.src_subwords), len(d.translator.tgt_subwords))) for d in directions
    ]
    words = None  # with links: eflomal, the kept pairs' words, written to eflomal's files as they pass
    if config.links == "eflomal":
        from attnmt.translation.statistical_align import EflomalInput

        words = EflomalInput(folder)
    try:
        with ExitStack() as stack:
            writers = [
                stack.enter_context(store.StoreWriter(folder / f"pairs-{k}", dtype)) for k, dtype in enumerate(dtypes)
            ]
            for writer in writers:
                writer.start_part("train")
            read = kept = 0
            for chunk in chunked(_training_lines(config, translator, log), PASS_PAIRS):
                sources, targets = [p[1] for p in chunk], [p[2] for p in chunk]
                encoded = [
                    (d.translator.src_subwords.encode(s), d.translator.tgt_subwords.encode(t))
                    for d, (s, t) in zip(directions, ((sources, targets), (targets, sources)))
                ]
                fits = [all(ok) for ok in zip(*(_within_limit(d.translator, *e) for d, e in zip(directions, encoded)))]
                keep = [i for i, ok in enumerate(fits) if ok]
                for writer, dtype, (src_ids, tgt_ids) in zip(writers, dtypes, encoded):
                    writer.add(
                        store.EncodedChunk.of(
                            [chunk[i][0] for i in keep], [src_ids[i] for i in keep], [tgt_ids[i] for i in keep], dtype
                        )
                    )
                if words is not None:
                    for i in keep:
                        words.add(sources[i], targets[i])
                read, kept = read + len(chunk), kept + len(keep)
            if not kept:
                limit = translator.config.data.max_length
                raise AttnmtError(f"train: no sentence pair within the model's data.max_length ({limit} pieces)")
            if kept < read:
                log(f"aligner: left out {read - kept} pair(s) longer than data.max_length pieces")
            for writer in writers:
                writer.finish([], {})
        for k, direction in enumerate(directions):
            direction.pairs = StoredPairs([(store.PairStore(folder / f"pairs-{k}", check=False).parts["train"], None)])
        if config.links is not None:
            _prepare_guides(config, directions, words, log, folder)
    finally:
        if words is not None:
            words.close()


def _prepare_guides(
    config: AlignerConfig, directions: list[_Direction], words, log: Callable[[str], None], folder: Path
):
    """Each direction's guide: the reference word links of every training pair (eflomal's two
    directions, or the links file's line of each pair twice), each pair's turned around for the
    backward layer and left empty where they name words its pieces do not make, written into a
    store in ``folder`` as they are read (links file, eflomal's output and the stored pairs side by
    side)."""
    parts = [d.pairs.segments[0][0] for d in directions]
    if words is not None:  # (eflomal's EflomalInput, the pairs' words written)
        log(f"aligner: aligning {len(parts[0]):,} training pairs with eflomal (the links to train towards)")
        references = words.links()
    else:
        references = ((links, links) for links in _file_links(config, directions[0].translator, parts[0]))
    unusable = [0] * len(directions)
    with ExitStack() as stack:
        writers = [
            stack.enter_context(store.StoreWriter(folder / f"guide-{k}", LINK_DTYPE)) for k in range(len(directions))
        ]
        for writer in writers:
            writer.start_part("train")
        chunks = [[] for _ in directions]
        lines = []
        for pairs, links in zip(zip(*(part.pairs() for part in parts)), references):
            lines.append(pairs[0][0])
            for k, (direction, (_, src_ids, tgt_ids), turned) in enumerate(zip(directions, pairs, (False, True))):
                pair_links = [(j, i) for i, j in links[k]] if turned else links[k]
                src_words = piece_words(direction.translator.src_subwords.pieces(src_ids))
                tgt_words = piece_words(direction.translator.tgt_subwords.pieces(tgt_ids))
                fits = all(i < _word_count(src_words) and j < _word_count(tgt_words) for i, j in pair_links)
                unusable[k] += not fits
                chunks[k].append(pair_links if fits else [])
            if len(lines) == LINK_PAIRS:
                _write_guides(writers, lines, chunks)
                lines, chunks = [], [[] for _ in directions]
        for _ in references:  # (to its end: a links file of another length is an error)
            pass
        _write_guides(writers, lines, chunks)
        for writer in writers:
            writer.finish([], {})
    for k, direction in enumerate(directions):
        links = store.StoredLinks(store.PairStore(folder / f"guide-{k}", check=False).parts["train"])
        direction.guide = _Guide(links)
        if unusable[k]:
            log(f"aligner: {unusable[k]:,} training pair(s) have links beyond their words; they train without them")


def _write_guides(writers, lines: list[int], chunks: list[list[list[Link]]]):
    for writer, links in zip(writers, chunks):
        writer.add(
            store.EncodedChunk.of(
                lines, [[i for i, _ in pair] for pair in links], [[j for _, j in pair] for pair in links], LINK_DTYPE
            )
        )


def _file_links(config: AlignerConfig, translator: Translator, part: store.StoredPart) -> Iterator[list[Link]]:
    """The links of the links file's line of each pair of ``part``, read as they pass (the file has
    a line per line of the training text, whose lines are counted first, as a stream)."""
    corpus_files = translator.config.data.train if config.train is None else config.train
    corpus = corpus_files.tsv or corpus_files.src
    corpus_lines = sum(1 for _ in stream_lines(corpus))
    by_line = stream_link_file(config.links, corpus_lines, config.links_one_based, corpus=str(corpus), field="links")
    position = -1
    for wanted, _, _ in part.pairs():
        while position < wanted:  # (the lines of pairs not trained on are read past)
            links, position = next(by_line), position + 1
        yield [(j, i) for i, j in links] if config.links_reversed else links
    for _ in by_line:  # (to its end: a file of another length is an error)
        pass


class _Guide:
    """Reference word links a direction's layer is also trained towards: the cross-entropy of its
    word posteriors R (target words x source words, as links are read) with the reference rows
    q_j, uniform over the source words linked to target word j (as guided alignment does with the
    attention, attnmt.translation.guided_alignment):

        L_links = - sum over target words j with links of  sum_i q_j,i log R_j,i

    A pair whose links name words its pieces do not make (another tokenisation) trains without them
    (`_prepare_guides` leaves its links empty). ``links[i]``: pair i's (source word, target word)
    links, read from the aligner's store of them."""

    def __init__(self, links: Sequence[list[Link]]):
        self.links = links

    def loss(self, indices: list[int], words: Tensor) -> tuple[Tensor, int]:
        """The summed cross-entropy of the batch's word posteriors ``words`` (B, target words, source
        words) with the reference, and the number of target words with links."""
        reference = reference_attention([self.links[i] for i in indices], words.size(2), words.size(1))
        return alignment_loss(words, reference.to(words.device)), int((reference.sum(dim=2) > 0).sum())


def _word_count(words: list[int]) -> int:
    return max(words, default=NO_WORD) + 1


class _Agreement:
    """Of a batch's pairs, those whose words the two models cut alike, from both directions' `words`
    of them: forward (source, target), backward (source, target)."""

    def __init__(self, forward: tuple[list, list], backward: tuple[list, list]):
        (src_f, self.tgt_f), (src_b, tgt_b) = forward, backward
        self.alike = [
            _word_count(sf) == _word_count(tb) and _word_count(tf) == _word_count(sb)
            for sf, tf, sb, tb in zip(src_f, self.tgt_f, src_b, tgt_b)
        ]

    def loss(self, forward: Tensor, backward: Tensor) -> Tensor:
        """The summed squared disagreement of the two directions' word posteriors over the batch:
        forward (B, target words, source words), backward (B, source words, target words)."""
        agree = torch.tensor(self.alike, dtype=torch.float32)
        return disagreement(forward, backward, agree.to(forward.device))

    def words(self) -> int:
        return sum(_word_count(tf) for tf, alike in zip(self.tgt_f, self.alike) if alike)


def train_aligner(config: AlignerConfig, log: Callable[[str], None] = print) -> Path:
    """Trains the alignment layer of ``config`` (and with backward_model the backward direction's,
    by agreement) and writes its folder (their folders); returns the (forward) folder. The training
    pairs are read line by line into a temporary store beside the folder (`_prepare_pairs`, removed
    at the end): what grows with the corpus in memory is the pairs' sizes and an epoch's order."""
    inference_device(config.device)
    threads.choose(config.threads, log)
    torch.manual_seed(config.seed)
    directions = _directions(config)
    beside = config.folder.parent
    try:
        beside.mkdir(parents=True, exist_ok=True)
        pairs_folder = tempfile.TemporaryDirectory(prefix=f".{config.folder.name}.pairs-", dir=beside)
    except OSError as e:
        raise AttnmtError(f"cannot write the aligner's training pairs in {beside}: {e.strerror or e}") from None
    with pairs_folder as folder:
        _prepare_pairs(config, directions, log, Path(folder))
        return _train(config, directions, log)


def _train(config: AlignerConfig, directions: list[_Direction], log: Callable[[str], None]) -> Path:
    optimizer = torch.optim.Adam([p for d in directions for p in d.layer.parameters()], lr=config.learning_rate)
    forward = directions[0]
    log(
        f"aligner: training a layer of size {config.size} on {len(forward.pairs):,} pairs, the model in "
        f"{config.model} frozen"
        + (
            f", and by agreement (weight {config.agreement}) one on {config.backward_model}"
            if len(directions) == 2
            else ""
        )
        + (f", towards the links of {config.links} (weight {config.links_weight})" if config.links else "")
        + f", {config.steps} steps"
    )
    sizes = forward.pairs.sizes()
    totals, started, step, epoch = Counter(), time.perf_counter(), 0, 0
    while step < config.steps:
        for indices in epoch_batches(sizes, config.batch_size, None, 100, config.seed, epoch):
            loss = _step_loss(config, directions, indices, step < config.lexicon_steps, totals)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            if step % LOG_EVERY == 0 or step == config.steps:
                log(
                    f"aligner: step {step}/{config.steps}, epoch {epoch + 1}: {_progress(totals)} "
                    f"({time.perf_counter() - started:.0f} s)"
                )
                totals = Counter()
            if step == config.steps:
                break
        epoch += 1
    if len(directions) == 2:
        _save(config.backward(), directions[1].layer, directions[1].translator)
    return _save(config, forward.layer, forward.translator)


def _progress(totals: Counter) -> str:
    """The losses since the last line of the log, each per what it is summed over."""
    text = f"loss {totals['nll'] / totals['pieces']:.3f} per target piece"
    if totals["words"]:
        text += f", disagreement {totals['disagreement'] / totals['words']:.3f} per word"
    if totals["linked"]:
        text += f", links {totals['links'] / totals['linked']:.3f} per linked word"
    return text


def _step_loss(
    config: AlignerConfig,
    directions: list[_Direction],
    indices: list[int],
    uniform: bool,
    totals: Counter,
) -> Tensor:
    """The loss of one batch: each direction's -log p per target piece, plus the agreement term
    (with two directions) and the links' cross-entropy where the config has them; ``totals`` (the
    forward direction's nll and pieces, the disagreement and its words, the links' cross-entropy
    and linked words) added to."""
    batches = [d.batch(indices) for d in directions]
    explained = [d.explain(b, uniform) for d, b in zip(directions, batches)]
    loss = sum(nll / b.target_tokens for (nll, _), b in zip(explained, batches))
    totals["nll"] += float(explained[0][0].detach())
    totals["pieces"] += batches[0].target_tokens
    if len(directions) == 1 and config.links is None:
        return loss
    pair_words = [d.words(indices) for d in directions]
    words = [
        d.word_posteriors(w, b, alignment)
        for d, w, b, (_, alignment) in zip(directions, pair_words, batches, explained)
    ]
    if len(directions) == 2:
        agreement = _Agreement(*pair_words)
        agreeing_words = max(agreement.words(), 1)
        disagreeing = agreement.loss(*words)
        loss = loss + config.agreement * disagreeing / agreeing_words
        totals["disagreement"] += float(disagreeing.detach())
        totals["words"] += agreeing_words
    for direction, posteriors in zip(directions, words):
        if direction.guide is not None:
            cross_entropy, linked = direction.guide.loss(indices, posteriors)
            loss = loss + config.links_weight * cross_entropy / max(linked, 1)
            totals["links"] += float(cross_entropy.detach()) * (direction is directions[0])
            totals["linked"] += linked * (direction is directions[0])
    return loss


def _save(config: AlignerConfig, layer: AlignmentLayer, translator: Translator) -> Path:
    folder = config.folder
    folder.mkdir(parents=True, exist_ok=True)
    stamp = {
        "model_weights_sha256": file_sha256(weights_path(config.model, config.checkpoint)),
        "src_vocab": len(translator.src_subwords),
        "tgt_vocab": len(translator.tgt_subwords),
    }
    save_model(layer, folder / WEIGHTS_FILE, stamp)
    atomic_write_text(folder / CONFIG_FILE, config_to_yaml(config))
    return folder


def load_aligner(folder: str | Path, translator: Translator) -> AlignmentLayer:
    """The alignment layer in ``folder``, for ``translator``: an error unless it was trained on the
    very weights ``translator`` holds."""
    folder = Path(folder)
    config_path, weights = folder / CONFIG_FILE, folder / WEIGHTS_FILE
    if not config_path.is_file() or not weights.is_file():
        raise AttnmtError(
            f"{folder}: not an aligner folder (no {CONFIG_FILE} and {WEIGHTS_FILE}; attnmt train-aligner writes them)"
        )
    config = validated(AlignerConfig, read_yaml_file(config_path), source=str(config_path))
    shapes = tensor_shapes(weights)
    if not {"W_q.weight", "W_k.weight", "E.weight", "W_o.weight"} <= shapes.keys():
        raise AttnmtError(f"{weights}: not the weights of an alignment layer")
    size, memory_size = shapes["W_k.weight"]
    layer = AlignmentLayer(
        shapes["W_q.weight"][1],
        memory_size,
        shapes["E.weight"][0],
        shapes["W_o.weight"][0],
        size,
        shapes["D"][0] if "D" in shapes else 0,
        0.5 if "p0" in shapes else 0.0,  # (p0: loaded)
        (shapes["J"][0] - 1) // 2 if "J" in shapes else 0,
        "K" in shapes,
    )
    stamp = load_weights(layer, weights)
    if not _made_for(stamp, translator):
        raise AttnmtError(
            f"{folder}: this aligner was trained on the weights of {config.model} "
            f"({config.checkpoint}), not on those of {translator.weights}: train one for this model "
            "with attnmt train-aligner"
        )
    return layer.to(translator.device).eval()


def _made_for(stamp: dict, translator: Translator) -> bool:
    return stamp.get("model_weights_sha256") == file_sha256(translator.weights)


def guided_attention_links(translator: Translator) -> GuidedAttentionLinks | None:
    return GuidedAttentionLinks(translator) if guided_heads(translator) is not None else None


class OutputAligner:
    """Word links of (source, output) pairs from an alignment layer trained on ``translator``:
    what ``Translator.aligner`` holds, so that its translations' links (``Translation.alignment``,
    ``translate(align=True)``, the server's ``"align": true``, ``attnmt translate --report-align``)
    come from the layer rather than from the attention."""

    def __init__(self, folder: str | Path, translator: Translator):
        self.folder = Path(folder)
        self.layer = load_aligner(folder, translator)
        self.translator = translator

    def __call__(
        self,
        sources: list[str],
        outputs: list[str],
        method: str | None = None,
        threshold: float = 0.5,
        batch_size: int = 32,
    ) -> list[list[tuple[int, int]]]:
        from attnmt.translation.align import align

        return align(self.translator, sources, outputs, batch_size, method, threshold, aligner=self.layer)

    word_links = "aligner"  # GET /models

    def __repr__(self) -> str:
        return f"OutputAligner({str(self.folder)!r})"


def folder_aligner(translator: Translator) -> OutputAligner | None:
    """The aligner of the model's own folder, MODEL/aligner (where attnmt train-aligner writes it by
    default), if there is one and it was trained on the weights ``translator`` holds; otherwise
    None (its links come from the attention), with a warning if it was trained on other weights."""
    folder = translator.folder / "aligner"
    for name in (CONFIG_FILE, WEIGHTS_FILE):  # (before anything is opened: MODEL/aligner may be a link)
        inside_folder(translator.folder, folder / name)
    if not (folder / CONFIG_FILE).is_file() or not (folder / WEIGHTS_FILE).is_file():
        return None
    try:
        return OutputAligner(folder, translator)
    except AttnmtError as error:
        warnings.warn(f"word links from the attention, not from the aligner: {error}", stacklevel=2)
        return None


def load_translator(
    folder: Path, checkpoint: str = "best", quantize: str | None = None, device: str | torch.device = "cpu"
) -> Translator:
    """A translation model as attnmt.load gives it: with its folder's aligner (folder_aligner), else,
    for a Transformer trained by guided alignment, the links of the attention that guidance trained."""
    translator = Translator(folder, checkpoint, quantize, device)
    translator.aligner = folder_aligner(translator) or guided_attention_links(translator)
    return translator
