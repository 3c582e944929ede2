"""Marian models (OPUS-MT, every Hugging Face ``MarianMTModel``) as attnmt model folders.

    attnmt import path/to/saved runs/opus-de-en                 # a folder that save_pretrained wrote
    attnmt import Helsinki-NLP/opus-mt-de-en runs/opus-de-en    # a hub name: transformers downloads it

A Marian Transformer (transformers' modeling_marian.py) is attnmt's Transformer with these settings,
each a field of the model section (docs/config.md): post-norm layers without a final LayerNorm
(``norm: post``), token embeddings times sqrt(d_model) or not (``scale_embeddings``, Marian's
``scale_embedding``), sinusoidal positions with the sines in the first half of the dimensions
(``positions: sinusoidal-halves``), the feed-forward layers' ``activation`` (Marian's swish is silu).
Its output layer, ``lm_head`` plus ``final_logits_bias``, is attnmt's generator with its bias; the
decoder's first input, Marian's ``decoder_start_token_id`` (the pad id), is attnmt's BOS, whose
embedding becomes that token's. Source and target have embeddings of their own (a decoder vocabulary
of its own where the config has one, ``share_encoder_decoder_embeddings: false``). A folder that
``attnmt export --format huggingface`` wrote (attnmt.translation.marian_export) has a piece <s>, the
decoder's start: it imports as the model it was exported from.

The vocabulary. Marian cuts a text with its sentencepiece model (source.spm, target.spm) and looks
each piece up in vocab.json (target_vocab.json for a separate decoder vocabulary): a piece that is
not there reads as <unk>. attnmt's subword models give the ids themselves, pad 0, unk 1, bos 2,
eos 3 (attnmt.data.subwords). So each side's sentencepiece model is written again with its pieces
in attnmt's order: the four special pieces, then every piece of the Marian vocabulary in the order
of its ids (a piece the sentencepiece model lacks kept as an unused piece: never cut from a text,
still a row of the embeddings and, on the target side, a word the decoder can write, as Marian's
can; but where it is made of characters the model does not know, cut as Marian cuts them: see
``vocabulary_layout``), then the pieces of the sentencepiece model that the vocabulary lacks (whose embedding is
<unk>'s, and which the output layer never writes: bias NEVER). The pieces' scores are kept, so the
models cut every text as Marian's do; every weight row is then the row of its piece's Marian id.
The imported folder is an ordinary attnmt folder: config.yaml, spm/src.model and spm/tgt.model,
best.safetensors, and imported.json (where it came from).

Weights are read from model.safetensors (never unpickled); a hub name goes through transformers'
own ``from_pretrained`` and ``save_pretrained`` into a temporary folder, which is then imported
like any other (needs ``pip install 'attnmt[hub]'`` and a network that reaches the hub).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import yaml

from attnmt.core.checkpoint import save_model
from attnmt.core.config import config_from_dict
from attnmt.core.errors import AttnmtError
from attnmt.core.files import atomic_write_text
from attnmt.core.folders import inside_folder
from attnmt.data.subwords import BOS, EOS, PAD, UNK, subword_paths
from attnmt.seq2seq import build_model
from attnmt.translation.export import NEVER  # the bias of an output never written (BOS, pieces only the spm has)

ACTIVATIONS = {"relu": "relu", "swish": "silu", "silu": "silu", "gelu": "gelu"}  # Marian's -> model.activation
SPECIALS = {PAD: "<pad>", UNK: "<unk>", BOS: "<s>", EOS: "</s>"}
MAX_JSON_BYTES = 100_000_000  # a vocabulary of a million pieces is some 30 MB
IMPORTED = "imported.json"  # in the imported folder: where it came from, and Marian's config


def attention_names(marian: str) -> dict[str, str]:
    """attnmt's MultiHeadAttention (W_q, W_k, W_v, W_o) -> the linear layers of Marian's attention ``marian``."""
    return {f"W_{a}": f"{marian}.{m}_proj" for a, m in zip("qkvo", ("q", "k", "v", "out"))}


def layer_names(encoder_layers: int, decoder_layers: int) -> dict[str, str]:
    """Every weight of attnmt's Transformer layers -> its name in a MarianMTModel's state dict."""
    names = {}
    stacks = (
        ("encoder", encoder_layers, {"self_attention": "self_attn"}, ("self_attn", "final")),
        (
            "decoder",
            decoder_layers,
            {"self_attention": "self_attn", "cross_attention": "encoder_attn"},
            ("self_attn", "encoder_attn", "final"),
        ),
    )
    for stack, count, attentions, norms in stacks:
        for i in range(count):
            ours, theirs = f"{stack}_layers.{i}", f"model.{stack}.layers.{i}"
            parts = {"feed_forward.W_1": "fc1", "feed_forward.W_2": "fc2"}
            for attention, marian in attentions.items():
                parts |= {f"{attention}.{a}": m for a, m in attention_names(marian).items()}
            parts |= {f"norms.{j}": f"{norm}_layer_norm" for j, norm in enumerate(norms)}
            for part, marian in parts.items():
                for kind in ("weight", "bias"):
                    names[f"{ours}.{part}.{kind}"] = f"{theirs}.{marian}.{kind}"
    return names


# ---------------------------------------------------------------- reading a Marian folder


@dataclass
class Side:
    """One side's vocabulary: Marian's sentencepiece model (its file and ModelProto) and vocabulary
    (piece -> Marian id, from its file)."""

    spm_file: Path
    proto: object
    vocab_file: Path
    vocab: dict[str, int]


@dataclass
class Marian:
    """A folder that MarianMTModel's and MarianTokenizer's save_pretrained wrote, read and checked."""

    folder: Path
    config: dict  # config.json
    generation: dict  # generation_config.json, or {}
    weights: dict[str, torch.Tensor]  # model.safetensors (or its shards), in float32
    weights_file: Path
    source: Side
    target: Side

    def file(self, name: str) -> Path:
        return self.folder / name

    def number(self, field: str, default=None):
        """An int of config.json; AttnmtError naming the file and field if it is missing or not one."""
        value = self.config.get(field, default)
        if not isinstance(value, int) or isinstance(value, bool):
            raise AttnmtError(f"{self.file('config.json')}: {field} is {value!r}, not a whole number")
        return value

    def weight(self, *names: str) -> torch.Tensor:
        """The first of ``names`` that the weights hold (a tied weight is stored under one name)."""
        for name in names:
            if name in self.weights:
                return self.weights[name]
        raise AttnmtError(f"{self.weights_file}: no weight {' or '.join(names)}: not a MarianMTModel's weights")


def read_marian(folder: Path) -> Marian:
    """The Marian model of ``folder`` (AttnmtError naming the file and field at fault)."""
    folder = Path(folder)
    config = _json(folder, "config.json")
    if config.get("model_type") != "marian":
        raise AttnmtError(
            f"{folder / 'config.json'}: model_type is {config.get('model_type')!r}; attnmt imports Marian "
            "models (MarianMTModel: OPUS-MT and the other Helsinki-NLP models)"
        )
    tokenizer = _json(folder, "tokenizer_config.json", required=False)
    separate = bool(tokenizer.get("separate_vocabs", False))
    vocab = _vocabulary(folder, "vocab.json")
    weights, weights_file = _weights(folder)
    marian = Marian(
        folder,
        config,
        _json(folder, "generation_config.json", required=False),
        weights,
        weights_file,
        Side(*_spm(folder, "source.spm"), folder / "vocab.json", vocab),
        Side(
            *_spm(folder, "target.spm"), *(_target_vocabulary(folder) if separate else (folder / "vocab.json", vocab))
        ),
    )
    _check_vocabularies(marian)
    return marian


def _json(folder: Path, name: str, required: bool = True) -> dict:
    path = inside_folder(folder, folder / name)
    if not path.is_file():
        if required:
            raise AttnmtError(f"{path}: missing: {_EXPECTED}")
        return {}
    if path.stat().st_size > MAX_JSON_BYTES:
        raise AttnmtError(f"{path}: {path.stat().st_size:,} bytes is too large for a Marian model's {name}")
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise AttnmtError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(value, dict):
        raise AttnmtError(f"{path}: expected a JSON object, found {type(value).__name__}")
    return value


_EXPECTED = (
    "a Marian folder holds what MarianMTModel's and MarianTokenizer's save_pretrained write "
    "(config.json, model.safetensors, source.spm, target.spm, vocab.json)"
)


def _vocabulary(folder: Path, name: str) -> dict[str, int]:
    vocab = _json(folder, name)
    for piece, i in vocab.items():
        if not isinstance(i, int) or isinstance(i, bool) or i < 0:
            raise AttnmtError(f"{folder / name}: the piece {piece!r} has id {i!r}, not a whole number >= 0")
    return vocab


def _target_vocabulary(folder: Path) -> tuple[Path, dict[str, int]]:
    return folder / "target_vocab.json", _vocabulary(folder, "target_vocab.json")


def _spm(folder: Path, name: str):
    path = inside_folder(folder, folder / name)
    if not path.is_file():
        raise AttnmtError(f"{path}: missing: {_EXPECTED}")
    try:
        from sentencepiece import sentencepiece_model_pb2
    except ImportError:  # (the module imports protobuf)
        raise AttnmtError(
            "attnmt import needs protobuf to read sentencepiece models: pip install 'attnmt[hub]'"
        ) from None
    proto = sentencepiece_model_pb2.ModelProto()
    try:
        proto.ParseFromString(path.read_bytes())
    except Exception as e:  # protobuf's DecodeError, and what a file of another kind makes it raise
        raise AttnmtError(f"{path}: not a sentencepiece model ({e})") from None
    if not proto.pieces:
        raise AttnmtError(f"{path}: not a sentencepiece model (no pieces)")
    return path, proto


def _weights(folder: Path) -> tuple[dict[str, torch.Tensor], Path]:
    """The tensors of model.safetensors, or of the shards model.safetensors.index.json names."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    single, index = folder / "model.safetensors", folder / "model.safetensors.index.json"
    if inside_folder(folder, single).is_file():
        files = [single]
    elif inside_folder(folder, index).is_file():
        weight_map = _json(folder, index.name).get("weight_map", {})
        files = [folder / name for name in sorted(set(weight_map.values()))]
    else:
        pickled = [name for name in ("pytorch_model.bin", "tf_model.h5") if (folder / name).exists()]
        hint = f" ({pickled[0]} is not read: attnmt unpickles nothing; give the hub name, or " if pickled else " ("
        raise AttnmtError(
            f"{single}: missing{hint}load the model with transformers and save_pretrained it, which writes safetensors)"
        )
    tensors = {}
    for path in files:
        try:
            tensors |= load_file(str(inside_folder(folder, path)))
        except (SafetensorError, OSError, ValueError) as e:
            raise AttnmtError(f"{path}: not a readable safetensors file ({e})") from None
    return {name: t.float() for name, t in tensors.items()}, files[0]


def _check_vocabularies(marian: Marian):
    """Each vocabulary has one id for every row of its embeddings, and the special pieces the config names."""
    config_file = marian.file("config.json")
    shared = marian.config.get("share_encoder_decoder_embeddings", True)
    rows = {
        "source": _embeddings(marian, "encoder").size(0),
        "target": _embeddings(marian, "decoder").size(0),
    }
    for name, side in (("source", marian.source), ("target", marian.target)):
        ids = sorted(side.vocab.values())
        if ids != list(range(rows[name])):
            weight = (
                "model.shared.weight" if shared else f"model.{'en' if name == 'source' else 'de'}coder.embed_tokens"
            )
            raise AttnmtError(
                f"{side.vocab_file}: {len(side.vocab):,} pieces with ids {ids[0]}..{ids[-1]}, but the {name} "
                f"embeddings ({weight} in {marian.weights_file.name}) have {rows[name]:,} rows "
                f"(config.json vocab_size {marian.config.get('vocab_size')}): the vocabulary is not the model's"
            )
    # pad_token_id is the source's <pad>, and the target's where the vocabulary is shared (a decoder
    # vocabulary of its own has its <pad> elsewhere: its decoder starts from it, decoder_start_token_id)
    for field, piece in (("pad_token_id", "<pad>"), ("eos_token_id", "</s>")):
        i = marian.number(field)
        separate_pad = piece == "<pad>" and marian.target.vocab is not marian.source.vocab
        for side in (marian.source,) if separate_pad else (marian.source, marian.target):
            if side.vocab.get(piece) != i:
                raise AttnmtError(
                    f"{config_file}: {field} is {i}, but {side.vocab_file.name} gives {piece} "
                    f"the id {side.vocab.get(piece)}"
                )
    for side in (marian.source, marian.target):
        for piece in ("<unk>", "<pad>"):
            if piece not in side.vocab:
                raise AttnmtError(f"{side.vocab_file}: no {piece} piece (MarianTokenizer needs one)")
    start = marian.number("decoder_start_token_id", marian.config.get("pad_token_id"))
    if not 0 <= start < rows["target"]:
        raise AttnmtError(f"{config_file}: decoder_start_token_id {start} is no id of the target vocabulary")
    # <s> is attnmt's BOS, which it never writes: a decoder may start from it (a folder that attnmt
    # export wrote: decoder_start_token_id is its id), and an encoder never reads it (the source's
    # sentencepiece model cuts no <s> from a text); a target <s> that the decoder could write has no id here
    target_bos = marian.target.vocab.get("<s>")
    if target_bos is not None and target_bos != start:
        raise AttnmtError(
            f"{marian.target.vocab_file}: a piece <s> (id {target_bos}) that the decoder can write (it starts from "
            f"decoder_start_token_id {start}): attnmt's <s> is its BOS, which it never writes: not importable"
        )


def _embeddings(marian: Marian, stack: str) -> torch.Tensor:
    return marian.weight(f"model.{stack}.embed_tokens.weight", "model.shared.weight")


# ---------------------------------------------------------------- Marian's model as attnmt's


def model_section(marian: Marian) -> dict:
    """attnmt's model section of a Marian config.json: every field that shapes a weight or a computation."""
    config, file = marian.config, marian.file("config.json")
    for ours, theirs in (("heads", "attention_heads"), ("feed_forward", "ffn_dim")):
        if config.get(f"encoder_{theirs}") != config.get(f"decoder_{theirs}"):
            raise AttnmtError(
                f"{file}: encoder_{theirs} {config.get(f'encoder_{theirs}')} and decoder_{theirs} "
                f"{config.get(f'decoder_{theirs}')} differ; attnmt's Transformer has one model.{ours}"
            )
    activation = config.get("activation_function")
    if activation not in ACTIVATIONS:
        raise AttnmtError(
            f"{file}: activation_function {activation!r} is not one of attnmt's Transformer "
            f"(model.activation: {', '.join(sorted(ACTIVATIONS))})"
        )
    decoder = _embeddings(marian, "decoder")
    lm_head = marian.weights.get("lm_head.weight")
    return {
        "type": "transformer",
        "d_model": marian.number("d_model"),
        "heads": marian.number("encoder_attention_heads"),
        "encoder_layers": marian.number("encoder_layers"),
        "decoder_layers": marian.number("decoder_layers"),
        "feed_forward": marian.number("encoder_ffn_dim"),
        "positions": "sinusoidal-halves",
        "max_positions": marian.number("max_position_embeddings"),
        "norm": "post",
        "scale_embeddings": bool(config.get("scale_embedding", False)),
        "activation": ACTIVATIONS[activation],
        "dropout": float(config.get("dropout", 0.1)),
        "attention_dropout": float(config.get("attention_dropout", 0.0)),
        # lm_head is saved only when it is not the decoder's embeddings
        "tie_embeddings": lm_head is None or torch.equal(lm_head, decoder),
    }


def vocabulary_layout(side: Side, start: int) -> tuple[object, list[int], list[bool]]:
    """The sentencepiece model of ``side`` with its pieces in attnmt's id order (the module's
    docstring), the Marian id of each attnmt id, and whether Marian's vocabulary has that piece
    (False for the pieces only its sentencepiece model has, and for BOS: attnmt's start, Marian's
    ``start`` id, which Marian's decoder never writes)."""
    from sentencepiece import sentencepiece_model_pb2

    Piece = sentencepiece_model_pb2.ModelProto.SentencePiece
    own = {p.piece: p for p in side.proto.pieces if p.type not in (Piece.CONTROL, Piece.UNKNOWN)}
    vocab = side.vocab
    layout = sentencepiece_model_pb2.ModelProto()
    layout.CopyFrom(side.proto)
    del layout.pieces[:]
    marian_ids, known = [], []

    def add(piece: str, score: float, kind, marian_id: int, in_vocab: bool):
        layout.pieces.add(piece=piece, score=score, type=kind)
        marian_ids.append(marian_id)
        known.append(in_vocab)

    marian_of = {PAD: vocab["<pad>"], UNK: vocab["<unk>"], BOS: start, EOS: vocab["</s>"]}
    for i, piece in SPECIALS.items():
        add(piece, 0.0, Piece.UNKNOWN if i == UNK else Piece.CONTROL, marian_of[i], i != BOS)
    # A text's run of characters the sentencepiece model does not know comes out as one piece, its
    # text, which Marian looks up in its vocabulary: there a piece of the other language's model may
    # have it (a shared vocabulary). Such pieces are cut here too, scored as sentencepiece scores an
    # unknown piece (its lowest score - 10): no other piece can cover those characters, so the rest
    # of the text is cut as before. (A run that Marian's vocabulary lacks whole, but has in parts,
    # is cut into the parts here, and is one <unk> there.) With byte fallback, bytes stand for them.
    alphabet = set("".join(own))
    unknown_score = min((p.score for p in own.values()), default=0.0) - 10.0
    for piece, i in sorted(vocab.items(), key=lambda item: item[1]):
        if piece in SPECIALS.values():
            continue
        if piece in own:
            add(piece, own[piece].score, own[piece].type, i, True)
        elif not side.proto.trainer_spec.byte_fallback and not set(piece) & alphabet:
            add(piece, unknown_score, Piece.NORMAL, i, True)
        else:  # never cut from a text, still a row of the embeddings (and a word the decoder can write)
            add(piece, 0.0, Piece.UNUSED, i, True)
    for piece, mine in own.items():
        if piece not in vocab:  # Marian reads it as <unk>
            add(piece, mine.score, mine.type, vocab["<unk>"], False)
    spec = layout.trainer_spec
    spec.pad_id, spec.unk_id, spec.bos_id, spec.eos_id = PAD, UNK, BOS, EOS
    spec.pad_piece, spec.unk_piece, spec.bos_piece, spec.eos_piece = (SPECIALS[i] for i in (PAD, UNK, BOS, EOS))
    return layout, marian_ids, known


def attnmt_weights(marian: Marian, model: dict, source: list[int], target: list[int], known: list[bool]) -> dict:
    """attnmt's state dict of the Marian weights: the layers renamed, each embedding and output row
    that of its piece's Marian id (``source``, ``target``: the Marian id of each attnmt id)."""
    weights = {
        ours: marian.weight(theirs)
        for ours, theirs in layer_names(model["encoder_layers"], model["decoder_layers"]).items()
    }
    decoder = _embeddings(marian, "decoder")
    lm_head = marian.weights.get("lm_head.weight", decoder)
    bias = marian.weight("final_logits_bias").reshape(-1)[target]
    weights["src_embed.tokens.weight"] = _embeddings(marian, "encoder")[source]
    weights["tgt_embed.tokens.weight"] = decoder[target]
    weights["generator.weight"] = lm_head[target]
    weights["generator.bias"] = bias.masked_fill(~torch.tensor(known), NEVER)
    return weights


# ---------------------------------------------------------------- attnmt import


def import_marian(
    source: str | Path, out_dir: str | Path, force: bool = False, log: Callable[[str], None] = print
) -> Path:
    """``attnmt import``: the Marian model of the folder ``source`` (save_pretrained's), or of the hub
    name ``source`` (downloaded by transformers), as the attnmt model folder ``out_dir``."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not force:
        raise AttnmtError(f"{out_dir} exists: remove it, choose another folder, or give --force to replace it")
    if Path(source).is_dir():
        return _import_folder(Path(source), str(source), out_dir, log)
    if Path(source).exists() or str(source).count("/") != 1:
        raise AttnmtError(f"{source}: not a folder, nor a hub name (OWNER/NAME, such as Helsinki-NLP/opus-mt-de-en)")
    with tempfile.TemporaryDirectory() as tmp:
        _download(str(source), Path(tmp), log)
        return _import_folder(Path(tmp), str(source), out_dir, log)


def _download(name: str, folder: Path, log: Callable[[str], None]):
    """The hub's model ``name`` saved into ``folder`` by transformers itself (from_pretrained,
    save_pretrained: safetensors)."""
    try:
        from transformers import MarianMTModel, MarianTokenizer
    except ImportError:
        raise AttnmtError(f"importing {name} from the hub needs transformers: pip install 'attnmt[hub]'") from None
    log(f"downloading {name} with transformers")
    try:
        # the model first: for a name it cannot find or fetch, its from_pretrained raises OSError,
        # where transformers 5's MarianTokenizer goes on without its files and fails on a None path
        model = MarianMTModel.from_pretrained(name)
        tokenizer = MarianTokenizer.from_pretrained(name)
    except OSError as e:
        raise AttnmtError(f"{name}: transformers could not load it ({e})") from None
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def _import_folder(folder: Path, source: str, out_dir: Path, log: Callable[[str], None]) -> Path:
    marian = read_marian(folder)
    model = model_section(marian)
    start = marian.number("decoder_start_token_id", marian.config.get("pad_token_id"))
    # (an encoder never reads BOS: its row is the pad's, or that of the source's <s>)
    src_proto, src_ids, _ = vocabulary_layout(
        marian.source, marian.source.vocab.get("<s>", marian.source.vocab["<pad>"])
    )
    tgt_proto, tgt_ids, known = vocabulary_layout(marian.target, start)
    raw = {
        "experiment_dir": ".",
        "data": {
            # never trained here: fine-tuning names its own corpus (docs/hub.md)
            "train": {"tsv": "no-training-data.tsv"},
            "subwords": _subword_settings(src_proto, len(tgt_ids)),
        },
        "model": model,
        "training": {"max_steps": 1},
        "decoding": {"beam": _beam(marian)},
    }
    partial = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        src_path, tgt_path = subword_paths(partial, joint=False)
        src_path.parent.mkdir(parents=True)
        src_path.write_bytes(src_proto.SerializeToString())
        tgt_path.write_bytes(tgt_proto.SerializeToString())
        config = config_from_dict(raw, partial, source=f"{source}'s imported config")
        transformer = build_model(config.model, len(src_ids), len(tgt_ids))
        try:
            transformer.load_state_dict(attnmt_weights(marian, model, src_ids, tgt_ids, known))
        except RuntimeError as e:
            raise AttnmtError(
                f"{marian.weights_file}: the weights do not fit the shapes of config.json ({e})"
            ) from None
        save_model(transformer, partial / "best.safetensors", {"imported_from": source})
        header = f"# {source}, imported by `attnmt import` (a Marian model): never trained here, see docs/hub.md\n"
        atomic_write_text(partial / "config.yaml", header + yaml.safe_dump(raw, sort_keys=False, allow_unicode=True))
        provenance = {"source": source, "marian_config": marian.config, "generation_config": marian.generation}
        atomic_write_text(partial / IMPORTED, json.dumps(provenance, indent=1, sort_keys=True) + "\n")
    except BaseException:  # (nothing half-written is left, whatever stopped it)
        shutil.rmtree(partial, ignore_errors=True)
        raise
    shutil.rmtree(out_dir, ignore_errors=True)
    partial.rename(out_dir)
    if marian.config.get("activation_dropout"):
        log(f"note: Marian's activation_dropout {marian.config['activation_dropout']} has no field in attnmt (dropped)")
    log(
        f"{source}: {model['encoder_layers']}+{model['decoder_layers']} layers, d_model {model['d_model']}, "
        f"vocabularies {len(src_ids):,} and {len(tgt_ids):,} pieces"
    )
    return out_dir


def _subword_settings(proto, target_pieces: int) -> dict:
    """data.subwords that say what the imported models are (a fine-tuning config repeats them)."""
    kinds = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}
    spec = proto.trainer_spec
    return {
        "type": kinds.get(spec.model_type, "unigram"),
        "vocab_size": target_pieces,
        "joint": False,
        "character_coverage": round(spec.character_coverage, 6) if 0 < spec.character_coverage <= 1 else 1.0,
        "lowercase": proto.normalizer_spec.name.endswith("_cf"),
    }


def _beam(marian: Marian) -> int:
    """The beam the model's generation config asks for (OPUS-MT's: 4 or 6), else attnmt's 5."""
    beam = marian.generation.get("num_beams", marian.config.get("num_beams", 5))
    return beam if isinstance(beam, int) and 1 <= beam <= 100 else 5
