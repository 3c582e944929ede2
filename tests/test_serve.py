"""The HTTP API (attnmt.serve) through FastAPI's TestClient, on the reverse-string model."""

import contextlib
import io
import json
import shutil
import threading
import time
import warnings

import numpy as np
import pytest

from attnmt.cli import build_parser, main
from attnmt.errors import AttnmtError
from attnmt.serve import ServerLimits, create_app

with warnings.catch_warnings():  # starlette warns about httpx on import; the client works
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

LIMITS = ServerLimits(max_sentences=8, max_chars=40, max_beam=5, max_top_k=10, timeout=30.0)


@pytest.fixture(scope="module")
def served(reverse_model):
    """(client, app, model name, translator of the test session, dev strings)."""
    translator, dev = reverse_model
    app = create_app([translator.folder], LIMITS)
    with TestClient(app) as client:
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
    assert info == {"name": name, "attention": config.model.attention, "rnn_type": config.model.rnn_type,
                    "input_feeding": config.model.input_feeding, "decoder_hidden": config.model.decoder_hidden,
                    "beam": config.decoding.beam, "path": str(translator.folder.resolve())}


def test_two_models_by_folder_name_and_first_is_default(reverse_model, tmp_path):
    translator, _ = reverse_model
    other = shutil.copytree(translator.folder, tmp_path / "copy-of-reverse")
    app = create_app([other, translator.folder], LIMITS)
    with TestClient(app) as client:
        names = [m["name"] for m in client.get("/models").json()]
        assert names == ["copy-of-reverse", translator.folder.name]
        assert client.get("/health").json()["models"] == names
        assert client.post("/translate", json={"text": "abc"}).json()["model"] == "copy-of-reverse"
        chosen = client.post("/translate", json={"text": "abc", "model": translator.folder.name})
        assert chosen.json()["model"] == translator.folder.name
        assert_error(client.post("/trace", json={"text": "abc", "model": "nope"}), 404,
                     "unknown model 'nope'; available: copy-of-reverse, " + translator.folder.name)


def test_duplicate_model_names_are_refused(reverse_model, tmp_path):
    translator, _ = reverse_model
    twin = shutil.copytree(translator.folder, tmp_path / "elsewhere" / translator.folder.name)
    with pytest.raises(AttnmtError, match=f"two model folders are named '{translator.folder.name}'"):
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
    import attnmt.serve

    translator, _ = reverse_model
    static = tmp_path / "static"
    static.mkdir()
    monkeypatch.setattr(attnmt.serve, "STATIC_DIR", static)
    with TestClient(create_app([translator.folder])) as client:
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
    assert request["additionalProperties"] is False and request["required"] == ["text"]
    text_forms = {form["type"]: form for form in request["properties"]["text"]["oneOf"]}
    assert text_forms["array"]["maxItems"] == LIMITS.max_sentences
    assert text_forms["string"]["maxLength"] == LIMITS.max_chars
    assert request["properties"]["n_best"]["maximum"] == LIMITS.max_beam
    responses = spec["paths"]["/translate"]["post"]["responses"]
    assert {"200", "404", "413", "422", "503"} <= set(responses)
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
    texts = sorted(dev[:LIMITS.max_sentences], key=len, reverse=True)[:4] + dev[:4]  # lengths mixed
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


def test_translate_default_beam_is_the_models(served):
    client, _, _, translator, _ = served
    beam = translator.config.decoding.beam
    assert beam < LIMITS.max_beam
    ok = client.post("/translate", json={"text": "abc", "n_best": beam})
    assert ok.status_code == 200 and len(ok.json()["translations"][0]["candidates"]) == beam
    assert_error(client.post("/translate", json={"text": "abc", "n_best": beam + 1}), 422,
                 f"n_best ({beam + 1}) cannot exceed the beam size ({beam})")
    assert_error(client.post("/translate", json={"text": "abc", "beam": 2, "n_best": 3}), 422,
                 "n_best (3) cannot exceed the beam size (2)")


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
    ({}, "text: Field required"),
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
    assert_error(client.post("/translate", content=b'{"text": "abc"', headers={"content-type": "application/json"}),
                 422, "not valid JSON")
    assert_error(client.post("/translate", content=b'{"text": "abc"}', headers={"content-type": "text/plain"}),
                 422, "must be a JSON object")
    assert_error(client.get("/translate"), 405)


def test_unknown_model_is_404(served):
    client, _, name, _, _ = served
    for path in ("/translate", "/trace", "/beam"):
        assert_error(client.post(path, json={"text": "abc", "model": "x"}), 404,
                     f"unknown model 'x'; available: {name}")


# --- body size and time limits -------------------------------------------------------------------


def test_body_too_large_is_413_before_validation(served):
    client = served[0]
    big = {"text": "a" * (ServerLimits().max_body_bytes + 10)}  # too long a text, but too large first
    assert_error(client.post("/translate", json=big), 413, "request body too large", "1000000 bytes")


def test_body_limit_counts_the_bytes_received(reverse_model):
    translator, _ = reverse_model
    app = create_app([translator.folder], ServerLimits(max_body_bytes=200))
    with TestClient(app) as client:
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
        small = client.post("/translate", content=iter([b'{"text": ', b'"abcd"}']),
                            headers={"content-type": "application/json"})
        assert small.status_code == 200, small.text
        assert_error(client.post("/translate", content=b"{}", headers={"content-length": "1000"}), 413)


def test_time_limit_is_503(reverse_model, monkeypatch):
    translator, _ = reverse_model
    app = create_app([translator.folder], ServerLimits(timeout=0.5))
    model = app.state.models[translator.folder.name]
    with TestClient(app) as client:
        with model.lock:  # the model is busy with another request for longer than the limit
            start = time.monotonic()
            response = client.post("/translate", json={"text": "abc"})
            assert_error(response, 503, "longer than the limit of 0.5 s")
            assert time.monotonic() - start < 3
            assert_error(client.post("/trace", json={"text": "abc"}), 503)
        assert client.post("/translate", json={"text": "abc"}).status_code == 200

        release = threading.Event()
        slow_translate = model.translator.translate

        def slow(*args, **kwargs):
            release.wait(10)
            return slow_translate(*args, **kwargs)

        monkeypatch.setattr(model.translator, "translate", slow)
        start = time.monotonic()
        assert_error(client.post("/translate", json={"text": "abc"}), 503)  # computing for too long
        assert time.monotonic() - start < 3
        release.set()
        monkeypatch.undo()
        deadline = time.monotonic() + 10
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


@pytest.mark.parametrize("body, fragment", [
    ({"text": ""}, "text: String should have at least 1 character"),
    ({"text": " "}, "text must not be empty"),
    ({"text": ["abc"]}, "text: Input should be a valid string"),
    ({"text": "a" * (LIMITS.max_chars + 1)}, "at most"),
    ({"text": "abc", "top_k": 0}, "top_k"),
    ({"text": "abc", "top_k": LIMITS.max_top_k + 1}, "top_k"),
    ({"text": "abc", "beam": 3}, "beam: Extra inputs are not permitted"),
])
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
    assert nodes[0] == {"id": 0, "parent": None, "token": nodes[0]["token"], "log_prob": 0.0, "step": 0,
                        "status": "root"}
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
    assert all(sum(n["step"] == s and n["status"] == "kept" for n in body["nodes"]) <= 1
               for s in range(len(body["nodes"])))
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
    args = build_parser().parse_args(["serve", "a", "b/c", "--host", "0.0.0.0", "--port", "9001",
                                      "--max-body-bytes", "5000", "--max-sentences", "3", "--max-chars", "50",
                                      "--max-beam", "4", "--timeout", "2.5", "--log-level", "warning"])
    assert (args.model_dir, args.host, args.port, args.max_body_bytes, args.max_sentences, args.max_chars,
            args.max_beam, args.timeout, args.log_level) == (["a", "b/c"], "0.0.0.0", 9001, 5000, 3, 50, 4, 2.5,
                                                              "warning")
    defaults = build_parser().parse_args(["serve", "a"])
    assert (defaults.host, defaults.port) == ("127.0.0.1", 8000)
    for bad in (["serve"], ["serve", "a", "--port", "0"], ["serve", "a", "--max-sentences", "0"],
                ["serve", "a", "--timeout", "-1"]):
        with pytest.raises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
            build_parser().parse_args(bad)


def test_serve_command_builds_the_app_and_prints_the_url(reverse_model, monkeypatch):
    import uvicorn

    translator, _ = reverse_model
    calls = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: calls.append((app, kwargs)))
    code, out, err = run_cli("serve", translator.folder, "--port", "8765", "--max-sentences", "2")
    assert code == 0, err
    assert "http://127.0.0.1:8765/" in out and translator.folder.name in out
    assert "warning" not in err
    [(app, kwargs)] = calls
    assert kwargs["host"] == "127.0.0.1" and kwargs["port"] == 8765
    assert app.state.limits.max_sentences == 2
    with TestClient(app) as client:
        assert_error(client.post("/translate", json={"text": ["a", "b", "c"]}), 422, "at most 2 items")

    code, out, err = run_cli("serve", translator.folder, "--host", "0.0.0.0")
    assert code == 0 and "reachable from other machines" in err


def test_serve_command_reports_a_bad_folder(tmp_path):
    code, _, err = run_cli("serve", tmp_path / "missing")
    assert code == 2 and "not a model folder" in err and "Traceback" not in err
