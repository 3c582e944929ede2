"""Source tags at translation time: the tag of a data.extra_train corpus put before the sources
(Translator.source_ids), from Python, the command line and the HTTP API."""

import json
import re

import numpy as np
import pytest
import torch

from attnmt.api import load
from attnmt.core.errors import AttnmtError
from attnmt.data.batching import make_batch
from attnmt.seq2seq.results import Candidate, Translation, links_of
from attnmt.seq2seq.search import decode
from attnmt.serve import ServerLimits, create_app
from attnmt.training import Trainer
from conftest import local_client, toy_config, write_tsv
from test_compare import run_cli
from test_extra_corpora import MAIN, QUIET, extra_config

TAG = "<BT>"


def trained(config):
    torch.manual_seed(0)
    Trainer(config, **QUIET).train()
    return load(config.experiment_dir)


@pytest.fixture(scope="module")
def tagged(tmp_path_factory):
    """A toy RNN model trained a few steps with extra pairs tagged <BT> (the tag's effect is
    measured on real data in docs/back-translation.md; here, where and how it is put)."""
    return trained(extra_config(tmp_path_factory.mktemp("tagged"), training={"max_steps": 3}))


def test_source_ids_put_the_tag_piece_before_the_text(tagged):
    tag = tagged.src_subwords.sp.piece_to_id(TAG)
    plain = tagged.src_subwords.encode(["abc", "bcd"])
    assert tagged.tags == [TAG]
    assert tagged.source_ids(["abc", "bcd"], TAG) == [[tag, *plain[0]], [tag, *plain[1]]]
    assert tagged.source_ids(["abc", "bcd"], [TAG, ""]) == [[tag, *plain[0]], plain[1]]
    assert tagged.source_ids(["abc", "bcd"]) == plain
    # the text "<BT> abc" is cut into other pieces: a tag is given beside the text, never in it
    assert tagged.src_subwords.encode([f"{TAG} abc"])[0][0] != tag
    with pytest.raises(AttnmtError, match="1 tags for 2 texts"):
        tagged.source_ids(["abc", "bcd"], [TAG])


def test_translate_with_a_tag_decodes_the_tagged_source(tagged):
    [translation] = tagged.translate(["abcd"], beam=2, tag=TAG)
    ids = tagged.source_ids(["abcd"], TAG)[0]
    batch = make_batch([ids])
    with torch.inference_mode():
        [[best, *_]] = decode(tagged.model, batch.src, batch.src_lengths, tagged.config.decoding, beam=2, n_best=2)
    assert translation.tokens == tagged.tgt_subwords.pieces(best.tokens)
    assert translation.source_tokens == [TAG, *tagged.src_subwords.pieces(ids[1:]), "</s>"]
    assert translation.attention.shape == (len(translation.tokens), len(ids) + 1)
    assert translation.tagged
    [untagged] = tagged.translate(["abcd"], beam=2)
    assert not untagged.tagged and untagged.source_tokens[0] != TAG


def test_the_word_links_of_a_tagged_translation_count_the_words_of_its_text():
    # source "ab cd" after a tag: pieces <BT> ▁ab ▁cd </s>; output "x y": ▁x ▁y </s>
    attention = np.array(
        [
            [0.1, 0.1, 0.8, 0.0],  # ▁x attends to ▁cd
            [0.1, 0.8, 0.1, 0.0],  # ▁y attends to ▁ab
            [0.0, 0.0, 0.0, 1.0],
        ]
    )
    candidate = Candidate("x y", ["▁x", "▁y", "</s>"], 0.0, attention)
    translation = Translation("ab cd", [TAG, "▁ab", "▁cd", "</s>"], [candidate], tagged=True)
    assert links_of(translation, candidate) == [(0, 1), (1, 0)]  # "cd" is word 1 of the text, not 2


def test_an_unknown_tag_is_an_error_naming_the_models_tags(tagged, tmp_path):
    with pytest.raises(AttnmtError, match=r"'<XX>' is not a tag of .*its tags are <BT>"):
        tagged.translate(["abc"], tag="<XX>")
    plain = trained(toy_config(tmp_path, MAIN, training={"max_steps": 1}))
    with pytest.raises(AttnmtError, match="trained without tags"):
        plain.translate(["abc"], tag=TAG)


def test_score_trace_and_beam_tree_take_the_tag(tagged):
    [with_tag], [without] = tagged.score(["abc"], ["cba"], tag=TAG), tagged.score(["abc"], ["cba"])
    assert with_tag.tokens == without.tokens and not np.allclose(with_tag.log_probs, without.log_probs)
    trace = tagged.trace("abc", top_k=2, tag=TAG)
    assert trace.source_tokens[0] == TAG and len(trace.encoder_states) == len(trace.source_tokens)
    assert trace.text == tagged.translate(["abc"], beam=1, tag=TAG)[0].text
    tree, nodes = tagged.beam_tree("abc", beam=2, tag=TAG)
    assert tree.source_tokens[0] == TAG and tree.tagged and nodes[0]["status"] == "root"
    assert tree.text == tagged.translate(["abc"], beam=2, tag=TAG)[0].text


def test_a_transformers_attention_maps_take_the_tag(tmp_path):
    transformer = {
        "type": "transformer",
        "d_model": 16,
        "heads": 2,
        "feed_forward": 32,
        "encoder_layers": 1,
        "decoder_layers": 1,
    }
    model = trained(extra_config(tmp_path, training={"max_steps": 2}, model=transformer))
    maps = model.attention("abc", tag=TAG)
    assert maps["source_tokens"][0] == TAG
    assert maps["cross"].shape[-1] == maps["encoder"].shape[-1] == len(maps["source_tokens"])
    with local_client(create_app([model.folder])) as client:
        served = client.post("/attention", json={"text": "abc", "tag": TAG}).json()
    assert served["source_tokens"] == maps["source_tokens"]
    np.testing.assert_allclose(served["cross"], maps["cross"], atol=1e-5)


def test_the_command_line_translates_and_evaluates_with_a_tag(tagged, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_text("abc\nbcd\n", encoding="utf-8")
    assert run_cli("translate", tagged.folder, "-i", source, "--tag", TAG, "--beam", 2) == 0
    expected = [t.text for t in tagged.translate(["abc", "bcd"], beam=2, tag=TAG)]
    assert capsys.readouterr().out.splitlines() == expected
    reference = tmp_path / "ref.txt"
    reference.write_text("cba\ndcb\n", encoding="utf-8")
    report = tmp_path / "report.json"
    assert (
        run_cli(
            "evaluate", tagged.folder, "--src", source, "--ref", reference, "--tag", TAG, "--beam", 2, "--json", report
        )
        == 0
    )
    assert json.loads(report.read_text())["tag"] == TAG
    assert run_cli("translate", tagged.folder, "-i", source, "--tag", "<XX>") != 0
    assert "'<XX>' is not a tag of" in capsys.readouterr().err


def n_best_lines(translations, n: int) -> list[str]:
    return [f"{i} ||| {c.text} ||| {c.score:.4f}" for i, t in enumerate(translations) for c in t.candidates[:n]]


def test_the_command_line_takes_a_tag_for_each_line(tagged, tmp_path, capsys):
    lines, tags = ["abc", "bcd", "cde"], [TAG, "", TAG]
    source, tag_file = tmp_path / "in.txt", tmp_path / "tags.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tag_file.write_text("\n".join(tags) + "\n", encoding="utf-8")
    assert run_cli("translate", tagged.folder, "-i", source, "--tag-file", tag_file, "--beam", 2, "--n-best", 2) == 0
    expected = n_best_lines(tagged.translate(lines, beam=2, n_best=2, tag=tags), 2)
    assert capsys.readouterr().out.splitlines() == expected
    assert expected != n_best_lines(tagged.translate(lines, beam=2, n_best=2, tag=TAG), 2)  # (each line its own)
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("abc\tcba\nbcd\tdcb\ncde\tedc\n", encoding="utf-8")
    assert run_cli("score", tagged.folder, "-i", pairs, "--tag-file", tag_file) == 0
    scores = [float(line) for line in capsys.readouterr().out.splitlines()]
    expected = tagged.score(lines, ["cba", "dcb", "edc"], tag=tags)
    assert scores == pytest.approx([s.log_prob for s in expected], abs=1e-3)


def test_a_reranked_translation_is_scored_with_its_lines_tag(tagged, tmp_path, capsys):
    from attnmt.translation.reranking import rerank

    lines, tags = ["abc", "bcd"], [TAG, ""]
    source, tag_file = tmp_path / "in.txt", tmp_path / "tags.txt"
    source.write_text("abc\nbcd\n", encoding="utf-8")
    tag_file.write_text(f"{TAG}\n\n", encoding="utf-8")
    assert (
        run_cli(
            "translate",
            tagged.folder,
            "-i",
            source,
            "--tag-file",
            tag_file,
            "--beam",
            3,
            "--n-best",
            3,
            "--rerank",
            tagged.folder,
        )
        == 0
    )
    reranked = rerank(tagged, tagged, tagged.translate(lines, beam=3, n_best=3, tag=tags), tag=tags)
    assert capsys.readouterr().out.splitlines() == n_best_lines(reranked, 3)
    forward = tagged.score(["abc"] * 3, [c.text for c in reranked[0].candidates], tag=TAG)
    backward = tagged.score([c.text for c in reranked[0].candidates], ["abc"] * 3)
    assert sorted(c.score for c in reranked[0].candidates) == pytest.approx(
        sorted(f.per_token + 0.25 * b.per_token for f, b in zip(forward, backward))
    )


def test_a_tag_file_that_does_not_fit_is_an_error_naming_it(tagged, tmp_path, capsys):
    source, tag_file = tmp_path / "in.txt", tmp_path / "tags.txt"
    source.write_text("abc\nbcd\n", encoding="utf-8")
    for tags, message in (
        (f"{TAG}\n", "line counts differ: .*tags.txt has 1 lines, .*in.txt has more"),  # (read as streams)
        (f"{TAG}\n<XX>\n", "tags.txt, line 2: '<XX>' is not a tag of"),
    ):
        tag_file.write_text(tags, encoding="utf-8")
        assert run_cli("translate", tagged.folder, "-i", source, "--tag-file", tag_file) != 0
        assert re.search(message, capsys.readouterr().err)
    tag_file.write_text(f"{TAG}\n\n", encoding="utf-8")
    assert run_cli("translate", tagged.folder, "-i", source, "--tag-file", tag_file, "--tag", TAG) != 0
    assert "not both" in capsys.readouterr().err


def test_the_server_takes_a_tag_and_lists_the_models_tags(tagged, tmp_path):
    limits = ServerLimits(max_sentences=8, max_chars=40, max_tokens=20, max_beam=5, max_top_k=10, max_work=400)
    with local_client(create_app([tagged.folder], limits)) as client:
        [info] = client.get("/models").json()
        assert info["tags"] == [TAG]
        answer = client.post("/translate", json={"text": ["abc", "bcd"], "beam": 2, "tag": TAG}).json()
        expected = tagged.translate(["abc", "bcd"], beam=2, tag=TAG)
        for got, want in zip(answer["translations"], expected):
            assert got["source_tokens"] == want.source_tokens and got["candidates"][0]["text"] == want.text
        trace = client.post("/trace", json={"text": "abc", "tag": TAG}).json()
        assert trace["source_tokens"][0] == TAG
        beam = client.post("/beam", json={"text": "abc", "beam": 2, "tag": TAG}).json()
        assert beam["source_tokens"][0] == TAG
        scores = client.post("/score", json={"text": "abc", "translation": "cba", "tag": TAG}).json()["scores"]
        assert scores[0]["log_prob"] == pytest.approx(tagged.score(["abc"], ["cba"], tag=TAG)[0].log_prob, abs=1e-4)
        unknown = client.post("/translate", json={"text": "abc", "tag": "<XX>"})
        assert unknown.status_code == 422 and "'<XX>' is not a tag" in unknown.json()["detail"]
        assert client.post("/translate", json={"text": "abc", "tag": "BT"}).status_code == 422  # no brackets


def test_a_tag_long_enough_to_pass_the_token_limit_is_counted(tagged, tmp_path):
    text = "abcd"
    pieces = len(tagged.src_subwords.encode([text])[0])  # within the limit alone, over it with the tag
    limits = ServerLimits(max_sentences=8, max_chars=40, max_tokens=pieces, max_beam=5, max_top_k=10, max_work=400)
    with local_client(create_app([tagged.folder], limits)) as client:
        assert client.post("/translate", json={"text": text}).status_code == 200
        over = client.post("/translate", json={"text": text, "tag": TAG})
        assert over.status_code == 422 and f"{pieces + 1} subword tokens" in over.json()["detail"]


def test_a_speech_request_takes_no_tag(tagged):
    with local_client(create_app([tagged.folder])) as client:
        answer = client.post("/translate", json={"audio": "UklGRg==", "tag": TAG})
        assert answer.status_code == 422 and "tag goes with text" in answer.text


def test_plot_draws_the_tagged_sentence(tagged, tmp_path, capsys):
    heatmap, steps = tmp_path / "heatmap.html", tmp_path / "step.png"
    assert run_cli("plot", tagged.folder, "abc", "--tag", TAG, "--out", heatmap, "--step", 0, steps) == 0
    page = heatmap.read_text(encoding="utf-8")
    assert "&lt;BT&gt;" in page and steps.stat().st_size > 0
    assert run_cli("plot", tagged.folder, "abc", "--out", tmp_path / "plain.html") == 0
    assert "&lt;BT&gt;" not in (tmp_path / "plain.html").read_text(encoding="utf-8")
    assert run_cli("plot", tagged.folder, "abc", "--tag", "<XX>", "--out", heatmap) != 0
    assert "'<XX>' is not a tag of" in capsys.readouterr().err


def test_the_score_command_scores_with_the_tag(tagged, tmp_path, capsys):
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("abc\tcba\nbcd\tdcb\n", encoding="utf-8")
    assert run_cli("score", tagged.folder, "-i", pairs, "--tag", TAG) == 0
    scores = [float(line) for line in capsys.readouterr().out.splitlines()]
    expected = tagged.score(["abc", "bcd"], ["cba", "dcb"], tag=TAG)
    assert scores == pytest.approx([s.log_prob for s in expected], abs=1e-3)
    assert run_cli("score", tagged.folder, "-i", pairs, "--backward", tagged.folder, "--tag", TAG, "--jsonl") == 0
    [first, _] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert first["forward"]["log_prob"] == pytest.approx(expected[0].log_prob, abs=1e-3)
    assert first["backward"]["log_prob"] == pytest.approx(tagged.score(["cba"], ["abc"])[0].log_prob, abs=1e-3)


def test_requests_with_and_without_a_tag_are_decoded_together_each_with_its_own(tagged, monkeypatch):
    from test_serve import post_together

    app = create_app([tagged.folder], ServerLimits(batch_wait=0.5))  # a wide window: all get in
    model = app.state.models[tagged.folder.name]
    original, calls = model.translator.translate, []
    monkeypatch.setattr(
        model.translator,
        "translate",
        lambda texts, *args, **kwargs: calls.append(list(texts)) or original(texts, *args, **kwargs),
    )
    bodies = [
        {"text": ["abc", "bcd"], "beam": 2, "tag": TAG},
        {"text": "abcd", "beam": 2},
        {"text": "cde", "beam": 2, "tag": TAG},
        {"text": ["de", "abc"], "beam": 2},
    ]
    with local_client(app) as client:
        responses = post_together(client, bodies)
    assert len(calls) < len(bodies)  # decoded together
    for body, response in zip(bodies, responses):
        texts = [body["text"]] if isinstance(body["text"], str) else body["text"]
        expected = tagged.translate(texts, beam=2, tag=body.get("tag"))
        got = response.json()["translations"]
        assert [t["source_tokens"] for t in got] == [t.source_tokens for t in expected]
        assert [t["candidates"][0]["tokens"] for t in got] == [t.tokens for t in expected]


def test_a_request_of_several_texts_takes_a_tag_for_each(tagged):
    texts, tags = ["abc", "bcd", "cde"], [TAG, None, TAG]
    with local_client(create_app([tagged.folder])) as client:
        answer = client.post("/translate", json={"text": texts, "beam": 2, "tag": tags})
        assert answer.status_code == 200, answer.text
        expected = tagged.translate(texts, beam=2, tag=[t or "" for t in tags])
        got = answer.json()["translations"]
        assert [t["source_tokens"] for t in got] == [t.source_tokens for t in expected]
        assert [t["source_tokens"][0] == TAG for t in got] == [True, False, True]
        scores = client.post("/score", json={"text": texts, "translation": ["cba"] * 3, "tag": tags}).json()["scores"]
        assert [s["log_prob"] for s in scores] == pytest.approx(
            [s.log_prob for s in tagged.score(texts, ["cba"] * 3, tag=[t or "" for t in tags])], abs=1e-4
        )
        for body, message in (
            ({"text": texts, "tag": [TAG]}, "one tag (or null) for each text"),
            ({"text": "abc", "tag": [TAG]}, "a list of tags goes with a list of texts"),
        ):
            refused = client.post("/translate", json=body)
            assert refused.status_code == 422 and message in refused.text


def test_evaluate_heads_each_test_set_with_the_tag(tmp_path, capsys):
    from attnmt.core.config import CorpusFiles

    config = extra_config(tmp_path, training={"max_steps": 2})
    config.data.test = {"held": CorpusFiles(tsv=write_tsv(tmp_path / "held.tsv", MAIN[:2]))}
    trained(config)
    capsys.readouterr()
    assert run_cli("evaluate", config.experiment_dir, "--tag", TAG, "--beam", 2, "--trust-config") == 0
    assert "== test set held (beam 2, tag <BT>)" in capsys.readouterr().out
