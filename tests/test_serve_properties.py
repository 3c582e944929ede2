"""The HTTP API under arbitrary input, property-based: any Unicode text (control characters, line
separators, right-to-left text, emoji, lone surrogates sent as JSON escapes) gets one translation
per text, in order, or a JSON 4xx naming the problem; any body, JSON or not, gets an answer that is
never a 5xx, and any bytes that are not a valid request a 422 with the errors list."""

import json

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from attnmt.data.subwords import valid_text
from attnmt.serve import create_app
from attnmt.training import train
from conftest import local_client, random_strings, reverse, toy_config

pytestmark = pytest.mark.slow  # every test here trains models (or starts processes that do)

TRICKY = (
    "\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\ufeff\x00\t \u00a0\u200f\u202e\u05e9\u0627\u0301\U0001f600\ud800\udfff"
)
TEXT = st.text(st.one_of(st.sampled_from(TRICKY), st.characters()), max_size=40)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    folder = tmp_path_factory.mktemp("serve-properties")
    config = toy_config(
        folder,
        [(s, reverse(s)) for s in random_strings(100, 3, 6, seed=4)],
        model={"embedding_size": 8, "encoder_hidden": 8, "decoder_hidden": 16, "attention_size": 8},
        training={"max_steps": 2, "threads": 1},
    )
    train(config, log=lambda m: None, progress=False)
    with local_client(create_app([config.experiment_dir])) as client:  # raises on any server error
        yield client


def post(client, path: str, body) -> tuple[int, object]:
    # json.dumps escapes lone surrogates as "\ud800", as a JavaScript client would send them.
    response = client.post(path, content=json.dumps(body), headers={"Content-Type": "application/json"})
    assert response.status_code < 500, response.text
    return response.status_code, response.json()


def received(text: str) -> str:
    """The text as the server reads it: in JSON, the escapes of a surrogate pair ("\\ud800\\udfff")
    join into one character (U+103FF); lone ones stay lone."""
    return json.loads(json.dumps(text))


def refused(text: str) -> bool:
    """Blank texts are refused, and so are lone surrogates (pydantic: not a valid string)."""
    text = received(text)
    return not text.strip() or valid_text(text) != text


def no_tokens(client, text: str) -> bool:
    """A text that the model's normalization empties (control or zero-width characters only) is
    refused too, once the body is valid."""
    [model] = client.app.state.models.values()
    return not model.translator.src_subwords.encode([received(text)])[0]


def assert_client_error(status: int, answer):
    assert 400 <= status < 500
    assert isinstance(answer, dict) and isinstance(answer["detail"], str) and answer["detail"]


@SETTINGS
@given(texts=st.lists(TEXT, min_size=1, max_size=8), beam=st.integers(1, 3))
@example(texts=["\ud800\udfff", "\ud800"], beam=1)  # a surrogate pair (one character once in JSON), a lone one
@example(texts=["abc", "\x00\u200b"], beam=1)  # a text of no tokens once normalized
def test_translate_answers_every_text_in_order(client, texts, beam):
    status, answer = post(client, "/translate", {"text": texts, "beam": beam, "attention": False})
    bad = [i for i, text in enumerate(texts) if refused(text)] or [
        i for i, text in enumerate(texts) if no_tokens(client, text)
    ]
    if bad:
        assert status == 422 and f"text[{bad[0]}]" in answer["detail"], answer
        return
    assert status == 200, answer
    assert [t["source"] for t in answer["translations"]] == [received(text) for text in texts]


@SETTINGS
@given(text=TEXT, path=st.sampled_from(["/trace", "/beam"]))
def test_trace_and_beam_answer_any_text(client, text, path):
    status, answer = post(client, path, {"text": text})
    if refused(text) or no_tokens(client, text):
        assert_client_error(status, answer)
        return
    assert status == 200, answer
    assert answer["source_tokens"][-1] == "</s>"


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)
FIELDS = st.fixed_dictionaries(
    {}, optional={"text": JSON, "beam": JSON, "n_best": JSON, "model": JSON, "attention": JSON, "top_k": JSON}
)


@SETTINGS
@given(body=JSON | FIELDS, path=st.sampled_from(["/translate", "/trace", "/beam"]))
def test_any_json_body_gets_an_answer_not_a_server_error(client, body, path):
    status, answer = post(client, path, body)
    if status != 200:
        assert_client_error(status, answer)


@SETTINGS
@given(body=st.binary(max_size=200), path=st.sampled_from(["/translate", "/trace", "/beam"]))
def test_any_bytes_body_gets_a_json_client_error(client, body, path):
    response = client.post(path, content=body, headers={"Content-Type": "application/json"})
    if response.status_code != 200:  # a few byte strings are valid requests; the others are all invalid requests
        assert response.status_code == 422, response.text
        assert_client_error(response.status_code, response.json())
        assert response.json()["errors"]  # the documented shape, whatever the bytes
