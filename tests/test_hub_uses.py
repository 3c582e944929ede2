"""An imported Marian model goes everywhere an attnmt Transformer goes (issue 52, point 3): its
attention of every layer and head and its scores are transformers' own; it translates (beam,
n-best, sampling, prefixes, constraints) from the command line as from Python, evaluates, scores,
aligns, is served with the explorer's endpoints, described by attnmt info, and fine-tuned on a
corpus of the user's with training.init_from, its subwords kept.

The Marian model is small (tests/marian_helpers.py): random weights trained a few steps on
Multi30k. No network."""

from __future__ import annotations

import filecmp
import gzip
import json

import numpy as np
import pytest
import sacrebleu
import torch
import yaml

import attnmt
from attnmt.cli import main
from attnmt.data.subwords import subword_paths
from attnmt.info import format_info, model_info
from attnmt.serve import ServerLimits, create_app
from attnmt.training import Trainer
from conftest import local_client, require

try:  # an optional dependency (attnmt[hub], attnmt[test])
    import transformers
except ImportError:
    transformers = None

from marian_helpers import multi30k  # noqa: E402

QUIET = {"log": lambda message: None, "progress": False}


@pytest.fixture(scope="module")
def marian(marian_imports):
    """(the Marian folder, transformers' model and tokenizer of it, its attnmt import's folder)."""
    require(transformers is not None, "pip install transformers (attnmt[hub] or attnmt[test])")
    from transformers import MarianMTModel, MarianTokenizer

    source, imported = marian_imports("shared")
    model = MarianMTModel.from_pretrained(source, attn_implementation="eager").eval()
    return source, model, MarianTokenizer.from_pretrained(source), imported


@pytest.fixture(scope="module")
def ours(marian):
    return attnmt.load(marian[3])


def test_every_layer_and_heads_attention_is_transformers(marian, ours):
    """The explorer's and the aligner's weights: each layer's and head's encoder, decoder and cross
    attention of a teacher-forced pair, as transformers computes them."""
    _, model, tokenizer, _ = marian
    for text, reference in zip(multi30k("test_2016_flickr.de", 5), multi30k("test_2016_flickr.en", 5)):
        weights = ours.attention(text, reference)
        inputs = tokenizer([text], text_target=[reference], return_tensors="pt")
        with torch.no_grad():
            theirs = model(**inputs, output_attentions=True)
        for kind, attentions in (
            ("encoder", theirs.encoder_attentions),
            ("decoder", theirs.decoder_attentions),
            ("cross", theirs.cross_attentions),
        ):
            expected = torch.stack([layer[0] for layer in attentions]).numpy()
            assert weights[kind].shape == expected.shape  # (layers, heads, ...)
            np.testing.assert_allclose(weights[kind], expected, atol=1e-5, rtol=0, err_msg=kind)


def test_scores_are_transformers_log_likelihoods(marian, ours):
    _, model, tokenizer, _ = marian
    texts, references = multi30k("test_2016_flickr.de", 16), multi30k("test_2016_flickr.en", 16)
    scored = ours.score(texts, references)
    inputs = tokenizer(texts, text_target=references, return_tensors="pt", padding=True)
    with torch.no_grad():
        log_probs = model(**inputs).logits.log_softmax(-1)
    for row, pair in enumerate(scored):
        labels = inputs["labels"][row, : len(pair.tokens)]
        expected = log_probs[row, torch.arange(len(labels)), labels]
        np.testing.assert_allclose(pair.log_probs, expected.numpy(), atol=1e-4, rtol=0)


def test_the_command_line_translates_n_best_samples_and_aligns(marian, ours, tmp_path, capsys):
    folder = marian[3]
    texts = multi30k("test_2016_flickr.de", 6)
    (tmp_path / "in.de").write_text("\n".join(texts) + "\n", encoding="utf-8")

    def translate(*options) -> list[str]:
        capsys.readouterr()
        assert main(["translate", str(folder), "-i", str(tmp_path / "in.de"), *options]) == 0
        return capsys.readouterr().out.splitlines()

    beams = ours.translate(texts, beam=4, n_best=2)
    n_best = translate("--beam", "4", "--n-best", "2")
    assert [line.split(" ||| ")[1] for line in n_best] == [c.text for t in beams for c in t.candidates[:2]]
    assert [line.split(" ||| ")[0] for line in n_best] == [str(i) for i in range(len(texts)) for _ in range(2)]
    sampled = translate("--sample", "--top-k", "5", "--seed", "7")
    assert sampled == translate("--sample", "--top-k", "5", "--seed", "7") and len(sampled) == len(texts)
    for line, text in zip(translate("--report-align"), texts):
        translation, links = line.split(" ||| ")
        for link in links.split():
            i, j = map(int, link.split("-"))
            assert 0 <= i < len(text.split()) and 0 <= j < len(translation.split())


def test_prefixes_and_constraints(ours):
    texts = multi30k("test_2016_flickr.de", 4)
    for translation in ours.translate(texts, beam=4, prefix=["A man"] * len(texts)):
        assert translation.text.startswith("A man")
    for translation in ours.translate(texts, beam=4, constraints=[["dog"]] * len(texts)):
        assert "dog" in translation.text.split()


def test_evaluate_score_and_align_from_the_command_line(marian, ours, tmp_path, capsys):
    folder = marian[3]
    texts, references = multi30k("test_2016_flickr.de", 8), multi30k("test_2016_flickr.en", 8)
    src, ref = tmp_path / "test.de", tmp_path / "test.en"
    src.write_text("\n".join(texts) + "\n", encoding="utf-8")
    ref.write_text("\n".join(references) + "\n", encoding="utf-8")
    report = tmp_path / "report.json"
    assert main(["evaluate", str(folder), "--src", str(src), "--ref", str(ref), "--json", str(report)]) == 0
    hypotheses = [t.text for t in ours.translate(texts)]  # (the config's beam, as evaluate's)
    expected_bleu = sacrebleu.corpus_bleu(hypotheses, [references]).score
    assert json.loads(report.read_text(encoding="utf-8"))["bleu"]["score"] == pytest.approx(expected_bleu)
    capsys.readouterr()
    assert main(["score", str(folder), "--src", str(src), "--tgt", str(ref)]) == 0
    scores = [float(line.split("\t")[0]) for line in capsys.readouterr().out.splitlines()]
    expected = [pair.log_prob for pair in ours.score(texts, references)]  # (log p(y | x), summed)
    assert len(scores) == len(texts)
    np.testing.assert_allclose(scores, expected, atol=1e-3)
    out = tmp_path / "links.txt"
    assert main(["align", str(folder), "--src", str(src), "--tgt", str(ref), "--layer", "0", "-o", str(out)]) == 0
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(texts) and all(lines)


def test_it_is_served_with_every_layer_and_head(marian, ours):
    folder = marian[3]
    limits = ServerLimits(max_sentences=8, max_chars=200, max_tokens=60, max_beam=5, max_work=4000, timeout=60.0)
    text = multi30k("test_2016_flickr.de", 1)[0]
    with local_client(create_app([folder], limits)) as client:
        [info] = client.get("/models").json()
        assert info["type"] == "transformer" and info["heads"] == 4 and info["norm"] == "post"
        answer = client.post("/translate", json={"text": text, "beam": 4}).json()
        assert answer["translations"][0]["candidates"][0]["text"] == ours.translate([text], beam=4)[0].text
        attention = client.post("/attention", json={"text": text}).json()
        assert np.array(attention["cross"]).shape[:2] == (2, 4)  # every decoder layer, every head
        assert np.array(attention["encoder"]).shape[:2] == (2, 4)


def test_info_says_where_it_came_from(marian):
    source, folder = marian[0], marian[3]
    info = model_info(folder)
    assert info["imported_from"].startswith(str(source)) and "data" not in info
    assert f"imported from  {source}" in format_info(info)


def test_fine_tuning_from_the_import_keeps_its_subwords_and_learns(marian, ours, tmp_path):
    """training.init_from the imported folder, on a corpus of the user's (Multi30k pairs the Marian
    model never saw): the new model starts from the import's weights and subwords, and after a few
    steps it finds that corpus more probable than the import did."""
    folder = marian[3]
    imported = yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8"))
    pairs = list(zip(multi30k("train.de", 256, skip=10_000), multi30k("train.en", 256, skip=10_000)))
    corpus = tmp_path / "train.tsv.gz"
    with gzip.open(corpus, "wt", encoding="utf-8") as f:
        f.writelines(f"{de}\t{en}\n" for de, en in pairs)
    raw = {
        "experiment_dir": str(tmp_path / "fine-tuned"),
        "data": {
            "train": {"tsv": str(corpus)},
            "dev": {"split": 32},
            "subwords": imported["data"]["subwords"],
            "batch_size": 32,
        },
        "model": imported["model"],
        "training": {
            "init_from": str(folder),
            "learning_rate": 0.001,
            "schedule": "plateau",
            "max_steps": 24,
            "validate_every": 100,
            "threads": 1,
        },
    }
    config_file = tmp_path / "fine-tune.yaml"
    config_file.write_text(yaml.safe_dump(raw), encoding="utf-8")
    from attnmt.core.config import load_config

    config = load_config(config_file)
    trainer = Trainer(config, **QUIET)
    start = {name: weight.clone() for name, weight in trainer.model.state_dict().items()}
    for name, weight in ours.model.state_dict().items():
        assert torch.equal(start[name], weight), name  # before its first step: the import
    assert trainer.train().step == 24
    for theirs, mine in zip(subword_paths(folder, False), subword_paths(config.experiment_dir, False)):
        assert filecmp.cmp(theirs, mine, shallow=False)  # the import's pieces, not new ones
    tuned = attnmt.load(config.experiment_dir, checkpoint="last")
    sources, targets = zip(*pairs[:64])
    before = np.mean([p.log_prob for p in ours.score(list(sources), list(targets))])
    after = np.mean([p.log_prob for p in tuned.score(list(sources), list(targets))])
    assert after > before
    assert model_info(config.experiment_dir)["training"]["fine_tuned_from"] == f"{folder} (best)"
