"""Ensemble decoding: each step's distribution is the mean of the members', one model ensembled with
itself translates as it does alone, an RNN and a Transformer on the same subwords search together,
and the command line's --ensemble."""

import math
import shutil

import pytest
import torch

from attnmt.api import load
from attnmt.cli import main
from attnmt.core.errors import AttnmtError
from attnmt.data.batching import make_batch
from attnmt.data.subwords import BOS
from attnmt.seq2seq.ensemble import Ensemble
from attnmt.serve import ServerLimits, create_app
from attnmt.training import train
from conftest import local_client, random_strings, toy_config

PAIRS = [(s, s[::-1]) for s in random_strings(300, 3, 8, seed=1)]
TEXTS = random_strings(10, 3, 8, seed=9)

pytestmark = pytest.mark.slow  # every test here trains models
TRANSFORMER = {
    "type": "transformer",
    "d_model": 32,
    "heads": 4,
    "feed_forward": 64,
    "encoder_layers": 1,
    "decoder_layers": 2,
    "dropout": 0.0,
    "attention_dropout": 0.0,
}


def trained(folder, seed, model=None, subwords_of=None, data=None):
    """A toy model (reverse strings, 60 steps); ``subwords_of``: an experiment whose spm folder it takes."""
    config = toy_config(
        folder,
        PAIRS,
        model=model,
        data=data,
        training={"max_steps": 60, "validate_every": 1000, "threads": 1, "seed": seed},
    )
    if subwords_of is not None:
        shutil.copytree(subwords_of / "spm", config.experiment_dir / "spm")
    train(config, log=lambda m: None, progress=False)
    return config.experiment_dir


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("ensemble")
    rnn = trained(root / "rnn", seed=1)
    return {
        "rnn": rnn,
        "rnn2": trained(root / "rnn2", seed=2, subwords_of=rnn),
        "transformer": trained(root / "transformer", seed=3, model=TRANSFORMER, subwords_of=rnn),
    }


def test_each_step_is_the_mean_of_the_members_distributions(folders):
    first, second = load(folders["rnn"]), load(folders["transformer"])
    ensemble = Ensemble([first.model, second.model]).eval()
    batch = make_batch(first.src_subwords.encode(TEXTS[:4]))
    prev = torch.full((4,), BOS)
    with torch.inference_mode():
        steps = [
            model.decode_step(prev, model.init_state(memory := model.encode(batch.src, batch.src_lengths)), memory)
            for model in (first.model, second.model)
        ]
        memory = ensemble.encode(batch.src, batch.src_lengths)
        step = ensemble.decode_step(prev, ensemble.init_state(memory), memory)
    mean = (steps[0].log_probs.exp() + steps[1].log_probs.exp()) / 2
    torch.testing.assert_close(step.log_probs.exp(), mean)
    torch.testing.assert_close(step.weights, (steps[0].weights + steps[1].weights) / 2)
    assert math.isinf(float(step.log_probs[0, BOS]))  # never produced, by either


@pytest.mark.parametrize("beam", [1, 3])
def test_a_model_ensembled_with_itself_translates_as_it_does_alone(folders, beam):
    alone, twice = load(folders["rnn"]), load(folders["rnn"])
    twice.ensemble([load(folders["rnn"])])
    for a, b in zip(alone.translate(TEXTS, beam=beam), twice.translate(TEXTS, beam=beam)):
        assert a.text == b.text and a.score == pytest.approx(b.score, abs=1e-5)
        torch.testing.assert_close(torch.as_tensor(a.attention), torch.as_tensor(b.attention))


def test_a_model_ensembled_with_itself_scores_as_it_does_alone(folders):
    alone, twice = load(folders["rnn"]), load(folders["rnn"])
    twice.ensemble([load(folders["rnn"])])
    targets = [s[::-1] for s in TEXTS]
    for a, b in zip(alone.score(TEXTS, targets), twice.score(TEXTS, targets)):
        assert a.tokens == b.tokens
        torch.testing.assert_close(torch.as_tensor(a.log_probs), torch.as_tensor(b.log_probs))


def test_an_rnn_and_a_transformer_search_together(folders):
    model = load(folders["rnn"])
    model.ensemble([load(folders["transformer"]), load(folders["rnn2"])])
    assert len(model.model.members) == 3
    translations = model.translate(TEXTS, beam=3, n_best=2)
    assert all(len(t.candidates) == 2 and t.attention.shape[1] == len(t.source_tokens) for t in translations)
    assert [t.text for t in model.translate(TEXTS, sampling={"top_k": 1})] == [
        t.text for t in model.translate(TEXTS, beam=1)
    ]
    with pytest.raises(AttnmtError, match="teacher forcing .* reads one model"):
        from attnmt.translation.align import force_attention

        force_attention(model, TEXTS[:1], TEXTS[:1])


def test_an_ensemble_needs_the_same_subwords(folders, tmp_path):
    model = load(folders["rnn"])
    model.ensemble([load(trained(tmp_path / "own", seed=4))])  # its own subword model, of the same pieces: fine
    other = trained(tmp_path / "bpe", seed=4, data={"subwords": {"type": "bpe", "vocab_size": 30, "joint": True}})
    with pytest.raises(AttnmtError, match="subword model .* has other pieces than that of"):
        model.ensemble([load(other)])


def test_translate_and_evaluate_take_an_ensemble(folders, tmp_path, capsys):
    (tmp_path / "in").write_text("\n".join(TEXTS) + "\n")
    (tmp_path / "ref").write_text("\n".join(t[::-1] for t in TEXTS) + "\n")
    assert (
        main(
            [
                "translate",
                str(folders["rnn"]),
                "-i",
                str(tmp_path / "in"),
                "--beam",
                "3",
                "--ensemble",
                str(folders["transformer"]),
                "--ensemble",
                str(folders["rnn2"]),
            ]
        )
        == 0
    )
    written = capsys.readouterr().out.splitlines()
    model = load(folders["rnn"])
    model.ensemble([load(folders["transformer"]), load(folders["rnn2"])])
    assert written == [t.text for t in model.translate(TEXTS, beam=3)]
    assert (
        main(
            [
                "evaluate",
                str(folders["rnn"]),
                "--src",
                str(tmp_path / "in"),
                "--ref",
                str(tmp_path / "ref"),
                "--ensemble",
                str(folders["rnn2"]),
            ]
        )
        == 0
    )
    assert "BLEU" in capsys.readouterr().out


def test_an_ensembles_word_links_come_from_its_attention(folders):
    from attnmt.seq2seq.links import output_links

    model = load(folders["rnn"])
    model.aligner = lambda sources, outputs, **options: [[(0, 0)] for _ in sources]  # as an alignment layer would
    with pytest.warns(UserWarning, match="word links of an ensemble come from its attention"):
        model.ensemble([load(folders["rnn2"])])
    [t] = model.translate(TEXTS[:1], beam=2, align=True)
    assert t.best.alignment == output_links(t.attention, t.source_tokens, t.tokens)


def test_a_served_model_decodes_with_its_ensemble(folders):
    """attnmt serve --ensemble NAME=DIR: /translate, /score and /trace of NAME are the ensemble's;
    /models says so; /attention, one Transformer's layers, is a 422."""
    app = create_app(
        [("rnn", folders["rnn"]), ("transformer", folders["transformer"])],
        ServerLimits(timeout=60.0),
        ensembles={"rnn": [folders["rnn2"]], "transformer": [folders["rnn"]]},
    )
    expected = load(folders["rnn"])
    expected.ensemble([load(folders["rnn2"])])
    targets = [s[::-1] for s in TEXTS]
    with local_client(app) as client:
        models = {m["name"]: m for m in client.get("/models").json()}
        assert models["rnn"]["ensemble"] == [folders["rnn2"].name] and models["rnn"]["word_links"] == "attention"
        answer = client.post("/translate", json={"text": TEXTS, "beam": 3, "model": "rnn"})
        assert answer.status_code == 200, answer.text
        assert [t["candidates"][0]["text"] for t in answer.json()["translations"]] == [
            t.text for t in expected.translate(TEXTS, beam=3)
        ]
        scores = client.post("/score", json={"text": TEXTS, "translation": targets, "model": "rnn"}).json()["scores"]
        assert [s["log_prob"] for s in scores] == pytest.approx(
            [s.log_prob for s in expected.score(TEXTS, targets)], abs=1e-5
        )
        trace = client.post("/trace", json={"text": TEXTS[0], "model": "rnn"}).json()
        assert trace["text"] == expected.trace(TEXTS[0]).text
        refused = client.post("/attention", json={"text": TEXTS[0], "model": "transformer"})
        assert refused.status_code == 422 and "is an ensemble" in refused.json()["detail"]


def test_serve_names_a_wrong_ensemble(folders, monkeypatch, capsys):
    import uvicorn

    served = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: served.append(app))
    rnn, rnn2 = str(folders["rnn"]), str(folders["rnn2"])
    assert main(["serve", f"a={rnn}", "--ensemble", f"a={rnn2}"]) == 0
    assert served[0].state.models["a"].translator.ensembled == [folders["rnn2"]]
    for argument, message in (
        (f"b={rnn2}", "no model named 'b' is served (models: a)"),
        ("a", "give NAME=DIR"),
        ("a=", "give NAME=DIR"),
    ):
        assert main(["serve", f"a={rnn}", "--ensemble", argument]) == 2
        assert message in capsys.readouterr().err
