"""Small Marian models with random weights, built and saved as transformers saves OPUS-MT's
(MarianMTModel and MarianTokenizer's save_pretrained), for the tests of attnmt import and export
(tests/test_hub.py). Their sentencepiece models are trained on Multi30k's German and English."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import sentencepiece as spm
import torch

from conftest import shared_data


def multi30k(name: str, n: int, skip: int = 0) -> list[str]:
    """Lines skip .. skip + n of a Multi30k file (train.de, test_2016_flickr.en, ...)."""
    with gzip.open(shared_data("multi30k", f"{name}.gz"), "rt", encoding="utf-8") as f:
        lines = [line.strip() for _, line in zip(range(skip + n), f)]
    return lines[skip:]


def train_spm(folder: Path, name: str, lines: list[str], vocab_size: int) -> Path:
    """A unigram sentencepiece model with sentencepiece's own ids (unk 0, bos 1, eos 2), as Marian's."""
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=str(folder / name),
        vocab_size=vocab_size,
        model_type="unigram",
        minloglevel=2,
        num_threads=1,
    )
    (folder / f"{name}.model").rename(folder / f"{name}.spm")
    return folder / f"{name}.spm"


def marian_vocabulary(spm_files: list[Path], leave_out: int = 0) -> dict[str, int]:
    """A Marian vocabulary (vocab.json) of the pieces of ``spm_files``: </s> 0, <unk> 1, then the
    pieces, <pad> last, as OPUS-MT's; ``leave_out``: that many pieces of the first model's end left out
    (pieces that Marian reads as <unk>)."""
    vocab = {"</s>": 0, "<unk>": 1}
    for n, path in enumerate(spm_files):
        sp = spm.SentencePieceProcessor(model_file=str(path))
        pieces = [sp.id_to_piece(i) for i in range(len(sp)) if not (sp.is_control(i) or sp.is_unknown(i))]
        for piece in pieces[: len(pieces) - leave_out] if n == 0 else pieces:
            vocab.setdefault(piece, len(vocab))
    vocab["<pad>"] = len(vocab)
    return vocab


def marian_folder(
    folder: Path,
    separate_vocabs: bool = False,
    activation: str = "swish",
    scale_embedding: bool = True,
    tie: bool = True,
    leave_out: int = 0,
    seed: int = 0,
    steps: int = 150,
) -> Path:
    """A MarianMTModel of random weights and its MarianTokenizer, saved into ``folder`` by
    save_pretrained, after ``steps`` steps of training on Multi30k German -> English (about 7 s for 150).

    Untrained, a random model's next-token distributions are nearly uniform (which token is most
    probable turns on differences of 1e-6) or, drawn wider, it loops and never ends; a few steps give
    it a trained model's peaked distributions and outputs that end. final_logits_bias (which
    training leaves alone) is drawn, with </s> raised, and <pad> at -100: a trained Marian model
    never writes its pad (transformers' generate forbids it with bad_words_ids after the
    log-softmax, attnmt leaves it out of the softmax: with p(pad) 0 both are the same)."""
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    # (separate vocabularies: the target's the larger, as transformers needs the pad id, the
    # source's, to be a row of the decoder's embeddings too)
    source = train_spm(folder, "source", multi30k("train.de", 3000), 400 if separate_vocabs else 500)
    target = train_spm(folder, "target", multi30k("train.en", 3000), 500 if separate_vocabs else 400)
    if separate_vocabs:
        vocab, target_vocab = marian_vocabulary([source], leave_out), marian_vocabulary([target])
        (folder / "target_vocab.json").write_text(json.dumps(target_vocab), encoding="utf-8")
    else:
        vocab = target_vocab = marian_vocabulary([source, target], leave_out)
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    tokenizer_files = {"source_spm": str(source), "target_spm": str(target), "vocab": str(folder / "vocab.json")}
    if separate_vocabs:
        tokenizer_files["target_vocab_file"] = str(folder / "target_vocab.json")
    tokenizer = MarianTokenizer(**tokenizer_files, separate_vocabs=separate_vocabs)
    pad = vocab["<pad>"]
    config = MarianConfig(
        vocab_size=len(vocab),
        decoder_vocab_size=len(target_vocab),
        share_encoder_decoder_embeddings=not separate_vocabs,
        tie_word_embeddings=tie,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=256,
        pad_token_id=pad,
        decoder_start_token_id=target_vocab["<pad>"],
        eos_token_id=0,
        forced_eos_token_id=0,
        scale_embedding=scale_embedding,
        activation_function=activation,
        init_std=0.02,
        dropout=0.1,
    )
    torch.manual_seed(seed)
    model = MarianMTModel(config)
    train_marian(model, tokenizer, steps, seed)
    with torch.no_grad():
        bias = torch.randn(len(target_vocab))
        bias[0] += 2.0  # </s>
        bias[target_vocab["<pad>"]] = -100.0
        model.final_logits_bias.copy_(bias[None])
    model.save_pretrained(folder / "marian")
    tokenizer.save_pretrained(folder / "marian")
    return folder / "marian"


def train_marian(model, tokenizer, steps: int, seed: int, batch: int = 32):
    """``steps`` steps of AdamW (learning rate 0.01) on random batches of Multi30k's first 3,000 pairs."""
    if steps == 0:
        model.eval()
        return
    sources, targets = multi30k("train.de", 3000), multi30k("train.en", 3000)
    # The pairs' ids, tokenized once (tokenizing each batch anew took a tenth of the training's time),
    # each batch padded as the tokenizer pads one (padding=True, on the right); labels padded with -100
    sources, targets = tokenizer(sources)["input_ids"], tokenizer(text_target=targets)["input_ids"]
    pad = tokenizer.pad_token_id
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    draw = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        rows = torch.randint(0, len(sources), (batch,), generator=draw).tolist()
        inputs = {
            "input_ids": padded([sources[i] for i in rows], pad),
            "attention_mask": padded([[1] * len(sources[i]) for i in rows], 0),
            "labels": padded([targets[i] for i in rows], -100),  # (padding: no loss)
        }
        model(**inputs).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()


def padded(rows: list[list[int]], pad: int) -> torch.Tensor:
    """``rows`` padded on the right with ``pad`` to the longest, as one tensor."""
    longest = max(map(len, rows))
    return torch.tensor([row + [pad] * (longest - len(row)) for row in rows])


class EndAtLimit:
    """A logits processor for generate: at the last step that max_length allows, every token but
    </s> at -inf, its own log-probability kept, as attnmt ends an output at its length limit
    (decoding.ended_at_limit). transformers' forced_eos_token_id gives </s> a log-probability of 0
    there instead, which ranks the beams that reach the limit otherwise."""

    def __init__(self, max_length: int, eos: int):
        self.max_length, self.eos = max_length, eos

    def __call__(self, input_ids, scores):
        if input_ids.shape[-1] < self.max_length - 1:
            return scores
        ended = torch.full_like(scores, float("-inf"))
        ended[:, self.eos] = scores[:, self.eos]
        return ended


def generate_to_limit(model, tokenizer, texts: list[str], beam: int, n_best: int, limit: int, forbid=None):
    """transformers' n-best ids of each text, </s> included, the decoder's start left out: ``limit``
    tokens at most (max_length limit + 1 with the start) ended as attnmt ends them, no length
    penalty; ``forbid``: an id generate must never write (bad_words_ids)."""
    from transformers import LogitsProcessorList

    eos = model.config.eos_token_id
    out = model.generate(
        **tokenizer(texts, return_tensors="pt", padding=True),
        num_beams=beam,
        num_return_sequences=n_best,
        do_sample=False,
        max_length=limit + 1,
        length_penalty=0.0,
        early_stopping=False,
        forced_eos_token_id=None,
        bad_words_ids=None if forbid is None else [[forbid]],
        logits_processor=LogitsProcessorList([EndAtLimit(limit + 1, eos)]),
    )
    assert (out[:, 0] == model.config.decoder_start_token_id).all()  # (an exported model's: attnmt's BOS)
    rows = [ids[1 : ids.index(eos) + 1] if eos in ids else ids[1:] for ids in out.tolist()]
    return [rows[i : i + n_best] for i in range(0, len(rows), n_best)]
