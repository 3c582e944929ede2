"""The HTTP API (attnmt.serve) through FastAPI's TestClient, on the reverse-string model (and a tiny
Transformer for /attention and /models)."""

import contextlib
import io
import json
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import pytest

from attnmt.cli import build_parser, main
from attnmt.core.errors import AttnmtError
from attnmt.seq2seq.links import output_links
from attnmt.serve import ServerLimits, create_app
from conftest import WAIT, local_client

LIMITS = ServerLimits(
    max_sentences=8, max_chars=40, max_tokens=20, max_beam=5, max_top_k=10, max_work=400, timeout=30.0
)


@pytest.fixture(scope="module")
def served(reverse_model):
    """(client, app, model name, translator of the test session, dev strings)."""
    translator, dev = reverse_model
    app = create_app([translator.folder], LIMITS)
    with local_client(app) as client:
        yield client, app, translator.folder.name, translator, dev


@pytest.fixture(scope="module")
def client(served):
    return served[0]


def assert_error(response, status: int, *fragments: str) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    detail = response.json()["detail"]
    assert isinstance(detail, str) and detail
    for fragment in fragments:
        assert fragment in detail, detail
    return detail


# --- health, models, index, OpenAPI -------------------------------------------------------------


def test_health(served):
    client, _, name, _, _ = served
    assert client.get("/health").json() == {"status": "ok", "models": [name]}


def test_models_describe_the_config(served):
    client, _, name, translator, _ = served
    [info] = client.get("/models").json()
    config = translator.config
    assert info == {
        "name": name,
        "task": "translation",
        "type": "rnn",
        "attention": config.model.attention.type,
        "rnn_type": config.model.rnn_type,
        "input_feeding": True,  # (of a Luong score; a Bahdanau model's is the default)
        "local_attention": "none",
        "local_window": None,
        "attention_normalizer": "softmax",
        "coverage_fertility": None,
        "coverage_dim": None,
        "fertility_bound": None,
        "decoder_hidden": config.model.decoder_hidden,
        "d_model": None,
        "heads": None,
        "encoder_layers": config.model.encoder_layers,
        "decoder_layers": config.model.decoder_layers,
        "feed_forward": None,
        "norm": None,
        "beam": config.decoding.beam,
        "length_penalty": config.decoding.length_penalty,
        "coverage_penalty": 0.0,
        "labels": None,
        "ensemble": None,
        "tags": [],
        "word_links": "attention",
    }
    listing = client.get("/models").text  # the name only: nothing of where the model lies on disk
    assert str(translator.folder.resolve().parent) not in listing and "path" not in listing


def test_two_models_by_folder_name_and_first_is_default(reverse_model, tmp_path):
    translator, _ = reverse_model
    other = shutil.copytree(translator.folder, tmp_path / "copy-of-reverse")
    app = create_app([other, translator.folder], LIMITS)
    with local_client(app) as client:
        names = [m["name"] for m in client.get("/models").json()]
        assert names == ["copy-of-reverse", translator.folder.name]
        assert client.get("/health").json()["models"] == names
        assert client.post("/translate", json={"text": "abc"}).json()["model"] == "copy-of-reverse"
        chosen = client.post("/translate", json={"text": "abc", "model": translator.folder.name})
        assert chosen.json()["model"] == translator.folder.name
        assert_error(
            client.post("/trace", json={"text": "abc", "model": "nope"}),
            404,
            "unknown model 'nope'; available: copy-of-reverse, " + translator.folder.name,
        )


def test_duplicate_model_names_are_refused(reverse_model, tmp_path):
    translator, _ = reverse_model
    twin = shutil.copytree(translator.folder, tmp_path / "elsewhere" / translator.folder.name)
    with pytest.raises(AttnmtError, match=f"two models are named '{translator.folder.name}'.*NAME=DIR"):
        create_app([translator.folder, twin])


def test_bad_limits_and_bad_folders_are_refused(tmp_path):
    with pytest.raises(AttnmtError, match="max_sentences"):
        ServerLimits(max_sentences=0)
    with pytest.raises(AttnmtError, match="timeout"):
        ServerLimits(timeout=0)
    with pytest.raises(AttnmtError, match="not a model folder"):
        create_app([tmp_path])
    with pytest.raises(AttnmtError, match="no model folder"):
        create_app([])


def test_index_serves_the_explorer_page_or_a_placeholder(reverse_model, tmp_path, monkeypatch):
    import attnmt.serve.app

    translator, _ = reverse_model
    static = tmp_path / "static"
    static.mkdir()
    monkeypatch.setattr(attnmt.serve.app, "STATIC_DIR", static)
    with local_client(create_app([translator.folder])) as client:
        page = client.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "/docs" in page.text and translator.folder.name in page.text  # placeholder
        (static / "index.html").write_text("<!doctype html><title>explorer</title>", encoding="utf-8")
        (static / "app.js").write_text("console.log(1)", encoding="utf-8")
        page = client.get("/")
        assert page.status_code == 200 and page.text == "<!doctype html><title>explorer</title>"
        assert page.headers["content-type"].startswith("text/html")
        assert client.get("/static/app.js").text == "console.log(1)"
        assert client.get("/static/missing.js").status_code == 404


def test_openapi_lists_the_endpoints_with_their_limits(client):
    spec = client.get("/openapi.json").json()
    assert {"/health", "/models", "/translate", "/trace", "/beam"} <= set(spec["paths"])
    request = spec["components"]["schemas"]["TranslateRequest"]
    assert request["additionalProperties"] is False and {"text", "audio"} <= set(request["properties"])
    text_forms = {form["type"]: form for form in request["properties"]["text"]["oneOf"]}
    assert text_forms["array"]["maxItems"] == LIMITS.max_sentences
    assert text_forms["string"]["maxLength"] == LIMITS.max_chars
    assert request["properties"]["n_best"]["maximum"] == LIMITS.max_beam
    responses = spec["paths"]["/translate"]["post"]["responses"]
    assert {"200", "400", "404", "413", "422", "500", "503"} <= set(responses)
    assert "TranslateResponse" in json.dumps(responses["200"])
    assert "TraceResponse" in json.dumps(spec["paths"]["/trace"]["post"]["responses"]["200"])
    assert "BeamResponse" in json.dumps(spec["paths"]["/beam"]["post"]["responses"]["200"])
    assert client.get("/docs").status_code == 200


# --- /translate ----------------------------------------------------------------------------------


def assert_attention(matrix, tokens, source_tokens):
    matrix = np.array(matrix)
    assert matrix.shape == (len(tokens), len(source_tokens))
    assert np.all(matrix >= 0)
    np.testing.assert_allclose(matrix.sum(axis=1), 1.0, atol=1e-5)


def test_translate_one_text(served):
    client, _, name, translator, dev = served
    response = client.post("/translate", json={"text": dev[0]})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == name
    [t] = body["translations"]
    [expected] = translator.translate([dev[0]])  # the model's default beam, as the server's
    assert t["source"] == dev[0] and t["source_tokens"] == expected.source_tokens
    [c] = t["candidates"]
    assert c["text"] == expected.text
    assert c["tokens"] == expected.tokens and c["tokens"][-1] == "</s>"
    assert c["score"] == pytest.approx(expected.score, abs=1e-5)
    assert_attention(c["attention"], c["tokens"], t["source_tokens"])
    np.testing.assert_allclose(c["attention"], expected.attention, atol=1e-6)


def test_translate_a_list_keeps_the_order(served):
    client, _, _, translator, dev = served
    texts = sorted(dev[: LIMITS.max_sentences], key=len, reverse=True)[:4] + dev[:4]  # lengths mixed
    body = client.post("/translate", json={"text": texts, "beam": 1}).json()
    assert [t["source"] for t in body["translations"]] == texts
    expected = translator.translate(texts, beam=1)
    assert [t["candidates"][0]["text"] for t in body["translations"]] == [t.text for t in expected]
    for t in body["translations"]:
        assert_attention(t["candidates"][0]["attention"], t["candidates"][0]["tokens"], t["source_tokens"])


def test_translate_n_best_and_no_attention(served):
    client, _, _, translator, dev = served
    body = client.post("/translate", json={"text": [dev[1], dev[2]], "beam": 4, "n_best": 3}).json()
    for text, t in zip([dev[1], dev[2]], body["translations"]):
        candidates = t["candidates"]
        assert len(candidates) == 3
        scores = [c["score"] for c in candidates]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(c["tokens"]) for c in candidates}) == 3
        for c in candidates:
            assert_attention(c["attention"], c["tokens"], t["source_tokens"])
        expected = translator.translate([text], beam=4, n_best=3)[0]
        assert [c["text"] for c in candidates] == [c.text for c in expected.candidates]
    body = client.post("/translate", json={"text": dev[1], "beam": 4, "n_best": 2, "attention": False}).json()
    assert [c["attention"] for c in body["translations"][0]["candidates"]] == [None, None]


def test_translate_with_sampling_draws_as_the_python_api_does(served):
    client, _, _, translator, dev = served
    sampling = {"top_k": 5, "top_p": 0.9, "temperature": 1.5, "seed": 7}
    texts = dev[:6]

    def drawn():
        body = client.post("/translate", json={"text": texts, "sampling": sampling, "attention": False})
        assert body.status_code == 200, body.text
        return [t["candidates"][0]["text"] for t in body.json()["translations"]]

    first = drawn()
    assert first == drawn() == [t.text for t in translator.translate(texts, sampling=sampling)]
    # The seed is used: at temperature 100 the draws are all but uniform over the 5 pieces top_k
    # keeps, so two seeds draw the same first pieces for 12 texts with probability about 5 ** -12
    # on any model (a model's confidence cannot make them agree, as it can at temperature 1.5).
    flat = {"top_k": 5, "temperature": 100.0, "seed": 7}
    served = client.post("/translate", json={"text": texts, "sampling": flat, "attention": False})
    assert served.status_code == 200, served.text
    expected = [t.text for t in translator.translate(texts, sampling=flat)]
    assert [t["candidates"][0]["text"] for t in served.json()["translations"]] == expected
    seven, eight = ([t.text for t in translator.translate(dev[:12], sampling={**flat, "seed": s})] for s in (7, 8))
    assert seven != eight
    for wrong, message in (
        ({"beam": 3}, "no beam or n_best above 1"),
        ({"sampling": {"top_p": 0}}, "greater than or equal to 0.000001"),
        ({"sampling": {"top_k": -1}}, "greater than or equal to 0"),
        ({"sampling": {"temp": 2}}, "Extra inputs"),
    ):
        body = {"text": texts[0], "sampling": sampling, **wrong}
        answer = client.post("/translate", json=body)
        assert answer.status_code == 422 and message in answer.text, (wrong, answer.text)


def test_translate_with_align_gives_each_candidates_word_links(served):
    client, _, _, translator, dev = served
    text = dev[3] + " " + dev[4]  # two "words"
    body = client.post(
        "/translate", json={"text": text, "beam": 3, "n_best": 2, "align": True, "attention": False}
    ).json()
    [expected] = translator.translate([text], beam=3, n_best=2)
    for c, e in zip(body["translations"][0]["candidates"], expected.candidates):
        assert c["attention"] is None  # dropped as asked, after the links were read from it
        links = [tuple(link) for link in c["alignment"]]
        assert links == output_links(e.attention, expected.source_tokens, e.tokens)
        assert sorted(j for _, j in links) == list(range(len(c["text"].split())))  # one link per output word
        assert all(0 <= i < 2 for i, _ in links)
    assert [tuple(x) for x in body["translations"][0]["candidates"][0]["alignment"]] == expected.alignment
    plain = client.post("/translate", json={"text": text}).json()
    assert plain["translations"][0]["candidates"][0]["alignment"] is None  # only when asked


def test_translate_default_beam_is_the_models(served):
    client, _, _, translator, _ = served
    beam = translator.config.decoding.beam
    assert beam < LIMITS.max_beam
    ok = client.post("/translate", json={"text": "abc", "n_best": beam})
    assert ok.status_code == 200 and len(ok.json()["translations"][0]["candidates"]) == beam
    assert_error(
        client.post("/translate", json={"text": "abc", "n_best": beam + 1}),
        422,
        f"n_best ({beam + 1}) cannot exceed the beam size ({beam})",
    )
    assert_error(
        client.post("/translate", json={"text": "abc", "beam": 2, "n_best": 3}),
        422,
        "n_best (3) cannot exceed the beam size (2)",
    )


BAD_TRANSLATE = [
    ({"text": ""}, "text: String should have at least 1 character"),
    ({"text": "  \t "}, "text: text must not be empty or only whitespace"),
    ({"text": []}, "text: List should have at least 1 item"),
    ({"text": ["abc", " "]}, "text[1]: text must not be empty"),
    ({"text": ["abc"] * (LIMITS.max_sentences + 1)}, f"at most {LIMITS.max_sentences} items"),
    ({"text": "a" * (LIMITS.max_chars + 1)}, f"text: String should have at most {LIMITS.max_chars} characters"),
    ({"text": ["abc", "a" * (LIMITS.max_chars + 1)]}, f"text[1]: String should have at most {LIMITS.max_chars}"),
    ({"text": 5}, "text must be a string or a list of strings"),
    ({"text": [1, 2]}, "text[0]: Input should be a valid string"),
    ({"text": {"a": 1}}, "text must be a string or a list of strings"),
    ({"text": None}, "text must be a string or a list of strings"),
    ({}, "give text (translation models) or audio (speech models), one of them"),
    ({"text": "abc", "beam": 0}, "beam: Input should be greater than or equal to 1"),
    ({"text": "abc", "beam": LIMITS.max_beam + 1}, f"beam: Input should be less than or equal to {LIMITS.max_beam}"),
    ({"text": "abc", "beam": "3"}, "beam: Input should be a valid integer"),
    ({"text": "abc", "beam": 2.5}, "beam: Input should be a valid integer"),
    ({"text": "abc", "n_best": 0}, "n_best: Input should be greater than or equal to 1"),
    ({"text": "abc", "attention": "yes"}, "attention: Input should be a valid boolean"),
    ({"text": "abc", "model": 3}, "model: Input should be a valid string"),
    ({"text": "abc", "source": "de"}, "source: Extra inputs are not permitted"),
    ([{"text": "abc"}], "the body must be a JSON object"),
]


@pytest.mark.parametrize("body, fragment", BAD_TRANSLATE, ids=[str(i) for i in range(len(BAD_TRANSLATE))])
def test_translate_rejects_bad_requests(client, body, fragment):
    response = client.post("/translate", json=body)
    assert_error(response, 422, fragment)
    assert all({"loc", "msg", "type"} <= set(e) for e in response.json()["errors"])


def test_translate_rejects_invalid_json_and_other_media(client):
    assert_error(
        client.post("/translate", content=b'{"text": "abc"', headers={"content-type": "application/json"}),
        422,
        "not valid UTF-8 JSON",
    )
    assert_error(
        client.post("/translate", content=b'{"text": "abc"}', headers={"content-type": "text/plain"}),
        422,
        "must be a JSON object",
    )
    assert_error(client.get("/translate"), 405)


def test_unknown_model_is_404(served):
    client, _, name, _, _ = served
    for path in ("/translate", "/trace", "/beam"):
        assert_error(
            client.post(path, json={"text": "abc", "model": "x"}), 404, f"unknown model 'x'; available: {name}"
        )


def test_an_unexpected_error_is_a_json_500_with_its_traceback_in_the_servers_log(served, monkeypatch, caplog):
    """An exception nothing handles (a bug, a GPU out of memory) gets the JSON error body, not
    Starlette's plain-text "Internal Server Error"; its traceback goes to the log, and its
    message (which may name files) not to the client."""
    from attnmt.serve.models import LoadedModel

    client, app, name, _, dev = served
    translator = app.state.models[name].translator

    def broken(*args, **kwargs):
        raise RuntimeError("CUDA error: an illegal memory access was encountered in /home/someone/model")

    monkeypatch.setattr(translator, "trace", broken)  # a model's work, in its worker thread
    monkeypatch.setattr(translator, "translate", broken)  # through the batcher
    monkeypatch.setattr(LoadedModel, "info", broken)  # outside any model work
    requests = [
        ("POST", "/trace", {"text": dev[0]}),
        ("POST", "/translate", {"text": [dev[0], dev[1]]}),
        ("GET", "/models", None),
    ]
    with caplog.at_level("ERROR", logger="attnmt.serve"):
        for method, path, body in requests:
            response = client.request(method, path, json=body)
            detail = assert_error(response, 500, "internal server error (RuntimeError)", "the server's log")
            assert "illegal memory access" not in detail and "someone" not in response.text
    records = [r for r in caplog.records if r.name == "attnmt.serve"]
    assert [r.getMessage() for r in records] == [f"internal error answering {m} {p}" for m, p, _ in requests]
    assert all(r.exc_info[0] is RuntimeError for r in records)
    assert caplog.text.count("Traceback (most recent call last)") == 3 and "in broken" in caplog.text
    assert client.get("/health").status_code == 200  # and the server goes on


# --- body size and time limits -------------------------------------------------------------------


def test_body_too_large_is_413_before_validation(served):
    client = served[0]
    big = {"text": "a" * (ServerLimits().max_body_bytes + 10)}  # too long a text, but too large first
    assert_error(client.post("/translate", json=big), 413, "request body too large", "1000000 bytes")


def test_body_limit_counts_the_bytes_received(reverse_model):
    translator, _ = reverse_model
    app = create_app([translator.folder], ServerLimits(max_body_bytes=200))
    with local_client(app) as client:
        assert client.post("/translate", json={"text": "abcd"}).status_code == 200
        assert_error(client.post("/translate", json={"text": ["abcd"] * 40}), 413, "200 bytes")

        def chunks():  # no Content-Length: chunked transfer
            yield b'{"text": ["abcd"'
            for _ in range(40):
                yield b', "abcd"'
            yield b"]}"

        response = client.post("/translate", content=chunks(), headers={"content-type": "application/json"})
        assert "content-length" not in response.request.headers
        assert_error(response, 413, "200 bytes")
        small = client.post(
            "/translate", content=iter([b'{"text": ', b'"abcd"}']), headers={"content-type": "application/json"}
        )
        assert small.status_code == 200, small.text
        assert_error(client.post("/translate", content=b"{}", headers={"content-length": "1000"}), 413)


def test_time_limit_is_503(reverse_model, monkeypatch):
    translator, _ = reverse_model
    app = create_app([translator.folder], ServerLimits(timeout=0.5))
    model = app.state.models[translator.folder.name]
    with local_client(app) as client:
        with model.lock:  # the model is busy with another request for longer than the limit
            # (the answers come while the lock is held: without the limit they would never come)
            response = client.post("/translate", json={"text": "abc"})
            assert_error(response, 503, "longer than the limit of 0.5 s")
            assert_error(client.post("/trace", json={"text": "abc"}), 503)
        assert client.post("/translate", json={"text": "abc"}).status_code == 200

        release = threading.Event()
        slow_translate = model.translator.translate

        def slow(*args, **kwargs):
            release.wait(60)  # released only after the answer: without the limit it would be a 200, a minute late
            return slow_translate(*args, **kwargs)

        monkeypatch.setattr(model.translator, "translate", slow)
        assert_error(client.post("/translate", json={"text": "abc"}), 503)  # computing for too long
        release.set()
        monkeypatch.undo()
        deadline = time.monotonic() + WAIT
        while model.lock.locked() and time.monotonic() < deadline:  # the abandoned work finishes
            time.sleep(0.05)
        assert client.post("/translate", json={"text": "abc"}).status_code == 200


def test_one_computation_at_a_time_per_model(served, monkeypatch):
    client, app, name, _, dev = served
    model = app.state.models[name]
    original = model.translator.translate
    active, most = [0], [0]
    guard = threading.Lock()

    def counting(*args, **kwargs):
        with guard:
            active[0] += 1
            most[0] = max(most[0], active[0])
        try:
            time.sleep(0.05)
            return original(*args, **kwargs)
        finally:
            with guard:
                active[0] -= 1

    monkeypatch.setattr(model.translator, "translate", counting)
    results = {}

    def request(i):
        results[i] = client.post("/translate", json={"text": dev[i], "beam": 1}).json()

    threads = [threading.Thread(target=request, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert most[0] == 1
    assert [results[i]["translations"][0]["source"] for i in range(4)] == dev[:4]


# --- tokens per sentence -------------------------------------------------------------------------


def token_count(translator, text: str) -> int:
    return len(translator.src_subwords.encode([text])[0])


def test_tokens_per_sentence_are_limited_after_encoding(served):
    client, _, _, translator, _ = served
    fits = max(
        (
            ("abcdefghij" * 4)[:n]
            for n in range(1, LIMITS.max_chars + 1)
            if token_count(translator, ("abcdefghij" * 4)[:n]) <= LIMITS.max_tokens
        ),
        key=len,
    )
    over = fits + "a"
    assert token_count(translator, fits) == LIMITS.max_tokens < token_count(translator, over)
    assert len(over) <= LIMITS.max_chars  # within the character limit: the token limit is what refuses it
    assert client.post("/translate", json={"text": fits, "beam": 1}).status_code == 200
    n = token_count(translator, over)
    assert_error(
        client.post("/translate", json={"text": over}),
        422,
        f"text has {n} subword tokens; the limit is {LIMITS.max_tokens}",
    )
    assert_error(
        client.post("/translate", json={"text": ["abc", "abd", over]}),
        422,
        f"text[2] has {n} subword tokens; the limit is {LIMITS.max_tokens}",
    )
    for path in ("/trace", "/beam"):
        assert_error(client.post(path, json={"text": over}), 422, f"text has {n} subword tokens")
        assert client.post(path, json={"text": fits}).status_code == 200


# --- dynamic batching ----------------------------------------------------------------------------


@contextlib.contextmanager
def recording_calls(model, monkeypatch):
    """Records (texts, beam, n_best) of every model call of the batcher."""
    original, calls = model.translator.translate, []

    def recorded(texts, beam, n_best):
        calls.append((list(texts), beam, n_best))
        return original(texts, beam, n_best)

    monkeypatch.setattr(model.translator, "translate", recorded)
    yield calls
    monkeypatch.undo()


def post_together(client, bodies, path="/translate"):
    """Sends the bodies at the same moment, one thread each; the responses in the same order."""
    barrier, responses = threading.Barrier(len(bodies)), [None] * len(bodies)

    def send(i):
        barrier.wait()
        responses[i] = client.post(path, json=bodies[i])

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return responses


def texts_of(body) -> list[str]:
    return [body["text"]] if isinstance(body["text"], str) else body["text"]


def assert_answers_alone(translator, bodies, responses):
    """Each request got its own translations, in its order, equal to translating each text alone."""
    for body, response in zip(bodies, responses):
        assert response.status_code == 200, response.text
        translations = response.json()["translations"]
        assert [t["source"] for t in translations] == texts_of(body)
        for text, t in zip(texts_of(body), translations):
            [alone] = translator.translate([text], beam=body.get("beam"), n_best=body.get("n_best", 1))
            assert [c["tokens"] for c in t["candidates"]] == [c.tokens for c in alone.candidates]
            assert [c["score"] for c in t["candidates"]] == pytest.approx([c.score for c in alone.candidates], abs=1e-4)
            assert (t["candidates"][0]["attention"] is None) == (body.get("attention") is False)


def test_concurrent_requests_are_decoded_together(reverse_model, monkeypatch):
    translator, dev = reverse_model
    app = create_app([translator.folder], ServerLimits(batch_wait=0.5))  # a wide window: all 10 get in
    bodies = [{"text": dev[i], "beam": 1} for i in range(6)] + [
        {"text": [dev[10], dev[11], dev[12]], "beam": 1, "attention": False},
        {"text": dev[13], "beam": 3, "n_best": 2},
        {"text": [dev[14], dev[15]], "beam": 3, "n_best": 2},
        {"text": dev[16], "beam": 1},
    ]
    with local_client(app) as client, recording_calls(app.state.models[translator.folder.name], monkeypatch) as calls:
        responses = post_together(client, bodies)
    assert_answers_alone(translator, bodies, responses)
    assert len(calls) < len(bodies)
    assert max(len(texts) for texts, _, _ in calls) > 3  # sentences of several requests in one call
    sent = sorted(text for body in bodies for text in texts_of(body))
    assert sorted(text for texts, _, _ in calls for text in texts) == sent  # each sentence decoded once
    for texts, beam, n_best in calls:  # one call per decoding options
        assert all(
            (b.get("beam"), b.get("n_best", 1)) == (beam, n_best) for b in bodies if set(texts_of(b)) & set(texts)
        )


def test_a_lone_request_does_not_wait_for_company(reverse_model, monkeypatch):
    """One client sending one request after another: nothing to batch with, so no batch wait."""
    translator, dev = reverse_model
    app = create_app([translator.folder], ServerLimits(batch_wait=WAIT, timeout=2 * WAIT))  # a wait that would show
    with local_client(app) as client, recording_calls(app.state.models[translator.folder.name], monkeypatch) as calls:
        start = time.monotonic()
        for i in range(3):
            assert client.post("/translate", json={"text": dev[i], "beam": 1}).status_code == 200
        elapsed = time.monotonic() - start
    assert len(calls) == 3
    assert elapsed < WAIT / 2, f"3 sequential requests took {elapsed:.1f} s: the batcher waited for company"


def test_batches_are_bounded_and_batching_can_be_off(reverse_model, monkeypatch):
    translator, dev = reverse_model
    bodies = [{"text": dev[20 + i], "beam": 1} for i in range(10)]
    for max_batch in (4, 1):
        app = create_app([translator.folder], ServerLimits(max_batch=max_batch, batch_wait=0.5))
        model = app.state.models[translator.folder.name]
        with local_client(app) as client, recording_calls(model, monkeypatch) as calls:
            model.lock.acquire()  # the model is busy: the requests queue up
            threading.Timer(1.0, model.lock.release).start()
            responses = post_together(client, bodies)
        assert_answers_alone(translator, bodies, responses)
        sizes = [len(texts) for texts, _, _ in calls]
        assert sum(sizes) == len(bodies) and max(sizes) <= max_batch, sizes
        assert max(sizes) == max_batch  # the queue filled whole batches
        if max_batch == 1:
            assert len(calls) == len(bodies)  # no batching: one request per model call


def test_time_limit_drops_only_the_late_request(reverse_model):
    translator, dev = reverse_model
    app = create_app([translator.folder], ServerLimits(timeout=2.0, batch_wait=0.001))
    model = app.state.models[translator.folder.name]
    with local_client(app) as client:
        model.lock.acquire()  # busy: the first request waits past its limit
        try:
            start = time.monotonic()
            assert_error(client.post("/translate", json={"text": dev[30]}), 503, "longer than the limit of 2 s")
            assert 1.9 < time.monotonic() - start < WAIT  # at the limit (or later on a loaded machine), not never
            late = {}
            second = threading.Thread(target=lambda: late.update(r=client.post("/translate", json={"text": dev[31]})))
            second.start()  # queued behind the abandoned one
            time.sleep(0.3)
        finally:
            model.lock.release()
        second.join(30)
        assert_answers_alone(translator, [{"text": dev[31]}], [late["r"]])


# --- graceful shutdown ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sigterm_lets_requests_in_flight_finish(reverse_model):
    translator, dev = reverse_model
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "attnmt.cli",
            "serve",
            str(translator.folder),
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + WAIT
        while True:  # until it answers
            assert server.poll() is None and time.monotonic() < deadline, server.communicate()[1].decode()
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            time.sleep(0.2)

        bodies = [{"text": dev[40 + 8 * i : 48 + 8 * i], "beam": 3} for i in range(6)]
        finish, responses = threading.Event(), [None] * len(bodies)

        def send(i):  # the body arrives in two parts: the request is in flight until `finish`
            data = json.dumps(bodies[i]).encode()

            def parts():
                yield data[:12]
                finish.wait(30)
                yield data[12:]

            responses[i] = httpx.post(
                f"{url}/translate", content=parts(), timeout=60, headers={"content-type": "application/json"}
            )

        threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
        for t in threads:
            t.start()
        time.sleep(1.0)  # the server has their headers
        server.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + WAIT
        while True:  # it stops accepting connections, while the requests in flight go on
            assert server.poll() is None and time.monotonic() < deadline
            try:
                httpx.get(f"{url}/health", timeout=1)
            except httpx.ConnectError:
                break
            time.sleep(0.1)
        finish.set()
        for t in threads:
            t.join(60)
        assert_answers_alone(translator, bodies, responses)
        assert server.wait(30) == 0
        assert b"Traceback" not in server.stderr.read()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


# --- /trace and /beam ----------------------------------------------------------------------------


def test_trace_quantities_are_consistent(served):
    client, _, name, translator, dev = served
    response = client.post("/trace", json={"text": dev[3], "top_k": 4})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == name and body["source"] == dev[3]
    [greedy] = translator.translate([dev[3]], beam=1)
    assert body["source_tokens"] == greedy.source_tokens
    assert body["text"] == greedy.text and body["tokens"] == greedy.tokens
    assert body["tokens"] == [s["token"] for s in body["steps"]]
    states = np.array(body["encoder_states"])
    assert states.shape[0] == len(body["source_tokens"])
    for step in body["steps"]:
        scores, weights = np.array(step["scores"]), np.array(step["weights"])
        assert scores.shape == weights.shape == (len(body["source_tokens"]),)
        softmax = np.exp(scores - scores.max())
        np.testing.assert_allclose(softmax / softmax.sum(), weights, atol=1e-5)
        np.testing.assert_allclose(weights @ states, step["context"], atol=1e-5)
        assert len(step["state"]) == translator.config.model.decoder_hidden
        assert len(step["top_k"]) == 4
        assert step["top_k"][0] == [step["token"], pytest.approx(step["probability"])]
        probabilities = [p for _, p in step["top_k"]]
        assert probabilities == sorted(probabilities, reverse=True) and sum(probabilities) <= 1 + 1e-6
    np.testing.assert_allclose([s["weights"] for s in body["steps"]], greedy.attention, atol=1e-5)


@pytest.mark.parametrize(
    "body, fragment",
    [
        ({"text": ""}, "text: String should have at least 1 character"),
        ({"text": " "}, "text must not be empty"),
        ({"text": ["abc"]}, "text: Input should be a valid string"),
        ({"text": "a" * (LIMITS.max_chars + 1)}, "at most"),
        ({"text": "abc", "top_k": 0}, "top_k"),
        ({"text": "abc", "top_k": LIMITS.max_top_k + 1}, "top_k"),
        ({"text": "abc", "beam": 3}, "beam: Extra inputs are not permitted"),
    ],
)
def test_trace_rejects_bad_requests(client, body, fragment):
    assert_error(client.post("/trace", json=body), 422, fragment)


def test_beam_tree_is_consistent_with_translate(served):
    client, _, name, translator, dev = served
    text, beam = dev[5], 3
    response = client.post("/beam", json={"text": text, "beam": beam})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == name
    [expected] = translator.translate([text], beam=beam, n_best=beam)
    assert body["source_tokens"] == expected.source_tokens
    candidates = body["translation"]["candidates"]
    assert [c["text"] for c in candidates] == [c.text for c in expected.candidates]
    assert [c["score"] for c in candidates] == pytest.approx([c.score for c in expected.candidates], abs=1e-5)

    nodes = body["nodes"]
    assert [n["id"] for n in nodes] == list(range(len(nodes)))
    assert nodes[0] == {
        "id": 0,
        "parent": None,
        "token": nodes[0]["token"],
        "log_prob": 0.0,
        "step": 0,
        "status": "root",
        "met": None,
    }
    assert sum(n["status"] == "root" for n in nodes) == 1
    assert {"kept", "finished", "pruned"} <= {n["status"] for n in nodes}
    for n in nodes[1:]:
        parent = nodes[n["parent"]]
        assert parent["status"] in ("root", "kept") and parent["step"] == n["step"] - 1
        assert n["log_prob"] <= parent["log_prob"] + 1e-6  # log-probabilities only go down
        if n["status"] == "finished":
            assert n["token"] == "</s>"
        if n["status"] == "kept":
            assert n["token"] != "</s>"
    for step in {n["step"] for n in nodes}:
        assert sum(n["step"] == step and n["status"] == "kept" for n in nodes) <= beam

    def path(node):
        tokens = []
        while node["parent"] is not None:
            tokens.insert(0, node["token"])
            node = nodes[node["parent"]]
        return tokens

    finished = {tuple(path(n)): n for n in nodes if n["status"] == "finished"}
    for c in candidates:
        if c["tokens"][-1] == "</s>":  # each finished hypothesis is a path of the tree
            assert tuple(c["tokens"]) in finished
    assert tuple(candidates[0]["tokens"]) in finished


def test_beam_of_one_and_bad_requests(served):
    client, _, name, _, _ = served
    body = client.post("/beam", json={"text": "abc", "beam": 1}).json()
    assert len(body["translation"]["candidates"]) == 1
    assert all(
        sum(n["step"] == s and n["status"] == "kept" for n in body["nodes"]) <= 1 for s in range(len(body["nodes"]))
    )
    assert client.post("/beam", json={"text": "abc"}).status_code == 200  # beam 5 by default
    assert_error(client.post("/beam", json={"text": "abc", "beam": 0}), 422, "beam")
    assert_error(client.post("/beam", json={"text": "abc", "beam": LIMITS.max_beam + 1}), 422, "beam")
    assert_error(client.post("/beam", json={"text": ""}), 422, "text")
    assert_error(client.post("/beam", json={"text": "abc", "n_best": 2}), 422, "n_best: Extra inputs")


# --- the command ---------------------------------------------------------------------------------


def run_cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def test_serve_parser_accepts_its_flags():
    args = build_parser().parse_args(
        [
            "serve",
            "a",
            "b/c",
            "--host",
            "0.0.0.0",
            "--port",
            "9001",
            "--max-body-bytes",
            "5000",
            "--max-sentences",
            "3",
            "--max-chars",
            "50",
            "--max-tokens",
            "30",
            "--max-beam",
            "4",
            "--timeout",
            "2.5",
            "--max-batch",
            "16",
            "--max-batch-wait",
            "0",
            "--threads",
            "1",
            "--log-level",
            "warning",
        ]
    )
    assert (
        args.model_dir,
        args.host,
        args.port,
        args.max_body_bytes,
        args.max_sentences,
        args.max_chars,
        args.max_tokens,
        args.max_beam,
        args.timeout,
        args.max_batch,
        args.max_batch_wait,
        args.no_batching,
        args.log_level,
    ) == (["a", "b/c"], "0.0.0.0", 9001, 5000, 3, 50, 30, 4, 2.5, 16, 0.0, False, "warning")
    defaults = build_parser().parse_args(["serve", "a"])
    assert (defaults.host, defaults.port, defaults.max_batch_wait) == ("127.0.0.1", 8000, 5.0)
    assert build_parser().parse_args(["serve", "a", "--no-batching"]).no_batching
    assert (args.threads, defaults.threads) == (1, None)
    for bad in (
        ["serve"],
        ["serve", "a", "--port", "0"],
        ["serve", "a", "--max-sentences", "0"],
        ["serve", "a", "--timeout", "-1"],
        ["serve", "a", "--max-tokens", "0"],
        ["serve", "a", "--max-batch", "0"],
        ["serve", "a", "--max-batch-wait", "-1"],
    ):
        with pytest.raises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
            build_parser().parse_args(bad)


def test_serve_command_builds_the_app_and_prints_the_url(reverse_model, monkeypatch):
    import uvicorn

    translator, _ = reverse_model
    calls = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: calls.append((app, kwargs)))
    code, out, err = run_cli(
        "serve",
        translator.folder,
        "--port",
        "8765",
        "--max-sentences",
        "2",
        "--max-tokens",
        "7",
        "--max-batch-wait",
        "20",
        "--timeout",
        "9",
        "--max-audio-bytes",
        "5000",
        "--max-audio-seconds",
        "2.5",
    )
    assert code == 0, err
    assert "http://127.0.0.1:8765/" in out and translator.folder.name in out
    assert "warning" not in err
    [(app, kwargs)] = calls
    assert kwargs["host"] == "127.0.0.1" and kwargs["port"] == 8765
    assert kwargs["timeout_graceful_shutdown"] == 9  # requests in flight may finish, not hang the exit
    limits = app.state.limits
    assert (limits.max_sentences, limits.max_tokens, limits.batch_wait, limits.max_batch) == (2, 7, 0.02, 64)
    assert (limits.max_audio_bytes, limits.max_audio_seconds) == (5000, 2.5)
    with local_client(app) as client:
        assert_error(client.post("/translate", json={"text": ["a", "b", "c"]}), 422, "at most 2 items")

    code, out, err = run_cli("serve", translator.folder, "--host", "0.0.0.0", "--no-batching")
    assert code == 0 and "reachable from other machines" in err
    assert calls[-1][0].state.limits.max_batch == 1


def test_serve_command_reports_a_bad_folder(tmp_path):
    code, _, err = run_cli("serve", tmp_path / "missing")
    assert code == 2 and "not a model folder" in err and "Traceback" not in err


# --- /attention: every layer and head of a Transformer -------------------------------------------


@pytest.fixture(scope="module")
def both(reverse_model, tiny_transformer):
    """(client, app, transformer name, transformer, RNN name): one server with both kinds of model."""
    rnn, _ = reverse_model
    app = create_app([tiny_transformer.folder, rnn.folder], LIMITS)
    with local_client(app) as client:
        yield client, app, tiny_transformer.folder.name, tiny_transformer, rnn.folder.name


def test_models_describe_a_transformer(both):
    client, _, name, transformer, rnn_name = both
    info = {m["name"]: m for m in client.get("/models").json()}
    assert info[name] == {
        "name": name,
        "task": "translation",
        "type": "transformer",
        "attention": "multi-head",
        "rnn_type": None,
        "input_feeding": None,
        "local_attention": None,
        "local_window": None,
        "attention_normalizer": "softmax",
        "coverage_fertility": None,
        "coverage_dim": None,
        "fertility_bound": None,
        "decoder_hidden": None,
        "d_model": 32,
        "heads": 4,
        "encoder_layers": 3,
        "decoder_layers": 2,
        "feed_forward": 64,
        "norm": "pre",
        "beam": transformer.config.decoding.beam,
        "length_penalty": 1.0,
        "coverage_penalty": 0.0,
        "labels": None,
        "ensemble": None,
        "tags": [],
        "word_links": "attention",
    }
    assert info[rnn_name]["type"] == "rnn" and info[rnn_name]["heads"] is None


def test_attention_of_every_layer_and_head(both):
    client, _, name, transformer, _ = both
    response = client.post("/attention", json={"text": "abcdef", "model": name})
    assert response.status_code == 200, response.text
    answer = response.json()
    expected = transformer.attention("abcdef")
    S, T = len(expected["source_tokens"]), len(expected["tokens"])
    assert answer["model"] == name
    for key in ("source_tokens", "tokens", "decoder_tokens"):
        assert answer[key] == expected[key]
    for kind, shape in (("encoder", (3, 4, S, S)), ("decoder", (2, 4, T, T)), ("cross", (2, 4, T, S))):
        weights = np.array(answer[kind])
        assert weights.shape == shape, kind
        np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
        np.testing.assert_allclose(weights, expected[kind], atol=1e-6, rtol=0)
    assert np.all(np.triu(np.array(answer["decoder"]), k=1) == 0)  # the causal mask: exact zeros
    # the translation's own matrix is the last layer's cross-attention averaged over the heads
    [translated] = client.post("/translate", json={"text": "abcdef", "model": name}).json()["translations"]
    best = translated["candidates"][0]
    assert best["tokens"] == answer["tokens"]
    np.testing.assert_allclose(np.array(answer["cross"])[-1].mean(0), best["attention"], atol=1e-5)


def test_attention_of_a_given_translation(both):
    client, _, name, transformer, _ = both
    answer = client.post("/attention", json={"text": "abcdef", "model": name, "translation": "abc"}).json()
    expected = transformer.attention("abcdef", "abc")
    assert answer["tokens"] == expected["tokens"] and answer["tokens"][-1] == "</s>"
    assert np.array(answer["cross"]).shape == (2, 4, len(expected["tokens"]), len(expected["source_tokens"]))
    np.testing.assert_allclose(np.array(answer["cross"]), expected["cross"], atol=1e-6, rtol=0)


def test_attention_of_an_rnn_model_is_a_clear_422(both):
    client, _, _, _, rnn_name = both
    assert_error(
        client.post("/attention", json={"text": "abc", "model": rnn_name}),
        422,
        "Transformer models",
        f"'{rnn_name}' is an RNN model",
        "/translate",
    )


@pytest.mark.parametrize(
    "body, fragment",
    [
        ({}, "text: Field required"),
        ({"text": "   "}, "text: text must not be empty"),
        ({"text": "a" * (LIMITS.max_chars + 1)}, f"at most {LIMITS.max_chars} characters"),
        ({"text": ["abc"]}, "text: Input should be a valid string"),
        ({"text": "abc", "translation": ""}, "translation: String should have at least 1 character"),
        ({"text": "abc", "translation": "a" * (LIMITS.max_chars + 1)}, "translation: String should have at most"),
        ({"text": "abc", "layer": 1}, "layer: Extra inputs are not permitted"),
    ],
)
def test_attention_rejects_bad_requests(both, body, fragment):
    client, _, name, _, _ = both
    assert_error(client.post("/attention", json={"model": name, **body}), 422, fragment)


def test_attention_goes_through_the_limits(both, tiny_transformer):
    client, app, name, transformer, _ = both
    over = "abcdefghij" * 3  # 30 characters, within max_chars (40), over max_tokens (20)
    n = len(transformer.src_subwords.encode([over])[0])
    assert n > LIMITS.max_tokens
    assert_error(
        client.post("/attention", json={"text": over, "model": name}),
        422,
        f"text has {n} subword tokens; the limit is {LIMITS.max_tokens}",
    )
    assert_error(
        client.post("/attention", json={"text": "abc", "model": name, "translation": over}),
        422,
        f"translation has {n} subword tokens",
    )
    assert_error(client.post("/attention", json={"text": "abc", "model": "nope"}), 404, "unknown model 'nope'")
    spec = client.get("/openapi.json").json()
    assert {"200", "404", "413", "422", "503"} <= set(spec["paths"]["/attention"]["post"]["responses"])
    assert spec["components"]["schemas"]["AttentionRequest"]["additionalProperties"] is False

    small = create_app([tiny_transformer.folder], ServerLimits(max_body_bytes=100, timeout=0.5))
    with local_client(small) as limited:
        assert_error(limited.post("/attention", json={"text": "a" * 200}), 413, "100 bytes")
        with small.state.models[name].lock:  # busy past the time limit
            assert_error(limited.post("/attention", json={"text": "abc"}), 503, "longer than the limit of 0.5 s")
        assert limited.post("/attention", json={"text": "abc"}).status_code == 200
