"""attnmt import: a Marian model (as transformers saves OPUS-MT's) becomes an attnmt model folder that
computes what transformers computes: the same logits within 1e-4, the same greedy and beam outputs as
``generate``, token for token; mismatched or tampered folders are errors naming the file and field.

The Marian models are small (tests/marian_helpers.py): random weights trained for a few steps on
Multi30k, with sentencepiece models trained on its German and English. No network."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

import attnmt
import attnmt.translation.marian
from attnmt.cli import main
from attnmt.core.errors import AttnmtError
from attnmt.data.batching import make_batch
from attnmt.data.subwords import BOS, EOS
from conftest import require

try:  # an optional dependency (attnmt[hub], attnmt[test]): its absence must not stop the collection of the others
    import transformers
except ImportError:
    transformers = None

from marian_helpers import generate_to_limit, marian_folder, multi30k  # noqa: E402

TESTS = 200  # sentences of test_2016_flickr for the comparisons
LIMIT = 24  # every output's length limit, </s> included: some outputs end there


@pytest.fixture(autouse=True)
def _needs_transformers():
    require(transformers is not None, "pip install transformers (attnmt[hub] or attnmt[test])")


@pytest.fixture(scope="module", params=["shared", "separate"])
def marian(request, marian_imports):
    """A Marian folder (one vocabulary for both sides, or a decoder vocabulary of its own with a
    few source pieces left out of vocab.json), transformers' model and tokenizer of it, and its import."""
    from transformers import MarianMTModel, MarianTokenizer

    require(transformers is not None, "pip install transformers (attnmt[hub] or attnmt[test])")
    source, imported = marian_imports(request.param)
    model = MarianMTModel.from_pretrained(source).eval()
    return source, model, MarianTokenizer.from_pretrained(source), attnmt.load(imported)


def marian_ids(vocab: dict[str, int], pieces: list[str]) -> list[int]:
    """Marian's ids of pieces: a piece its vocabulary lacks reads as <unk> (MarianTokenizer)."""
    return [vocab.get(piece, vocab["<unk>"]) for piece in pieces]


def target_vocab(source) -> dict[str, int]:
    separate = (source / "target_vocab.json").is_file()
    return json.loads((source / ("target_vocab.json" if separate else "vocab.json")).read_text(encoding="utf-8"))


def test_the_sources_are_cut_and_numbered_as_marians(marian):
    source, _, tokenizer, ours = marian
    vocab = json.loads((source / "vocab.json").read_text(encoding="utf-8"))
    texts = multi30k("test_2016_flickr.de", TESTS) + multi30k("train.de", 200, skip=20_000)
    for text, theirs in zip(texts, tokenizer(texts)["input_ids"]):
        assert marian_ids(vocab, ours.src_subwords.pieces(ours.src_subwords.encode([text])[0] + [EOS])) == theirs


def test_logits_equal_transformers_within_1e_4(marian):
    """Teacher forced on real pairs (the reference translations), every logit of every target
    position, each column of attnmt's that of its piece's Marian id (BOS and the pieces only the
    sentencepiece model has are attnmt's own: never written)."""
    source, model, tokenizer, ours = marian
    texts, references = multi30k("test_2016_flickr.de", 32), multi30k("test_2016_flickr.en", 32)
    inputs = tokenizer(texts, text_target=references, return_tensors="pt", padding=True)
    with torch.no_grad():
        theirs = model(**inputs).logits  # (decoder inputs: the labels shifted, after decoder_start_token_id)
    batch = make_batch(ours.src_subwords.encode(texts), ours.tgt_subwords.encode(references))  # (</s> appended)
    tgt_ids = [ids + [EOS] for ids in ours.tgt_subwords.encode(references)]
    with torch.no_grad():
        logits, _ = ours.model(batch.src, batch.src_lengths, batch.tgt_in)
    vocab, pieces = target_vocab(source), ours.tgt_subwords.pieces(list(range(len(ours.tgt_subwords))))
    columns = [a for a, piece in enumerate(pieces) if piece in vocab and a != BOS]
    assert len(columns) == len(vocab)  # every Marian output has its column
    marian_columns = [vocab[pieces[a]] for a in columns]
    for row, ids in enumerate(tgt_ids):
        assert marian_ids(vocab, ours.tgt_subwords.pieces(ids)) == inputs["labels"][row, : len(ids)].tolist()
        ours_row, theirs_row = logits[row, : len(ids)][:, columns], theirs[row, : len(ids)][:, marian_columns]
        torch.testing.assert_close(ours_row, theirs_row, atol=1e-4, rtol=0)


def generated(model, tokenizer, texts: list[str], beam: int, n_best: int = 1) -> list[list[list[str]]]:
    """transformers' outputs (pieces, </s> included) of each text: LIMIT tokens at most, the
    target's <pad> (the decoder's start) forbidden, no length penalty."""
    forbid = model.config.decoder_start_token_id  # (the target's <pad>)
    n_bests = generate_to_limit(model, tokenizer, texts, beam, n_best, LIMIT, forbid)
    return [[tokenizer.convert_ids_to_tokens(ids) for ids in outputs] for outputs in n_bests]


@pytest.mark.parametrize("beam", [1, 4])
def test_greedy_and_beam_outputs_equal_generate_token_for_token(marian, beam):
    source, model, tokenizer, ours = marian
    # one limit for every sentence, as generate's max_length: LIMIT tokens whatever the source's length
    ours.set_decoding(length_penalty=0.0, max_length_ratio=1e-6, max_length_offset=LIMIT)
    texts = multi30k("test_2016_flickr.de", TESTS)
    vocab = target_vocab(source)
    n_best = min(beam, 2)
    theirs = generated(model, tokenizer, texts, beam, n_best)
    translations = ours.translate(texts, beam=beam, n_best=n_best)
    at_limit = 0
    for text, translation, expected in zip(texts, translations, theirs):
        candidates = [marian_ids(vocab, c.tokens) for c in translation.candidates]
        assert [tokenizer.convert_ids_to_tokens(c) for c in candidates] == expected, text
        at_limit += len(translation.candidates[0].tokens) == LIMIT
    assert 0 < at_limit < len(texts)  # outputs the model ended, and outputs cut at the limit


# ---------------------------------------------------------------- mismatched and tampered folders


@pytest.fixture(scope="module")
def untrained(tmp_path_factory):
    """A Marian folder of random weights (no training: only its files matter here)."""
    require(transformers is not None, "pip install transformers (attnmt[hub] or attnmt[test])")
    return marian_folder(tmp_path_factory.mktemp("marian-untrained"), steps=0)


def tampered(untrained, tmp_path, change) -> str:
    """The error of importing a copy of ``untrained`` after ``change(folder)``; nothing written."""
    folder = tmp_path / "marian"
    shutil.copytree(untrained, folder)
    change(folder)
    with pytest.raises(AttnmtError) as error:
        attnmt.translation.marian.import_marian(folder, tmp_path / "imported", log=lambda _: None)
    assert not (tmp_path / "imported").exists() and not (tmp_path / "imported.partial").exists()
    return str(error.value)


def edit_json(name: str, change):
    def edit(folder):
        value = json.loads((folder / name).read_text(encoding="utf-8"))
        change(value)
        (folder / name).write_text(json.dumps(value), encoding="utf-8")

    return edit


def test_a_missing_sentencepiece_model_is_named(untrained, tmp_path):
    message = tampered(untrained, tmp_path, lambda folder: (folder / "target.spm").unlink())
    assert "target.spm: missing" in message


def test_a_sentencepiece_model_that_is_not_one_is_named(untrained, tmp_path):
    message = tampered(untrained, tmp_path, lambda folder: (folder / "source.spm").write_bytes(b"\xff" * 64))
    assert "source.spm: not a sentencepiece model" in message


def test_a_vocabulary_that_does_not_match_the_embeddings_is_named(untrained, tmp_path):
    def drop_a_piece(vocab):
        del vocab[max(vocab, key=vocab.get)]  # (its <pad>, whose row the embeddings keep)
        vocab["<pad>"] = len(vocab) + 5

    message = tampered(untrained, tmp_path, edit_json("vocab.json", drop_a_piece))
    assert "vocab.json" in message and "embeddings" in message and "rows" in message


def test_an_unknown_activation_is_named_with_its_field(untrained, tmp_path):
    change = edit_json("config.json", lambda config: config.update(activation_function="tanh"))
    message = tampered(untrained, tmp_path, change)
    assert "config.json" in message and "activation_function 'tanh'" in message


def test_a_model_of_another_type_is_refused(untrained, tmp_path):
    message = tampered(untrained, tmp_path, edit_json("config.json", lambda config: config.update(model_type="bart")))
    assert "config.json: model_type is 'bart'" in message


def test_a_missing_size_is_named_with_its_field(untrained, tmp_path):
    message = tampered(untrained, tmp_path, edit_json("config.json", lambda config: config.pop("d_model")))
    assert "config.json: d_model is None" in message


def test_pickled_weights_are_never_read(untrained, tmp_path):
    def pickled_only(folder):
        (folder / "model.safetensors").rename(folder / "pytorch_model.bin")

    message = tampered(untrained, tmp_path, pickled_only)
    assert "model.safetensors: missing" in message and "pytorch_model.bin is not read" in message


def test_truncated_weights_are_named(untrained, tmp_path):
    def truncate(folder):
        data = (folder / "model.safetensors").read_bytes()
        (folder / "model.safetensors").write_bytes(data[: len(data) // 2])

    message = tampered(untrained, tmp_path, truncate)
    assert "model.safetensors: not a readable safetensors file" in message


def test_weights_of_other_shapes_are_named(untrained, tmp_path):
    message = tampered(
        untrained,
        tmp_path,
        edit_json("config.json", lambda config: config.update(encoder_ffn_dim=32, decoder_ffn_dim=32)),
    )
    assert "model.safetensors: the weights do not fit the shapes of config.json" in message


def test_an_existing_folder_is_kept_without_force(untrained, tmp_path):
    (tmp_path / "imported").mkdir()
    (tmp_path / "imported" / "mine.txt").write_text("kept", encoding="utf-8")
    assert main(["import", str(untrained), str(tmp_path / "imported")]) != 0
    assert (tmp_path / "imported" / "mine.txt").read_text(encoding="utf-8") == "kept"


# ---------------------------------------------------------------- a hub name


def test_a_hub_name_is_downloaded_by_transformers_and_imported_as_a_folder(untrained, tmp_path):
    """What a hub name goes through (here with a local path, which from_pretrained reads as it
    reads its cache): transformers' from_pretrained and save_pretrained into a folder, then the
    folder's import, with the same weights as the folder's own import."""
    from safetensors.torch import load_file

    downloaded = tmp_path / "downloaded"
    downloaded.mkdir()
    attnmt.translation.marian._download(str(untrained), downloaded, log=lambda _: None)
    for name, folder in (("direct", untrained), ("through-transformers", downloaded)):
        attnmt.translation.marian.import_marian(folder, tmp_path / name, log=lambda _: None)
    direct, through = (
        load_file(str(tmp_path / name / "best.safetensors")) for name in ("direct", "through-transformers")
    )
    assert direct.keys() == through.keys()
    for name in direct:
        assert torch.equal(direct[name], through[name]), name


def test_a_hub_name_that_cannot_be_fetched_is_a_clear_error(tmp_path, monkeypatch):
    require(transformers is not None, "pip install transformers (attnmt[hub] or attnmt[test])")
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # (no network here; read by huggingface_hub when imported)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-cache"))
    with pytest.raises(AttnmtError, match="Helsinki-NLP/opus-mt-xx-yy: transformers could not load it"):
        attnmt.translation.marian.import_marian("Helsinki-NLP/opus-mt-xx-yy", tmp_path / "out", log=lambda _: None)
    assert not (tmp_path / "out").exists()
