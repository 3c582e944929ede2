"""attnmt export --format huggingface (issue 52, point 2): an attnmt Transformer as a folder that
MarianMTModel and MarianTokenizer load, computing what attnmt computes: the same source ids, the
same logits within 1e-4, the same greedy and beam outputs as attnmt's, token for token, for a Marian
model imported by attnmt import (one vocabulary, and a decoder vocabulary of its own) and for a
post-norm Transformer trained here; a model that Marian's architecture cannot express is refused,
naming the field; an existing folder is kept, and nothing is left half-written. And the CTranslate2
export of an imported model translates as attnmt does.

The Marian models are small (tests/marian_helpers.py): random weights trained a few steps on
Multi30k. No network."""

from __future__ import annotations

import shutil
import sys

import pytest
import torch
import yaml

import attnmt
import attnmt.translation.marian_export
from attnmt.cli import main
from attnmt.data.batching import make_batch
from attnmt.data.subwords import BOS, EOS, PAD
from conftest import copy_model, random_strings, require

try:  # optional dependencies (attnmt[hub], attnmt[ct2], attnmt[test]): the refusals need neither
    import transformers
except ImportError:
    transformers = None
try:
    import ctranslate2
except ImportError:
    ctranslate2 = None

from marian_helpers import generate_to_limit, multi30k  # noqa: E402

TESTS = 40  # sentences of test_2016_flickr.de for the comparisons
LIMIT = 24  # every output's length limit, </s> included: some outputs end there
CT2_LIMIT = 48  # (CTranslate2: more outputs that end, see the test)
TRANSFORMER = {"type": "transformer", "d_model": 32, "heads": 4, "feed_forward": 64, "encoder_layers": 2}


def needs_transformers():
    require(transformers is not None, "pip install transformers (attnmt[hub] or attnmt[test])")


def load_exported(folder):
    """transformers' model and tokenizer of an exported folder, loaded as a user loads them."""
    from transformers import MarianMTModel, MarianTokenizer

    return MarianMTModel.from_pretrained(folder).eval(), MarianTokenizer.from_pretrained(folder)


@pytest.fixture(scope="module", params=["shared", "separate"])
def marian(request, marian_imports, tmp_path_factory):
    """A Marian model imported by attnmt import (one vocabulary for both sides, tied; or a decoder
    vocabulary of its own with a few source pieces left out of vocab.json, untied), exported with
    --format huggingface: (the imported folder, attnmt's model, the exported folder, transformers'
    model and tokenizer of it)."""
    needs_transformers()
    _, imported = marian_imports(request.param)
    exported = tmp_path_factory.mktemp(f"marian-export-{request.param}") / "hf"
    assert main(["export", str(imported), "--format", "huggingface", str(exported)]) == 0
    return (imported, attnmt.load(imported), exported, *load_exported(exported))


@pytest.fixture(scope="module")
def post_norm(tmp_path_factory):
    """A Transformer trained here to copy strings (a joint vocabulary, separate embeddings, the output
    layer tied to the target's), with Marian's layout: post-norm, positions in sinusoidal halves;
    gelu, unscaled embeddings (the imported models have silu, scaled ones); and its export."""
    needs_transformers()
    folder = tmp_path_factory.mktemp("post-norm")
    model = copy_model(
        folder,
        60,
        **TRANSFORMER,
        decoder_layers=2,
        norm="post",
        positions="sinusoidal-halves",
        activation="gelu",
        scale_embeddings=False,
        tie_embeddings=True,
    )
    assert main(["export", str(model.folder), "--format", "huggingface", str(folder / "hf")]) == 0
    return model, folder / "hf", *load_exported(folder / "hf")


def generated(model, tokenizer, texts: list[str], beam: int, n_best: int) -> list[list[list[int]]]:
    """transformers' n-best ids of each text (</s> included, the decoder's start left out): LIMIT
    tokens at most, no length penalty, with nothing forbidden here (the exported bias does it)."""
    return generate_to_limit(model, tokenizer, texts, beam, n_best, LIMIT)


def assert_logits_equal(ours, model, tokenizer, texts: list[str], references: list[str]):
    """Teacher forced on the references, every logit of every target position within 1e-4 (PAD and
    BOS, -inf in attnmt, below -1e8 there; and the pieces an imported model never writes)."""
    inputs = tokenizer(texts, text_target=references, return_tensors="pt", padding=True)
    with torch.no_grad():
        theirs = model(**inputs).logits
    targets = ours.tgt_subwords.encode(references)
    batch = make_batch(ours.source_ids(texts), targets)
    with torch.no_grad():  # (what decoding reads: -inf at PAD and BOS)
        logits = ours.model.next_token_logits(ours.model.decoder_outputs(batch.src, batch.src_lengths, batch.tgt_in)[0])
    for row, ids in enumerate(targets):
        n = len(ids) + 1
        assert inputs["labels"][row, :n].tolist() == ids + [EOS]
        mine, hers = logits[row, :n], theirs[row, :n]
        written = mine[0] > -1e8  # (every position has the same columns)
        assert not written[PAD] and not written[BOS] and written.sum() > len(written) / 2
        torch.testing.assert_close(hers[:, written], mine[:, written], atol=1e-4, rtol=0)
        assert (hers[:, ~written] < -1e8).all()


def assert_outputs_equal(ours, model, tokenizer, texts: list[str], beam: int) -> int:
    """attnmt's n-best (2 at most) and transformers', token for token; how many ended before the limit."""
    ours.set_decoding(length_penalty=0.0, max_length_ratio=1e-6, max_length_offset=LIMIT)
    n_best = min(beam, 2)
    translations = ours.translate(texts, beam=beam, n_best=n_best)
    ended = 0
    for text, translation, expected in zip(texts, translations, generated(model, tokenizer, texts, beam, n_best)):
        assert [tokenizer.convert_ids_to_tokens(ids) for ids in expected] == [c.tokens for c in translation.candidates]
        assert tokenizer.decode(expected[0], skip_special_tokens=True) == translation.candidates[0].text, text
        ended += len(translation.candidates[0].tokens) < LIMIT
    assert sum(len(t.candidates[0].tokens) > 1 for t in translations) > len(texts) / 2  # (not </s> alone)
    return ended


FIELDS = ("type", "d_model", "heads", "encoder_layers", "decoder_layers", "feed_forward", "positions", "max_positions")
FIELDS += ("norm", "scale_embeddings", "activation", "tie_embeddings", "dropout", "attention_dropout")


def assert_imports_again(ours, folder, tmp_path):
    """attnmt import of an exported folder: the model it was (the same pieces with their scores, the
    same model fields and weights), translating the same."""
    assert main(["import", str(folder), str(tmp_path / "again")]) == 0
    again = attnmt.load(tmp_path / "again")
    assert again.src_subwords.vocabulary() == ours.src_subwords.vocabulary()
    assert again.tgt_subwords.vocabulary() == ours.tgt_subwords.vocabulary()
    assert {f: getattr(again.config.model, f) for f in FIELDS} == {f: getattr(ours.config.model, f) for f in FIELDS}
    mine, theirs = ours.model.state_dict(), again.model.state_dict()
    assert mine.keys() == theirs.keys()
    for name, weight in mine.items():
        if name == "generator.bias":  # (-1e9 at PAD and BOS in the export, whose logits attnmt makes -inf)
            kept = [i for i in range(len(weight)) if i not in (PAD, BOS)]
            weight, theirs[name] = weight[kept], theirs[name][kept]
        assert torch.equal(weight, theirs[name]), name
    texts = multi30k("test_2016_flickr.de", 8) + random_strings(8, 3, 8, seed=5)
    for model in (ours, again):  # (the fixture's model decodes as the test before it set)
        model.set_decoding(length_penalty=0.0, max_length_ratio=1e-6, max_length_offset=LIMIT)
    assert [t.tokens for t in again.translate(texts, beam=4)] == [t.tokens for t in ours.translate(texts, beam=4)]


# ---------------------------------------------------------------- an imported Marian model


def test_an_imported_model_exported_cuts_and_scores_as_attnmt(marian):
    _, ours, _, model, tokenizer = marian
    texts = multi30k("test_2016_flickr.de", 32) + multi30k("train.de", 100, skip=20_000)
    assert tokenizer(texts)["input_ids"] == [ids + [EOS] for ids in ours.source_ids(texts)]
    assert_logits_equal(ours, model, tokenizer, texts[:32], multi30k("test_2016_flickr.en", 32))


def test_an_imported_model_exported_translates_as_attnmt(marian):
    _, ours, _, model, tokenizer = marian
    texts = multi30k("test_2016_flickr.de", TESTS)
    ended = [assert_outputs_equal(ours, model, tokenizer, texts, beam) for beam in (1, 4)]
    assert 0 < sum(ended) < 2 * len(texts)  # outputs the model ended, and outputs cut at the limit


def test_the_shared_layout_is_marians_own(marian):
    """One vocabulary and equal embeddings (an OPUS-MT model imported): model.shared, tied, as
    Marian's; a decoder vocabulary of its own: its own files and matrices."""
    from safetensors import safe_open

    _, ours, folder, model, tokenizer = marian
    pieces = [[piece for piece, _ in subwords.vocabulary()] for subwords in (ours.src_subwords, ours.tgt_subwords)]
    assert (folder / "target_vocab.json").is_file() == (pieces[0] != pieces[1])
    with safe_open(str(folder / "model.safetensors"), "pt") as weights:
        names = {name for name in weights.keys() if ".layers." not in name}
    shared = model.config.share_encoder_decoder_embeddings
    if shared:
        assert names == {"final_logits_bias", "model.shared.weight"} and model.config.tie_word_embeddings
        assert not (folder / "target_vocab.json").exists()
    else:
        assert names == {
            "final_logits_bias",
            "lm_head.weight",
            "model.encoder.embed_tokens.weight",
            "model.decoder.embed_tokens.weight",
        }
        assert tokenizer.separate_vocabs and (folder / "target_vocab.json").is_file()
    assert model.config.decoder_start_token_id == BOS and model.config.pad_token_id == PAD
    assert model.config.eos_token_id == EOS and tokenizer.bos_token == "<s>"


def test_an_imported_model_exported_imports_again_as_it_was(marian, tmp_path):
    assert_imports_again(marian[1], marian[2], tmp_path)


# ---------------------------------------------------------------- a Transformer trained by attnmt


@pytest.mark.slow  # (a model trained)
def test_a_post_norm_transformer_trained_here_exported_computes_the_same(post_norm):
    ours, folder, model, tokenizer = post_norm
    assert not (folder / "target_vocab.json").exists()  # (a joint vocabulary)
    assert not model.config.share_encoder_decoder_embeddings and model.config.tie_word_embeddings
    assert model.config.activation_function == "gelu" and not model.config.scale_embedding
    texts = random_strings(30, 3, 8, seed=5)
    assert tokenizer(texts)["input_ids"] == [ids + [EOS] for ids in ours.source_ids(texts)]
    assert_logits_equal(ours, model, tokenizer, texts, texts)
    for beam in (1, 4):
        assert assert_outputs_equal(ours, model, tokenizer, texts, beam) > 20


@pytest.mark.slow  # (a model trained)
def test_a_transformer_trained_here_exported_imports_again_as_it_was(post_norm, tmp_path):
    assert_imports_again(post_norm[0], post_norm[1], tmp_path)


# ---------------------------------------------------------------- what a Marian model cannot be


@pytest.fixture(scope="module")
def pre_norm(tmp_path_factory):
    """A Transformer of attnmt's defaults (pre-norm, interleaved sinusoids), trained one step (a second)."""
    return copy_model(tmp_path_factory.mktemp("pre-norm"), 1, **TRANSFORMER, decoder_layers=1).folder


def changed(folder, tmp_path, change: dict):
    """A copy of the model folder ``folder`` with ``change`` in its config's model section."""
    copy = tmp_path / "model"
    shutil.copytree(folder, copy)
    config = yaml.safe_load((copy / "config.yaml").read_text(encoding="utf-8"))
    config["model"] |= change
    (copy / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    return copy


def refusal(folder, out, capsys) -> str:
    assert main(["export", str(folder), "--format", "huggingface", str(out)]) == 2
    assert not out.exists() and not out.with_name(out.name + ".partial").exists()
    return capsys.readouterr().err


def test_a_pre_norm_model_is_refused_with_the_field_named(pre_norm, tmp_path, capsys):
    err = refusal(pre_norm, tmp_path / "hf", capsys)
    assert f"{pre_norm}: model.norm is pre; a Marian model's layers are post-norm" in err


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"norm": "post", "positions": "learned"}, "model.positions is learned; a Marian model's positions are"),
        ({"norm": "post"}, "model.positions is sinusoidal; a Marian model's positions are fixed sinusoids"),
        (
            {"norm": "post", "positions": "sinusoidal-halves", "attention_normalizer": "entmax15"},
            "model.attention_normalizer is entmax15; a Marian model attends with softmax",
        ),
        ({"type": "rnn"}, "model.type is rnn; a Marian model is a Transformer"),
    ],
    ids=["learned-positions", "interleaved-sinusoids", "entmax", "rnn"],
)
def test_what_marian_cannot_express_is_refused_with_the_field_named(pre_norm, tmp_path, capsys, change, expected):
    """(The config decides, before any weight is read: a copy of the folder with its config changed.)"""
    folder = changed(pre_norm, tmp_path, change)
    assert f"{folder}: {expected}" in refusal(folder, tmp_path / "hf", capsys)


def test_without_transformers_the_export_says_what_to_install(pre_norm, tmp_path, monkeypatch, capsys):
    folder = changed(pre_norm, tmp_path, {"norm": "post", "positions": "sinusoidal-halves"})
    monkeypatch.setitem(sys.modules, "transformers", None)  # (import transformers: ImportError)
    assert "needs transformers: pip install 'attnmt[hub]'" in refusal(folder, tmp_path / "hf", capsys)


def test_the_options_of_the_other_format_are_refused(pre_norm, tmp_path, capsys):
    command = ["export", str(pre_norm), "--format", "huggingface", str(tmp_path / "hf"), "--quantization", "int8"]
    assert main(command) == 2
    assert "--quantization int8 is for CTranslate2 (--format ct2)" in capsys.readouterr().err
    for wrong in (["--format", "onnx", str(tmp_path / "x")], ["--ct2", "a", "--format", "huggingface", "b"], []):
        with pytest.raises(SystemExit) as exit:
            main(["export", str(pre_norm), *wrong])
        assert exit.value.code == 2
    assert "invalid format 'onnx' (choose from ct2, huggingface)" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


# ---------------------------------------------------------------- an existing folder, a failure half-way


@pytest.mark.slow  # (a model trained)
def test_an_existing_folder_is_kept_without_force_and_replaced_with_it(post_norm, tmp_path, capsys):
    ours, exported, _, _ = post_norm
    out = tmp_path / "hf"
    out.mkdir()
    (out / "mine.txt").write_text("kept", encoding="utf-8")
    assert main(["export", str(ours.folder), "--format", "huggingface", str(out)]) == 2
    assert f"{out} exists" in capsys.readouterr().err and (out / "mine.txt").read_text(encoding="utf-8") == "kept"
    assert main(["export", str(ours.folder), "--format", "huggingface", str(out), "--force"]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in exported.iterdir())
    assert [p.name for p in tmp_path.iterdir()] == ["hf"]  # (nothing beside it: no partial, nor the old one)
    assert main(["export", str(ours.folder), "--format", "huggingface", str(ours.folder), "--force"]) == 2
    assert "holds the model" in capsys.readouterr().err and (ours.folder / "config.yaml").is_file()


@pytest.mark.slow  # (a model trained)
def test_a_failure_half_way_leaves_nothing_and_the_old_folder_as_it_was(post_norm, tmp_path, monkeypatch, capsys):
    """The weights and config.json written, then the disk is full: no folder, no partial one; with
    --force, the folder that was there stays as it was."""
    ours = post_norm[0]

    def full(config):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(attnmt.translation.marian_export, "generation_settings", full)
    out = tmp_path / "hf"
    assert main(["export", str(ours.folder), "--format", "huggingface", str(out)]) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())
    out.mkdir()
    (out / "mine.txt").write_text("kept", encoding="utf-8")
    assert main(["export", str(ours.folder), "--format", "huggingface", str(out), "--force"]) == 2
    assert [p.name for p in tmp_path.iterdir()] == ["hf"] and [p.name for p in out.iterdir()] == ["mine.txt"]


# ---------------------------------------------------------------- CTranslate2 export of an imported model


def test_ctranslate2_export_of_an_imported_model_translates_as_attnmt(marian, tmp_path):
    """attnmt export --ct2 (and its other spelling, --format ct2: the same model) of an imported
    Marian model: CTranslate2's greedy outputs are attnmt's, and its beam's where attnmt's ended
    before the limit (at the limit attnmt writes </s> with its log-probability, which ranks the
    beam's cut outputs; CTranslate2 has no option for that: it stops). min_decoding_length 0: an
    output may be </s> alone, as in attnmt (CTranslate2's default is 1)."""
    require(ctranslate2 is not None, "pip install ctranslate2 (attnmt[ct2] or attnmt[test])")
    imported, ours, _, _, _ = marian
    assert main(["export", str(imported), "--ct2", str(tmp_path / "ct2")]) == 0
    assert main(["export", str(imported), "--format", "ct2", str(tmp_path / "again")]) == 0
    assert (tmp_path / "again" / "model.bin").read_bytes() == (tmp_path / "ct2" / "model.bin").read_bytes()
    translator = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu", compute_type="float32")
    ours.set_decoding(length_penalty=0.0, max_length_ratio=1e-6, max_length_offset=CT2_LIMIT)
    texts = multi30k("test_2016_flickr.de", TESTS)
    sources = [ours.src_subwords.pieces(ids) for ids in ours.source_ids(texts)]
    for beam in (1, 4):
        results = translator.translate_batch(
            sources, beam_size=beam, length_penalty=0, min_decoding_length=0, max_decoding_length=CT2_LIMIT - 1
        )
        ended = 0
        for text, translation, result in zip(texts, ours.translate(texts, beam=beam), results):
            tokens = translation.candidates[0].tokens
            if len(tokens) < CT2_LIMIT or beam == 1:
                assert result.hypotheses[0] == tokens[:-1], text
                ended += len(tokens) < CT2_LIMIT
        assert beam == 1 or ended >= len(texts) // 4  # (greedy: every output compared)
