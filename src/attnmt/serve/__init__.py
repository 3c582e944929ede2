"""HTTP API over trained models: translate, trace the decoder, list models.

    >>> from attnmt.serve import create_app
    >>> app = create_app([Path("runs/quickstart/model")])   # then: uvicorn.run(app)
    >>> app = create_app([("dates", Path("runs/quickstart/model"))], device="cpu", allowed_hosts=["mt.example.org"])

Every request body is a pydantic model that forbids unknown fields and carries the server
limits (sentences per request, characters per sentence, beam size), so the OpenAPI schema at
``/docs`` shows them; subword tokens per sentence are counted after encoding. Errors are JSON
objects whose ``detail`` is a readable string: 422 invalid request (a body that is not UTF-8 JSON
included, and a request asking for too much work or too large an answer), 404 unknown model, 413
body too large, 408 a body not sent within the time limit, 400 a Host header that does not name
this machine (DNS rebinding) or a request HTTP cannot read, 503 over the time limit, counted from
the request's arrival. ``/beam`` returns the search tree recorded by
``attnmt.seq2seq.decoding.BeamRecorder``; ``/attention`` every layer and head of a Transformer's attention
(``Translator.attention``).

Decoding runs in a worker thread, one computation at a time per model (a lock per model).
Concurrent /translate requests for a model are decoded together (dynamic batching), in chunks that
stop once every request waiting for them has given up. Answers are made into JSON in a worker
thread too, so that the event loop keeps every request's time limit. ``run_server``
shuts down gracefully: on SIGTERM or SIGINT, requests in flight finish and get their answers.

    limits.py      ServerLimits: what a request may ask for, how requests are batched; the work of a request
    schemas.py     request and answer bodies; answers read from attnmt.api's and attnmt.seq2seq.trace's results
    bodies.py      request bodies read as strict UTF-8 JSON (422 for anything else)
    models.py      LoadedModel: a model, its lock, and ``run``: its work off the event loop, within the time limit;
                   model names (NAME=DIR)
    batching.py    Batcher: concurrent /translate requests decoded together, in chunks
    routes.py      the endpoints; the bounded answer
    middleware.py  the Host check, the arrival time, the request body limit (its size and its time)
    connections.py what uvicorn does before the app: connections, keep-alive, header size, JSON 400s
    app.py         create_app, the JSON errors, the explorer page; run_server

The command ``attnmt serve MODEL_DIR ...`` binds to 127.0.0.1 by default; see docs/http-api.md.
"""

from attnmt.serve.limits import ServerLimits

__all__ = ["ServerLimits", "create_app", "is_loopback", "run_server", "url_of"]


def __getattr__(name: str):
    # The app imports FastAPI, a third of a second: only when asked for, so that the command line
    # can read the defaults of ServerLimits without it.
    if name in __all__:
        from attnmt.serve import app

        return getattr(app, name)
    raise AttributeError(f"module 'attnmt.serve' has no attribute {name!r}")
