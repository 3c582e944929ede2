"""attnmt's Transformer as a Marian model (Hugging Face's MarianMTModel): ``attnmt export --format huggingface``.

    attnmt export runs/de-en --format huggingface runs/de-en-hf     # trained by attnmt, or imported

    from transformers import MarianMTModel, MarianTokenizer
    model = MarianMTModel.from_pretrained("runs/de-en-hf")
    tokenizer = MarianTokenizer.from_pretrained("runs/de-en-hf")
    out = model.generate(**tokenizer(texts, return_tensors="pt", padding=True))
    tokenizer.batch_decode(out, skip_special_tokens=True)

The folder is what MarianMTModel's and MarianTokenizer's save_pretrained write: model.safetensors,
config.json, generation_config.json, source.spm and target.spm (attnmt's own sentencepiece models),
vocab.json (and target_vocab.json where the target's pieces are not the source's), tokenizer_config.json.

The ids stay attnmt's. MarianTokenizer cuts a text with source.spm and looks each piece up in
vocab.json (a piece it lacks reads as <unk>; it never uses the sentencepiece model's own ids), and
vocab.json gives every piece its attnmt id: pad 0, unk 1, bos 2, eos 3, then the pieces in their
model's order. So the tokenizer reads the ids attnmt reads, and every weight row stays where it is.
config.json says so: pad_token_id 0, eos_token_id 3, and decoder_start_token_id 2, attnmt's BOS,
whose embedding is the decoder's first input, as in attnmt (attnmt import made Marian's start, its
pad, that embedding). attnmt never writes PAD or BOS (their logits are -inf): their
final_logits_bias (the generator's bias elsewhere) is -1e9, so that generate never writes them
either, with nothing to pass. <s> is the tokenizer's bos_token, a special token: generate's outputs
begin with the decoder's start, which ``skip_special_tokens`` removes.

Marian's Transformer is attnmt's with post-norm layers (model.norm post), positions in sinusoidal
halves (model.positions sinusoidal-halves) and softmax attention; model.scale_embeddings and
model.activation (relu, silu: Marian's swish, gelu) are Marian fields too. Any other model (pre-norm,
attnmt's default; learned or interleaved sinusoidal positions; sparse attention; an RNN; another
task) is refused, naming the field. One embedding matrix (``model.shared``) where the source's, the
target's and the output layer's weights are the same numbers (an imported OPUS-MT model's), else
an encoder's and a decoder's, and ``lm_head`` of its own where the output layer is not tied.

Decoding settings are not weights: generation_config.json has decoding.beam as num_beams, and
max_length model.max_positions (Marian's table of positions ends there; attnmt's sinusoids go on).
generate divides a beam's score by length ** length_penalty, attnmt by Wu et al.'s
((5 + length) / 6) ** alpha: with 0 both rank by the summed log-probabilities (written as 0 where
decoding.length_penalty is 0). At its length limit generate forces </s> with a log-probability of 0
(forced_eos_token_id, as OPUS-MT's), attnmt adds </s>'s own; attnmt's limit grows with the source
(decoding.max_length_ratio, max_length_offset), generate's is max_length.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Callable

import torch

from attnmt.core.errors import AttnmtError
from attnmt.core.task import task_of
from attnmt.core.files import write_error
from attnmt.core.folders import model_config
from attnmt.data.subwords import BOS, EOS, PAD, UNK
from attnmt.translation.marian import NEVER, SPECIALS, layer_names

# attnmt's model.activation -> Marian's activation_function
MARIAN_ACTIVATIONS = {"relu": "relu", "silu": "swish", "gelu": "gelu"}


def marian_refusal(config) -> str | None:
    """Why the model of ``config`` (a model folder's) is no Marian model, naming the config field;
    None where a MarianMTModel computes what it computes."""
    if task_of(config.task).inputs != "text":
        return f"task is {config.task}; a Marian model translates text (task: translation)"
    model = config.model
    if model.type != "transformer":
        return f"model.type is {model.type}; a Marian model is a Transformer (model.type: transformer)"
    if model.norm != "post":
        return (
            f"model.norm is {model.norm}; a Marian model's layers are post-norm (model.norm: post, "
            "LayerNorm after each residual sum, none at the end of a stack)"
        )
    if model.positions != "sinusoidal-halves":
        return (
            f"model.positions is {model.positions}; a Marian model's positions are fixed sinusoids, the sines "
            "in the first half of the dimensions and the cosines in the second (model.positions: sinusoidal-halves)"
        )
    if model.attention_normalizer != "softmax":
        return f"model.attention_normalizer is {model.attention_normalizer}; a Marian model attends with softmax"
    if model.activation not in MARIAN_ACTIVATIONS:
        return f"model.activation is {model.activation}; Marian's are {', '.join(MARIAN_ACTIVATIONS)}"
    return None


def export_huggingface(
    model_dir: str | Path,
    out_dir: str | Path,
    force: bool = False,
    checkpoint: str = "best",
    log: Callable[[str], None] = print,
) -> Path:
    """``attnmt export MODEL_DIR --format huggingface OUT_DIR``: the Transformer of ``model_dir`` (its
    ``checkpoint`` weights: best, last or averaged) as the MarianMTModel folder ``out_dir``, written
    into a temporary folder beside it and renamed when complete."""
    from attnmt.seq2seq.inference import Translator

    model_dir, out_dir = Path(model_dir), Path(out_dir)
    if out_dir.resolve() == model_dir.resolve() or out_dir.resolve() in model_dir.resolve().parents:
        raise AttnmtError(f"{out_dir}: the folder to write holds the model {model_dir}: choose another folder")
    if out_dir.exists() and not force:
        raise AttnmtError(f"{out_dir} exists: remove it, choose another folder, or give --force to replace it")
    why = marian_refusal(model_config(model_dir))
    if why is not None:
        raise AttnmtError(f"{model_dir}: {why}: not exportable as a Hugging Face MarianMTModel")
    transformers = _transformers()
    translator = Translator(model_dir, checkpoint)
    for subwords in (translator.src_subwords, translator.tgt_subwords):
        _check_specials(subwords)
    source, target = _pieces(translator.src_subwords), _pieces(translator.tgt_subwords)
    tensors, shared, tie = marian_tensors(translator.model)
    config = marian_config(transformers, translator.config, len(source), len(target), shared, tie)

    partial = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        partial.mkdir(parents=True)
        _write(partial, transformers, translator, tensors, config, source, target)
        _replace(partial, out_dir)
    except BaseException as e:  # (nothing half-written is left, whatever stopped it)
        shutil.rmtree(partial, ignore_errors=True)
        if isinstance(e, OSError):  # (a full disk, a folder not writable)
            raise write_error(out_dir, e) from None
        raise
    model = translator.config.model
    log(
        f"{model_dir}: {model.encoder_layers}+{model.decoder_layers} layers, d_model {model.d_model}, "
        f"vocabularies {len(source):,} and {len(target):,} pieces"
        f"{' (one: vocab.json)' if source == target else ''}; embeddings "
        f"{'shared' if shared else 'of each side'}, output layer {'tied' if tie else 'of its own'}"
    )
    return out_dir


def _transformers():
    try:
        import transformers
    except ImportError:
        raise AttnmtError("attnmt export --format huggingface needs transformers: pip install 'attnmt[hub]'") from None
    return transformers


def _check_specials(subwords):
    """MarianTokenizer finds <pad>, <unk> and </s> by name; <s> is its bos_token."""
    for i, name in SPECIALS.items():
        piece = subwords.sp.id_to_piece(i)
        if piece != name:
            raise AttnmtError(
                f"{subwords.path}: id {i} is {piece!r}; a Hugging Face export needs attnmt's special pieces "
                f"{', '.join(SPECIALS.values())} at ids {', '.join(map(str, SPECIALS))}"
            )


def _pieces(subwords) -> list[str]:
    return [subwords.sp.id_to_piece(i) for i in range(len(subwords))]


def marian_tensors(model) -> tuple[dict[str, torch.Tensor], bool, bool]:
    """The state dict of a MarianMTModel of attnmt's Transformer ``model`` (as its save_pretrained
    writes it: a tied weight under one name), whether the embeddings are one matrix
    (share_encoder_decoder_embeddings), and whether the output layer is the decoder's embeddings
    (tie_word_embeddings)."""
    state = {name: t.detach().float() for name, t in model.state_dict().items()}
    config = model.config
    names = layer_names(config.encoder_layers, config.decoder_layers)
    src, tgt, out = (state[f"{name}.weight"] for name in ("src_embed.tokens", "tgt_embed.tokens", "generator"))
    tie = torch.equal(out, tgt)
    # (one matrix only where it is tied too: untied, transformers ties none of the three)
    shared = tie and src.shape == tgt.shape and torch.equal(src, tgt)
    bias = state.get("generator.bias", torch.zeros(len(out))).clone()
    bias[[PAD, BOS]] = NEVER  # (attnmt's -inf, which it puts on their logits)
    tensors = {theirs: state[ours] for ours, theirs in names.items()}
    tensors["final_logits_bias"] = bias[None]
    if shared:
        tensors["model.shared.weight"] = tgt
    else:
        tensors["model.encoder.embed_tokens.weight"] = src
        tensors["model.decoder.embed_tokens.weight"] = tgt
    if not tie:
        tensors["lm_head.weight"] = out
    placed = set(names) | {f"{name}.weight" for name in ("src_embed.tokens", "tgt_embed.tokens", "generator")}
    left = sorted(set(state) - placed - {"generator.bias"})
    if left:  # (a part that no field of the config refuses: say so rather than drop it)
        raise AttnmtError(f"weights that a MarianMTModel has no place for: {', '.join(left)}")
    return {name: t.contiguous().clone() for name, t in tensors.items()}, shared, tie


def marian_config(transformers, config, source_pieces: int, target_pieces: int, shared: bool, tie: bool):
    """The MarianConfig of attnmt's model section (checked by marian_refusal)."""
    model = config.model
    return transformers.MarianConfig(
        vocab_size=source_pieces,
        decoder_vocab_size=target_pieces,
        share_encoder_decoder_embeddings=shared,
        tie_word_embeddings=tie,
        d_model=model.d_model,
        encoder_layers=model.encoder_layers,
        decoder_layers=model.decoder_layers,
        encoder_attention_heads=model.heads,
        decoder_attention_heads=model.heads,
        encoder_ffn_dim=model.feed_forward,
        decoder_ffn_dim=model.feed_forward,
        max_position_embeddings=model.max_positions,
        activation_function=MARIAN_ACTIVATIONS[model.activation],
        scale_embedding=model.scale_embeddings,
        dropout=model.dropout,
        attention_dropout=model.attention_dropout,
        activation_dropout=0.0,
        pad_token_id=PAD,
        eos_token_id=EOS,
        bos_token_id=BOS,
        decoder_start_token_id=BOS,
        forced_eos_token_id=EOS,
        architectures=["MarianMTModel"],
    )


def generation_settings(config) -> dict:
    """generation_config.json: the ids, decoding.beam, a length limit within Marian's positions."""
    settings = {
        "bos_token_id": BOS,
        "decoder_start_token_id": BOS,
        "eos_token_id": EOS,
        "forced_eos_token_id": EOS,
        "pad_token_id": PAD,
        "max_length": config.model.max_positions,
        "num_beams": config.decoding.beam,
    }
    if config.decoding.length_penalty == 0:
        settings["length_penalty"] = 0.0
    return settings


def _write(folder: Path, transformers, translator, tensors: dict, config, source: list[str], target: list[str]):
    from safetensors.torch import save

    (folder / "model.safetensors").write_bytes(save(tensors, metadata={"format": "pt"}))
    config.to_json_file(str(folder / "config.json"))
    settings = json.dumps(generation_settings(translator.config), indent=2) + "\n"
    (folder / "generation_config.json").write_text(settings, encoding="utf-8")
    shutil.copyfile(translator.src_subwords.path, folder / "source.spm")
    shutil.copyfile(translator.tgt_subwords.path, folder / "target.spm")
    separate = source != target
    files = {"vocab.json": source} | ({"target_vocab.json": target} if separate else {})
    for name, pieces in files.items():
        vocab = {piece: i for i, piece in enumerate(pieces)}
        (folder / name).write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    # tokenizer_config.json as transformers writes it (it writes the vocabularies again, the same)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ("Recommended: pip install sacremoses", which it does not use to cut)
        tokenizer = transformers.MarianTokenizer(
            source_spm=str(folder / "source.spm"),
            target_spm=str(folder / "target.spm"),
            vocab=str(folder / "vocab.json"),
            target_vocab_file=str(folder / "target_vocab.json") if separate else None,
            separate_vocabs=separate,
            bos_token=SPECIALS[BOS],
            unk_token=SPECIALS[UNK],
            eos_token=SPECIALS[EOS],
            pad_token=SPECIALS[PAD],
            model_max_length=translator.config.model.max_positions,
        )
        tokenizer.save_pretrained(str(folder))


def _replace(partial: Path, out_dir: Path):
    """``partial`` renamed to ``out_dir``; an ``out_dir`` there before (--force) moved aside first,
    and removed once the new one is in place (put back if the rename fails)."""
    if not (out_dir.exists() or out_dir.is_symlink()):
        os.replace(partial, out_dir)
        return
    aside = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".old", dir=out_dir.parent))
    os.replace(out_dir, aside / out_dir.name)
    try:
        os.replace(partial, out_dir)
    except BaseException:
        os.replace(aside / out_dir.name, out_dir)
        aside.rmdir()
        raise
    shutil.rmtree(aside, ignore_errors=True)
