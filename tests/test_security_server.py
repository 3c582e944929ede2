"""The server against hostile clients (issue 54): bodies that never end, more connections than it
serves, requests HTTP cannot read, values of the wrong type or out of range, a model name that
cannot be written back, prefixes the model cannot write and texts that normalize to nothing.
The HTTP-level tests serve a minimal app with the server's own uvicorn settings and middleware (no
model); the request tests a tiny model trained for two steps."""

import json
import socket
import threading
import time
from contextlib import contextmanager

import pytest
import uvicorn
from fastapi.responses import JSONResponse

from attnmt.serve import ServerLimits, create_app
from attnmt.serve.connections import uvicorn_settings
from attnmt.serve.middleware import ArrivalTime, BodyLimitMiddleware
from attnmt.training import train
from conftest import WAIT, local_client, random_strings, reverse, toy_config


async def echo(scope, receive, send):
    """An app that answers every request with the length of its body, once it has all of it."""
    body, more = b"", True
    while more:
        message = await receive()
        body, more = body + message.get("body", b""), message.get("more_body", False)
    await JSONResponse({"length": len(body)})(scope, receive, send)


@contextmanager
def serving(app, limits: ServerLimits, **settings):
    """(port, uvicorn.Server) of ``app`` served with ``attnmt serve``'s uvicorn settings (``settings``
    changed), in a thread."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    settings = {**uvicorn_settings(limits), **settings}
    server = uvicorn.Server(uvicorn.Config(app, log_level="critical", lifespan="off", **settings))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    try:
        yield sock.getsockname()[1], server
    finally:
        server.should_exit = True
        thread.join(WAIT)
        sock.close()


def exchange(port: int, data: bytes) -> tuple[int, dict, bytes]:
    """Sends ``data`` on a new connection and reads until the server closes it: (status, headers, body).
    A server that never answers fails the test after WAIT seconds instead of hanging it."""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as connection:
        connection.sendall(data)
        answer = b""
        while chunk := connection.recv(65536):  # (socket.timeout after WAIT: no answer)
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in header_lines)
    return int(status_line.split()[1]), headers, body


HEADERS = b"Host: localhost\r\nContent-Type: application/json\r\n"


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"POST /translate HTTP/1.1\r\n" + HEADERS + b"Content-Length: abc\r\n\r\n",
        b"POST /translate HTTP/1.1\r\n" + HEADERS + b"Content-Length: -1\r\n\r\n",
        b"GARBAGE\r\n\r\n",
        b"GET /health HTTP/1.1\r\n\r\n",  # HTTP/1.1 without Host
        b"GET /health HTTP/1.1\r\nHost: localhost\r\nHost: localhost\r\n\r\n",
    ],
    ids=["content-length-abc", "content-length-minus-1", "garbage", "no-host", "two-hosts"],
)
def test_a_request_http_cannot_read_gets_the_json_error_body(request_bytes):
    """uvicorn answers these before the app: with the API's JSON error, not "Invalid HTTP request received."."""
    with serving(echo, ServerLimits()) as (port, _):
        status, headers, body = exchange(port, request_bytes)
    assert status == 400 and headers["content-type"] == "application/json"
    assert json.loads(body)["detail"].startswith("invalid HTTP request")


@pytest.mark.slow  # (starts a process or a server and waits on it)
def test_a_body_that_never_finishes_is_answered_at_the_time_limit_and_its_connection_closed():
    """Content-Length 100 and 22 bytes sent: a 408 once the request's time limit has passed (it was
    never answered), and the connection closed, the rest of the body never waited for."""
    limits = ServerLimits(timeout=1)
    app = ArrivalTime(BodyLimitMiddleware(echo, max_bytes=limits.max_body_bytes, timeout=limits.timeout))
    with serving(app, limits) as (port, _):
        request = b"POST /translate HTTP/1.1\r\n" + HEADERS + b"Content-Length: 100\r\n\r\n" + b'{"text": "25.04.1974"'
        status, headers, body = exchange(port, request)
        assert status == 408 and headers["connection"] == "close"
        assert "did not arrive within the time limit of 1 s (21 of 100 bytes received)" in json.loads(body)["detail"]
        whole = b'{"text": "25.04.1974"}'
        request = b"POST /translate HTTP/1.1\r\n" + HEADERS + b"Content-Length: 22\r\nConnection: close\r\n\r\n" + whole
        assert exchange(port, request)[0] == 200  # a body sent at once is read as before


def test_connections_beyond_the_limit_are_answered_at_once_not_held():
    """With max_connections held (by clients that send nothing), the next request gets uvicorn's 503
    at once instead of being read: what a server holds is bounded by max_connections bodies."""
    limits = ServerLimits(max_connections=2)
    with serving(echo, limits, timeout_keep_alive=WAIT) as (port, server):  # (the idle ones are not closed first)
        idle = [socket.create_connection(("127.0.0.1", port), timeout=WAIT) for _ in range(2)]
        deadline = time.monotonic() + WAIT
        while len(server.server_state.connections) < 2:  # (accepted by the server's loop)
            assert time.monotonic() < deadline
            time.sleep(0.02)
        status, _, _ = exchange(port, b"GET /health HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n")
        assert status == 503
        for connection in idle:
            connection.close()


def closed_by_the_server(connection: socket.socket, trickle: bytes = b"") -> bool:
    """Whether the server closes ``connection`` within WAIT seconds, while the client sends it
    ``trickle`` a byte every 0.1 s (and then nothing)."""
    deadline = time.monotonic() + WAIT
    connection.settimeout(0.1)
    while time.monotonic() < deadline:
        try:
            if trickle:
                connection.send(trickle[:1])
                trickle = trickle[1:]
            if connection.recv(1) == b"":
                return True
        except socket.timeout:
            continue
        except OSError:  # (reset: closed too)
            return True
    return False


@pytest.mark.slow  # (starts a process or a server and waits on it)
def test_a_connection_that_sends_no_whole_request_is_closed():
    """uvicorn's keep-alive timer starts only after an answer and stops at any byte: a connection
    that sent nothing, or its headers a byte at a time, was held for ever, and max_connections of
    them would keep every other client out. Now each is closed timeout_keep_alive seconds after it
    opened (or after its last answer) unless it has sent a whole request line and headers."""
    with serving(echo, ServerLimits(), timeout_keep_alive=1) as (port, _):
        with socket.create_connection(("127.0.0.1", port)) as silent:
            assert closed_by_the_server(silent)
        with socket.create_connection(("127.0.0.1", port)) as slow:
            assert closed_by_the_server(slow, b"GET /health HTTP/1.1\r\nHost: localhost\r\nX-Pad: " + b"a" * 1000)
        status, _, _ = exchange(port, b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        assert status == 200


def test_the_serve_command_runs_uvicorn_with_these_settings():
    settings = uvicorn_settings(ServerLimits(max_connections=7, timeout=9))
    assert settings["limit_concurrency"] == 7 and settings["timeout_graceful_shutdown"] == 9
    assert settings["h11_max_incomplete_event_size"] == 16 * 1024 and settings["timeout_keep_alive"] == 5
    config = uvicorn.Config(echo, **settings)  # (uvicorn takes them all)
    assert config.limit_concurrency == 7 and config.http == settings["http"]


# --------------------------------------------------------------------------- request bodies


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny model (two training steps, seconds): what it translates does not matter here."""
    folder = tmp_path_factory.mktemp("security-server")
    config = toy_config(
        folder,
        [(s, reverse(s)) for s in random_strings(100, 3, 6, seed=4)],
        model={"embedding_size": 8, "encoder_hidden": 8, "decoder_hidden": 16, "attention_size": 8},
        training={"max_steps": 2, "threads": 1},
    )
    train(config, log=lambda m: None, progress=False)
    return config.experiment_dir


@pytest.fixture(scope="module")
def client(trained):
    with local_client(create_app([trained])) as client:  # raises on a server error (500)
        yield client


def post(client, path: str, body: dict):
    # json.dumps escapes a lone surrogate as "\udc80", as a JavaScript client would send it
    return client.post(path, content=json.dumps(body), headers={"Content-Type": "application/json"})


def assert_422(response, fragment: str):
    assert response.status_code == 422, response.text
    assert fragment in response.json()["detail"]


SOURCE_ENDPOINTS = {
    "/translate": {},
    "/trace": {},
    "/beam": {},
    "/score": {"translation": "cba"},
}


@pytest.mark.parametrize("path", SOURCE_ENDPOINTS)
def test_a_model_name_that_names_no_model_is_a_422_or_404_never_a_500(client, path):
    """A lone surrogate as the model name made the 404's message impossible to write (a 500)."""
    body = {"text": "abc", **SOURCE_ENDPOINTS[path]}
    assert_422(post(client, path, {**body, "model": "\udc80"}), "model: ")
    assert_422(post(client, path, {**body, "model": "a b"}), "model: String should match pattern")
    response = post(client, path, {**body, "model": "other"})
    assert response.status_code == 404 and "unknown model 'other'" in response.json()["detail"]


@pytest.mark.parametrize(
    "sampling, fragment",
    [
        ('{"temperature": 1e-45}', "sampling.temperature: Input should be greater than or equal to"),
        ('{"top_p": 1e-46}', "sampling.top_p: Input should be greater than or equal to"),
        ('{"temperature": 1e999}', "sampling.temperature: Input should be"),  # (Python reads it as infinity)
        ('{"top_p": "0.5"}', "sampling.top_p: Input should be a valid number"),
        ('{"temperature": true}', "sampling.temperature: Input should be a valid number"),
        ('{"top_k": 2.0}', "sampling.top_k: Input should be a valid integer"),
        ('{"seed": "1"}', "sampling.seed: Input should be a valid integer"),
    ],
)
def test_sampling_values_out_of_range_or_of_the_wrong_type_are_422(client, sampling, fragment):
    """1e-45 and 1e-46 made the draw fail on NaN (a 500); "0.5" and true were accepted."""
    body = '{"text": "abc", "sampling": %s}' % sampling
    assert_422(client.post("/translate", content=body, headers={"Content-Type": "application/json"}), fragment)


def test_numbers_are_read_as_numbers_and_nothing_else_is(client):
    assert post(client, "/translate", {"text": "abc", "sampling": {"top_p": 1, "temperature": 1}}).status_code == 200
    for beam in (5.0, True, "5"):
        assert_422(post(client, "/translate", {"text": "abc", "beam": beam}), "beam: Input should be a valid integer")
    assert_422(
        post(client, "/translate", {"text": "abc", "attention": 1}), "attention: Input should be a valid boolean"
    )
    assert_422(post(client, "/trace", {"text": "abc", "top_k": "3"}), "top_k: Input should be a valid integer")


@pytest.mark.parametrize("path", ["/translate", "/trace", "/beam"])
def test_a_prefix_the_model_cannot_write_is_a_422(client, path):
    """Its <unk> was forced and the output did not begin with the prefix (a 200), where constraints
    that the model cannot write were already a 422."""
    assert_422(post(client, path, {"text": "abc", "prefix": "Ωmega"}), "prefix 'Ωmega' has a character that the")
    assert post(client, path, {"text": "abc", "prefix": "ab"}).status_code == 200
    if path == "/translate":
        response = post(client, path, {"text": ["abc", "abd"], "prefix": ["ab", "Ωmega"]})
        assert_422(response, "prefix[1] 'Ωmega' has a character")


@pytest.mark.parametrize("text", ["\u200b", "\x01\x02\x1f", "\u200b\x03"])
@pytest.mark.parametrize("path", SOURCE_ENDPOINTS)
def test_a_text_that_normalizes_to_nothing_is_refused_by_every_endpoint(client, path, text):
    """One rule: such a text translated to "" on /translate but to outputs on /trace and /beam; now
    each refuses it, as a blank text."""
    response = post(client, path, {"text": text, **SOURCE_ENDPOINTS[path]})
    assert_422(response, "text has no subword tokens once normalized")
    response = post(client, "/translate", {"text": ["abc", text]})
    assert_422(response, "text[1] has no subword tokens once normalized")
