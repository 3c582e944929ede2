"""The server's remaining holes of issue 17: model names (NAME=DIR), the device, the Host check
(DNS rebinding), unreadable bodies (422, never 400), the work of one request and the size of its
answer, decoding in chunks that stop when nobody waits, the time limit counted from arrival."""

import contextlib
import json
import re
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import pytest
import torch
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from attnmt.serve import ServerLimits, create_app
from attnmt.serve.batching import chunked
from attnmt.serve.bodies import parse_json
from attnmt.serve.limits import work
from attnmt.serve.middleware import LOOPBACK_HOSTS, TrustedHostMiddleware
from attnmt.serve.models import model_entry
from conftest import WAIT, local_client
from test_serve import assert_answers_alone, assert_error, free_port, recording_calls, run_cli

LIMITS = ServerLimits(
    max_sentences=8, max_chars=40, max_tokens=20, max_beam=5, max_work=400, max_answer_values=3000, timeout=30.0
)


@pytest.fixture(scope="module")
def served(reverse_model):
    """(client, app, translator, dev strings)."""
    translator, dev = reverse_model
    app = create_app([translator.folder], LIMITS)
    with local_client(app) as client:
        yield client, app, translator, dev


def tokens_of(translator, texts) -> list[int]:
    return [len(ids) for ids in translator.src_subwords.encode(texts)]


# --- model names: NAME=DIR ------------------------------------------------------------------------


def test_model_arguments_are_a_folder_or_name_equals_folder():
    assert model_entry("runs/de-en") == "runs/de-en"
    assert model_entry("a=runs/x/model") == ("a", "runs/x/model")
    assert model_entry("de-en.v2=model") == ("de-en.v2", "model")
    assert model_entry("runs/lr=0.001") == "runs/lr=0.001"  # a '/' before the '=': a folder's path
    assert model_entry("./a=b") == "./a=b"
    assert model_entry("a=b=c") == ("a", "b=c")
    assert model_entry("=runs/x") == ("", "runs/x")  # refused when loading: an empty name


@pytest.mark.parametrize(
    "argument, message",
    [
        ("=somewhere", "the model name is empty"),
        ("a b=somewhere", "model name 'a b' is not valid"),
        ("é=somewhere", "model name 'é' is not valid"),
        ("..=somewhere", "model name '..' is not valid"),
        ("a<b>=somewhere", "is not valid: use 1 to 100 letters, digits"),
        ("a=", "no model folder after '='"),
    ],
)
def test_bad_model_names_are_one_line_errors(argument, message):
    code, _, err = run_cli("serve", argument)
    assert code == 2 and message in err and "Traceback" not in err, err


def test_a_folder_with_an_odd_name_asks_for_name_equals_dir(tmp_path):
    code, _, err = run_cli("serve", tmp_path / "my model")
    assert code == 2 and "model name 'my model' is not valid" in err and "NAME=DIR" in err, err


def test_name_equals_dir_serves_two_folders_of_the_same_name(reverse_model, tmp_path, monkeypatch):
    import uvicorn

    translator, dev = reverse_model
    twin = tmp_path / "elsewhere" / translator.folder.name  # the same folder name: refused without names
    twin.parent.mkdir()
    twin.symlink_to(translator.folder.resolve(), target_is_directory=True)
    code, _, err = run_cli("serve", translator.folder, twin)
    assert code == 2 and f"two models are named '{translator.folder.name}'" in err and "NAME=DIR" in err

    apps = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: apps.append(app))
    code, out, err = run_cli("serve", f"reverse={translator.folder}", f"reverse.v2_b-c={twin}")
    assert code == 0, err
    assert "serving reverse, reverse.v2_b-c at" in out
    with local_client(apps[0]) as client:
        assert [m["name"] for m in client.get("/models").json()] == ["reverse", "reverse.v2_b-c"]
        answer = client.post("/translate", json={"text": dev[0], "model": "reverse.v2_b-c", "beam": 1}).json()
        assert answer["model"] == "reverse.v2_b-c"
        assert answer["translations"][0]["candidates"][0]["text"] == translator.translate([dev[0]], beam=1)[0].text
    code, _, err = run_cli("serve", f"same={translator.folder}", f"same={twin}")
    assert code == 2 and "two models are named 'same'" in err


# --- the device ------------------------------------------------------------------------------------


def test_the_device_reaches_every_model_load(reverse_model, monkeypatch):
    import uvicorn

    import attnmt.api

    translator, _ = reverse_model
    devices, real_load = [], attnmt.api.load

    def load(folder, *args, device="cpu", **kwargs):
        devices.append(device)
        return real_load(folder, *args, device=device, **kwargs)

    monkeypatch.setattr(attnmt.api, "load", load)
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: None)
    assert run_cli("serve", f"a={translator.folder}", f"b={translator.folder}", "--device", "cpu")[0] == 0
    assert run_cli("serve", translator.folder)[0] == 0
    assert devices == ["cpu", "cpu", "cpu"]
    create_app([translator.folder], device="cpu")
    assert devices[-1] == "cpu"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine with CUDA: --device cuda works there")
def test_cuda_without_cuda_is_a_one_line_error(tmp_path):
    code, _, err = run_cli("serve", tmp_path, "--device", "cuda")
    assert code == 2 and "CUDA is not available" in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1
    code, _, err = run_cli("serve", tmp_path, "--device", "tpu")
    assert code == 2 and "'tpu'" in err and "Traceback" not in err


# --- the Host header (DNS rebinding) ------------------------------------------------------------------


def host_checked(*allowed) -> Starlette:
    app = Starlette(routes=[Route("/", lambda request: PlainTextResponse("ok"))])
    return TrustedHostMiddleware(app, hosts=[*LOOPBACK_HOSTS, *allowed])


@pytest.mark.parametrize(
    "host, answered",
    [
        ("localhost", True),
        ("localhost:8000", True),
        ("LOCALHOST:8000", True),
        ("127.0.0.1", True),
        ("127.0.0.1:8000", True),
        ("[::1]", True),
        ("[::1]:8000", True),
        ("localhost:8001", False),
        ("127.0.0.1:80", False),
        ("[::1]:8001", False),
        ("::1", False),
        ("evil.example", False),
        ("evil.example:8000", False),
        ("localhost.evil.example", False),
        ("127.0.0.1.nip.io:8000", False),
        ("", False),
        ("localhost:", False),
        ("localhost:8000:8000", False),
        ("mt.example.org", True),
        ("mt.example.org:8000", True),
        ("mt.example.org:443", False),
        ("proxy.local:8443", True),
        ("proxy.local", False),
        ("proxy.local:8000", False),
        ("[fe80::1]:8000", True),
    ],
)
def test_only_allowed_hosts_are_answered(host, answered):
    app = host_checked("mt.example.org", "Proxy.local:8443", "fe80::1")
    with local_client(app, base_url="http://localhost:8000") as client:  # a server on port 8000
        response = client.get("/", headers={"host": host})
    if answered:
        assert response.status_code == 200 and response.text == "ok"
    else:
        assert_error(response, 400, "is not one this server answers to", "--allowed-host")


def test_serve_flags_reach_the_app(reverse_model, monkeypatch):
    """--max-work, --max-answer-values and the Host names: --allowed-host, and --host when it is one address."""
    import uvicorn

    translator, _ = reverse_model
    apps = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: apps.append(app))
    assert (
        run_cli(
            "serve",
            translator.folder,
            "--max-work",
            "123",
            "--max-answer-values",
            "456",
            "--allowed-host",
            "a.example",
            "--allowed-host",
            "b.example:8443",
            "--host",
            "127.0.0.2",
        )[0]
        == 0
    )
    assert run_cli("serve", translator.folder, "--host", "0.0.0.0")[0] == 0
    one_address, everywhere = apps
    assert (one_address.state.limits.max_work, one_address.state.limits.max_answer_values) == (123, 456)
    for app, answered in (
        (one_address, (*LOOPBACK_HOSTS, "a.example", "b.example:8443", "127.0.0.2")),
        (everywhere, LOOPBACK_HOSTS),
    ):
        with local_client(app, base_url="http://localhost:8000") as client:
            for host in (
                "a.example",
                "b.example:8443",
                "b.example",
                "127.0.0.2",
                "0.0.0.0",
                "localhost",
                "127.0.0.1",
                "[::1]",
                "evil.example",
            ):
                status = client.get("/health", headers={"host": host}).status_code
                assert status == (200 if host in answered else 400), (host, status)
    code, _, err = run_cli("serve", translator.folder, "--allowed-host", "a b")
    assert code == 2 and "not a host name" in err and "Traceback" not in err


def test_allowed_hosts_must_be_host_names():
    from attnmt.core.errors import AttnmtError

    for bad in ("", "http://x", "a b", "*", "x/y"):
        with pytest.raises(AttnmtError, match="not a host name"):
            host_checked(bad)


def test_an_app_answers_only_to_its_hosts(served):
    client, app, _, _ = served
    assert client.get("/health").status_code == 200  # Host: localhost
    for path, method in (("/health", "GET"), ("/models", "GET"), ("/", "GET"), ("/translate", "POST")):
        response = client.request(method, path, headers={"host": "evil.example"}, json={"text": "abc"})
        assert_error(response, 400, "'evil.example' is not one this server answers to")


def test_the_real_server_on_all_interfaces_answers_only_to_its_hosts(reverse_model):
    """`attnmt serve --host 0.0.0.0`: reachable from anywhere, but only for the Host names allowed."""
    translator, _ = reverse_model
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "attnmt.cli",
            "serve",
            str(translator.folder),
            "--host",
            "0.0.0.0",
            "--port",
            str(port),
            "--allowed-host",
            "mt.example.org",
            "--log-level",
            "warning",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + WAIT
        while True:  # until it answers
            assert server.poll() is None and time.monotonic() < deadline, server.communicate()[1].decode()
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:  # Host: 127.0.0.1:PORT
                    break
            time.sleep(0.2)
        for host, status in (
            (f"localhost:{port}", 200),
            ("mt.example.org", 200),
            (f"[::1]:{port}", 200),
            ("evil.example", 400),
            (f"evil.example:{port}", 400),
            (f"localhost:{port + 1}", 400),
        ):
            response = httpx.post(f"{url}/translate", json={"text": "abc"}, headers={"host": host}, timeout=30)
            assert response.status_code == status, (host, response.text)
            assert "detail" in response.json() or "translations" in response.json()
    finally:
        server.terminate()
        server.wait(30)


# --- bodies: 422 with the errors list, never 400 ----------------------------------------------------


UNREADABLE = [
    (b'{"text": "\xff\xfe abc"}', "application/json", "invalid UTF-8 at byte 10"),
    (b"[" * 100_000 + b"]" * 100_000, "application/json", "nested too deeply"),
    (b'{"text": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "application/json", "nested too deeply"),
    ('{"text": "café"}'.encode("latin-1"), "application/json; charset=latin-1", "declared latin-1"),
    (b'{"text": "abc"}', "application/json; charset=latin-1", "declared latin-1"),
    (b'{"text": "abc"}', "application/json; charset*=utf-8''latin-1", "declared latin-1"),
    ('{"text": "abc"}'.encode("utf-16"), "application/json", "invalid UTF-8"),
    (b'{"text": "abc", "beam": NaN}', "application/json", "NaN is not a JSON number"),
    (b'{"text": "abc", "beam": -Infinity}', "application/json", "-Infinity is not a JSON number"),
    (b'{"text": "abc", "beam": ' + b"9" * 5000 + b"}", "application/json", "a number with too many digits"),
    (b'\xef\xbb\xbf{"text": "abc"}', "application/json", "BOM"),
    (b'{"text": "abc"', "application/json; charset=UTF-8", "Expecting"),
]


@pytest.mark.parametrize("body, content_type, fragment", UNREADABLE, ids=[str(i) for i in range(len(UNREADABLE))])
def test_unreadable_bodies_are_422_with_the_errors_list(served, body, content_type, fragment):
    client = served[0]
    for path in ("/translate", "/trace", "/beam", "/attention", "/score"):
        response = client.post(path, content=body, headers={"content-type": content_type})
        detail = assert_error(response, 422, "the body is not valid UTF-8 JSON", fragment)
        [error] = response.json()["errors"]
        assert (error["msg"], error["type"], error["loc"][0]) == (detail, "json_invalid", "body")


def test_parse_json_reads_utf8_json_only():
    assert parse_json('{"text": "café"}'.encode(), "application/json") == {"text": "café"}
    assert parse_json(b'{"a": [1, 2.5, null]}', "application/json; charset=UTF-8") == {"a": [1, 2.5, None]}
    assert parse_json(b'"x"', "") == "x"
    deep = 500
    assert parse_json(b"[" * deep + b"]" * deep, "application/json") is not None


# --- the work of one request -----------------------------------------------------------------------


def test_the_work_of_a_request_is_bounded(served):
    client, _, translator, dev = served
    eights = [t for t in dev if len(t) == 8]
    texts = [a + b for a, b in zip(eights[:5], eights[5:10])]  # 16 characters: about 17 tokens each
    counts = tokens_of(translator, texts)
    assert max(counts) <= LIMITS.max_tokens
    beam = max(b for b in range(1, LIMITS.max_beam + 1) if work(counts, b) <= LIMITS.max_work)
    assert beam < LIMITS.max_beam  # texts, tokens and beam within their limits, the work over it with beam + 1
    ok = client.post("/translate", json={"text": texts, "beam": beam, "attention": False})
    assert ok.status_code == 200, ok.text
    asked = work(counts, beam + 1)
    assert_error(
        client.post("/translate", json={"text": texts, "beam": beam + 1, "attention": False}),
        422,
        f"the request asks for {asked} units of work",
        f"the limit is {LIMITS.max_work}",
        "fewer or shorter texts",
        "smaller beam",
    )


def test_the_default_work_admits_any_one_text_within_the_other_limits():
    limits = ServerLimits()
    assert work([limits.max_tokens], limits.max_beam) <= limits.max_work


def test_batches_are_bounded_by_work_too(reverse_model, monkeypatch):
    translator, dev = reverse_model
    texts = [t for t in dev if len(t) == 8][:6]
    one = work(tokens_of(translator, texts[:1]), 3)
    app = create_app([translator.folder], ServerLimits(max_work=2 * one + 1, batch_wait=0.5))
    model = app.state.models[translator.folder.name]
    bodies = [{"text": text, "beam": 3} for text in texts]
    batches = []
    real_run = model.run_chunks

    async def recorded(chunks, deadline, wanted=lambda: True):
        results = await real_run(chunks, deadline, wanted)
        batches.append(sum(len(r) for r in results))
        return results

    monkeypatch.setattr(model, "run_chunks", recorded)
    with local_client(app) as client:
        from test_serve import post_together

        model.lock.acquire()  # busy: the requests queue up
        threading.Timer(1.0, model.lock.release).start()
        responses = post_together(client, bodies)
    assert_answers_alone(translator, bodies, responses)
    assert sum(batches) == len(bodies) and max(batches) == 2, batches  # two requests fit in max_work, not three


def test_chunks_are_sorted_by_cost_and_bounded():
    costs = [5, 1, 9, 3, 3, 20, 2]
    chunks = chunked(costs, 8)
    assert sorted(i for chunk in chunks for i in chunk) == list(range(len(costs)))  # each index once
    assert [[costs[i] for i in chunk] for chunk in chunks] == [[1, 2, 3], [3, 5], [9], [20]]
    assert chunked([], 8) == [] and chunked([4], 1) == [[0]]


def test_a_large_request_is_decoded_in_chunks_and_answered_in_order(reverse_model, monkeypatch):
    translator, dev = reverse_model
    texts = sorted(dev[:8], key=len, reverse=True)
    counts = tokens_of(translator, texts)
    limits = ServerLimits(max_work=work(counts, 2))
    app = create_app([translator.folder], limits)
    with local_client(app) as client, recording_calls(app.state.models[translator.folder.name], monkeypatch) as calls:
        response = client.post("/translate", json={"text": texts, "beam": 2})
    assert_answers_alone(translator, [{"text": texts, "beam": 2}], [response])
    assert len(calls) >= 2  # a request of max_work: in chunks of at most half of it
    cost = dict(zip(texts, counts))
    for chunk, _, _ in calls:
        assert len(chunk) == 1 or work([cost[t] for t in chunk], 2) <= limits.chunk_work
    assert sorted(t for chunk, _, _ in calls for t in chunk) == sorted(texts)


def test_a_request_past_its_limit_frees_the_model_after_the_chunk_under_way(reverse_model, monkeypatch):
    """The 503 comes at the limit while the model computes; the rest of the request is not decoded."""
    translator, dev = reverse_model
    texts = dev[:8]
    app = create_app([translator.folder], ServerLimits(max_work=work(tokens_of(translator, texts), 1), timeout=1.0))
    model = app.state.models[translator.folder.name]
    release, decoded = threading.Event(), []
    real_translate = model.translator.translate

    def slow(chunk, beam, n_best):
        release.wait(WAIT)  # the first chunk computes until the test lets it go
        decoded.extend(chunk)
        return real_translate(chunk, beam, n_best)

    monkeypatch.setattr(model.translator, "translate", slow)
    with local_client(app) as client:
        assert_error(client.post("/translate", json={"text": texts, "beam": 1}), 503, "longer than the limit of 1 s")
        release.set()
        deadline = time.monotonic() + WAIT
        while model.lock.locked() and time.monotonic() < deadline:  # the chunk under way finishes
            time.sleep(0.05)
        assert not model.lock.locked()
        assert 0 < len(decoded) < len(texts)  # that chunk only: the others were not decoded for nobody
        monkeypatch.undo()
        assert client.post("/translate", json={"text": texts[0], "beam": 1}).status_code == 200


def blocking_first_step(model, monkeypatch):
    """Wraps the decoder step of a served model: the first step waits until the test sets the event
    it returns (after the request's 503, so the deadline has passed); counts the steps computed."""
    release, steps = threading.Event(), []
    real = model.translator.model.decode_step

    def step(*args):
        if not steps:
            release.wait(WAIT)
        steps.append(len(steps))
        return real(*args)

    monkeypatch.setattr(model.translator.model, "decode_step", step)
    return release, steps


def wait_for_the_lock(model):
    deadline = time.monotonic() + WAIT
    while model.lock.locked() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not model.lock.locked()


@pytest.mark.parametrize(
    "path, body", [("/beam", {"text": "abcdefgh", "beam": 3}), ("/trace", {"text": "abcdefgh", "top_k": 3})]
)
def test_a_beam_or_trace_past_its_limit_frees_the_model_within_one_decoder_step(reverse_model, monkeypatch, path, body):
    """/beam and /trace are one sentence, not chunks: past the time limit their search stops
    between two decoder steps (issue 27, point 9), instead of running to its end for nobody."""
    translator, _ = reverse_model
    app = create_app([translator.folder], ServerLimits(timeout=1.0))
    model = app.state.models[translator.folder.name]
    with local_client(app) as client:
        assert len(translator.trace(body["text"]).steps) > 4  # what the search would take to its end
        release, steps = blocking_first_step(model, monkeypatch)
        assert_error(client.post(path, json=body), 503, "longer than the limit of 1 s")
        release.set()  # the step under way finishes, past the deadline: the search takes no other
        wait_for_the_lock(model)
        assert steps == [0]
        monkeypatch.undo()
        assert client.post(path, json=body).status_code == 200


class LateLock:
    """A model's lock that is given only once the deadline has passed: its acquire waits the time
    it is allowed, and a little more. ``released`` is set when the work lets it go."""

    def __init__(self, lock):
        self.lock, self.released = lock, threading.Event()

    def acquire(self, timeout: float = -1) -> bool:
        time.sleep(max(0.0, timeout) + 0.05)
        return self.lock.acquire()

    def release(self):
        self.lock.release()
        self.released.set()

    def locked(self) -> bool:
        return self.lock.locked()


@pytest.mark.parametrize("path, body", [("/beam", {"text": "abcdefgh", "beam": 3}), ("/trace", {"text": "abcdefgh"})])
def test_a_request_that_gets_the_model_after_its_limit_does_no_work(reverse_model, monkeypatch, path, body):
    """The model's lock, got after the deadline: the 503, and not one decoder step."""
    translator, _ = reverse_model
    app = create_app([translator.folder], ServerLimits(timeout=1.0))
    model = app.state.models[translator.folder.name]
    release, steps = blocking_first_step(model, monkeypatch)
    release.set()
    late = LateLock(model.lock)
    monkeypatch.setattr(model, "lock", late)
    with local_client(app) as client:
        assert_error(client.post(path, json=body), 503, "longer than the limit of 1 s")
        assert late.released.wait(WAIT)
    assert steps == [] and not model.lock.locked()


def test_the_time_limit_counts_from_the_arrival(reverse_model, monkeypatch):
    """A request whose body takes longer than the limit to arrive is over its limit: no decoding."""
    translator, _ = reverse_model
    app = create_app([translator.folder], ServerLimits(timeout=0.5))
    model = app.state.models[translator.folder.name]
    with local_client(app) as client, recording_calls(model, monkeypatch) as calls:

        def slow_body():
            yield b'{"text": '
            time.sleep(1.0)  # twice the limit: the request has waited that long before it is read
            yield b'"abc"}'

        response = client.post("/translate", content=slow_body(), headers={"content-type": "application/json"})
        assert_error(response, 503, "longer than the limit of 0.5 s")
        assert calls == []
        assert client.post("/translate", json={"text": "abc"}).status_code == 200


# --- the size of an answer -------------------------------------------------------------------------


def test_attention_matrices_that_could_be_too_large_are_refused_before_decoding(reverse_model, monkeypatch):
    """n_best matrices per text of up to (output length limit) x (source tokens): over max_answer_values, a
    422 before any decoding; the same request without the matrices is answered."""
    translator, dev = reverse_model
    text = next(t for t in dev if len(t) == 8)
    [t] = translator.translate([text], beam=5, n_best=5)
    source = len(t.source_tokens)
    dc = translator.config.decoding
    longest = int(dc.max_length_ratio * source + dc.max_length_offset)  # the output length limit
    bound = 8 * 5 * longest * source
    actual = 8 * sum(c.attention.size for c in t.candidates)
    app = create_app([translator.folder], ServerLimits(max_answer_values=bound - 1))
    body = {"text": [text] * 8, "beam": 5, "n_best": 5}
    with local_client(app) as client, recording_calls(app.state.models[translator.folder.name], monkeypatch) as calls:
        assert_error(
            client.post("/translate", json=body),
            422,
            f"could hold up to {bound} attention weights",
            f"the limit is {bound - 1}",
            '"attention": false',
            "smaller n_best",
        )
        assert calls == []  # refused before decoding
        assert client.post("/translate", json={**body, "attention": False}).status_code == 200
        assert client.post("/translate", json={**body, "n_best": 4}).status_code == 200
    assert actual < bound  # the bound holds whatever the model writes


def test_answers_are_bounded_after_the_work_too(reverse_model):
    """An answer that turns out larger than max_answer_values (here a /trace's vectors) is a 422."""
    translator, dev = reverse_model
    trace = translator.trace(dev[0], 5)
    app = create_app([translator.folder], ServerLimits(max_answer_values=50))
    with local_client(app) as client:
        detail = assert_error(
            client.post("/trace", json={"text": dev[0]}), 422, "the limit is 50", "send a shorter text"
        )
    held = int(re.search(r"the answer would hold (\d+) numbers", detail)[1])
    assert held >= sum(len(s.state) for s in trace.steps) > 50


def test_attention_matrices_are_rounded_to_six_decimals(served):
    client, _, translator, dev = served
    [c] = client.post("/translate", json={"text": dev[0]}).json()["translations"][0]["candidates"]
    attention = np.array(c["attention"])
    np.testing.assert_array_equal(attention, np.round(attention, 6))
    np.testing.assert_allclose(attention, translator.translate([dev[0]])[0].attention, atol=5e-7, rtol=0)


def test_a_large_answer_is_made_off_the_event_loop(served, monkeypatch):
    """While one answer is being made into JSON, the server answers others (and keeps their time limits)."""
    from attnmt.serve.schemas import TranslateResponse

    client, _, _, dev = served
    making, release = threading.Event(), threading.Event()
    real_dump = TranslateResponse.model_dump_json

    def slow_dump(self, **kwargs):
        making.set()
        release.wait(WAIT)
        return real_dump(self, **kwargs)

    monkeypatch.setattr(TranslateResponse, "model_dump_json", slow_dump)
    answer = {}
    request = threading.Thread(target=lambda: answer.update(r=client.post("/translate", json={"text": dev[0]})))
    request.start()
    try:
        assert making.wait(WAIT)
        assert client.get("/health").status_code == 200  # answered while the other answer is being made
    finally:
        release.set()
        request.join(WAIT)
    assert answer["r"].status_code == 200 and json.loads(answer["r"].text)["translations"]


def test_sampling_requests_are_decoded_alone_and_searches_by_beam_and_n_best():
    """A seed repeats a request's draws only if nothing else shares its batches."""
    from attnmt.core.config import Sampling
    from attnmt.serve.batching import _Job

    def job(beam=1, n_best=1, sampling=None):
        return _Job(["a"], [1], beam, n_best, 0.0, None, sampling)

    assert job(3, 2).options == job(3, 2).options != job(3, 1).options
    drawn = job(sampling=Sampling(seed=1))
    assert drawn.options != job(sampling=Sampling(seed=1)).options and drawn.options != job().options
