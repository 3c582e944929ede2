"""Load test of the HTTP server (`attnmt serve`): throughput, latency and correct answers under
concurrent clients, with dynamic batching off (one request at a time) and on.

    python benchmarks/load_test.py                       # the quick-start dates model (trained once)
    python benchmarks/load_test.py --model runs/bench-rnn-bahdanau/model   # Multi30k test sentences
    python benchmarks/load_test.py --model runs/de-en --sentences test.de --requests 320
    python benchmarks/load_test.py --url http://127.0.0.1:8000 --model runs/de-en --sentences test.de

Each request is one sentence whose answer is known: every sentence is first translated alone,
sequentially, in this process. For each setting (batching off, then on) the script starts
`attnmt serve` on a free loopback port, sends a fixed number of requests from 1 and from 32
concurrent clients, and reports requests/s, sentences/s, p50 and p99 latency, errors, lost answers
(no answer), wrong answers (another sentence's: reordered or mixed up) and answers that differ
from translating the sentence alone; then stops the server with SIGTERM and checks that it exits
with 0. With --url it drives a server already running instead (its batching as it was started).

Bounded: at most --requests requests and --max-seconds seconds per run; loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[1]
MULTI30K = REPO.parent / "shared" / "data" / "multi30k"
QUICKSTART = REPO / "runs" / "loadtest-quickstart"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--model",
        type=Path,
        help=f"trained model folder (default: the quick-start model, "
        f"trained into {QUICKSTART.relative_to(REPO)} if not there)",
    )
    p.add_argument(
        "--sentences",
        type=Path,
        help="one source sentence per line, plain or .gz (default: the "
        "Multi30k test set, or the quick-start test dates)",
    )
    p.add_argument("--url", help="a server already running on this machine, serving --model")
    p.add_argument("--requests", type=int, default=320, help="requests per run (default 320)")
    p.add_argument("--clients", default="1,32", help="concurrent clients of each run (default 1,32)")
    p.add_argument("--distinct", type=int, default=160, help="distinct sentences, sent in turn (default 160)")
    p.add_argument("--beam", type=int, help="beam size of the requests (default: the model's)")
    p.add_argument("--max-seconds", type=float, default=90, help="time limit of one run (default 90)")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads of the server (default 1: the other core parses HTTP and runs the clients)",
    )
    p.add_argument(
        "--serve-args", default="", help="more `attnmt serve` flags for the batching run, e.g. '--max-batch-wait 10'"
    )
    p.add_argument("--json", type=Path, help="also write the results to this file")
    args = p.parse_args(argv)
    args.clients = [int(c) for c in args.clients.split(",")]
    if args.url:
        host = urlsplit(args.url).hostname or ""
        from attnmt.serve import is_loopback

        if not is_loopback(host):
            p.error(f"--url must be on this machine (127.0.0.1, ::1 or localhost), not {host!r}")
        if not args.model:
            p.error("--url needs --model, the model it serves (to know the expected answers)")
    if not (1 <= args.requests <= 100_000 and all(1 <= c <= 256 for c in args.clients) and args.max_seconds > 0):
        p.error("need 1 <= --requests <= 100000, 1 <= clients <= 256 and --max-seconds > 0")
    return args


def quickstart_model() -> Path:
    """The quick-start dates model, trained once. (Not the Multi30k model by default: decoding a
    sentence alone with it takes 0.3 to 2 s here, so the runs without batching would take many
    minutes, and at 32 clients most of their requests would wait past the server's time limit.)"""
    if not (QUICKSTART / "model" / "last.safetensors").is_file():
        print(f"training the quick-start dates model into {QUICKSTART} (about a minute)", flush=True)
        subprocess.run([sys.executable, "-m", "attnmt.cli", "quickstart", "--dir", str(QUICKSTART)], check=True)
    return QUICKSTART / "model"


def read_sentences(args, model: Path, max_chars: int = 1000) -> list[str]:
    from attnmt.data.corpus import read_lines, read_tsv

    if args.sentences:
        lines = read_lines(args.sentences)
    elif (model.parent / "data" / "test.tsv").is_file():  # the quick-start layout
        lines = read_tsv(model.parent / "data" / "test.tsv").sources
    else:
        lines = read_lines(MULTI30K / "test_2016_flickr.de.gz")
    sentences = [line for line in lines if line.strip() and len(line) <= max_chars][: args.distinct]
    if not sentences:
        raise SystemExit("no sentences to send")
    return sentences


def expected_answers(model: Path, sentences: list[str], beam: int | None, threads: int) -> tuple[list[str], int, float]:
    """Each sentence translated alone, one after the other: (texts, beam used, sentences/s)."""
    import torch

    import attnmt

    translator = attnmt.load(model)
    torch.set_num_threads(threads)
    beam = beam or translator.config.decoding.beam
    start = time.perf_counter()
    texts = [translator.translate([s], beam=beam)[0].text for s in sentences]
    return texts, beam, len(sentences) / (time.perf_counter() - start)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model: Path | list[str], flags: list[str]) -> tuple[subprocess.Popen, str]:
    """`attnmt serve` of one model folder, or of several ("name=folder", as the CLI takes them)."""
    import httpx  # (not at the top: of the test extra, which main's check names if it is missing)

    port = free_port()
    models = [str(m) for m in model] if isinstance(model, list) else [str(model)]
    command = [
        sys.executable,
        "-m",
        "attnmt.cli",
        "serve",
        *models,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
        *flags,
    ]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the server exited with {server.returncode}: {' '.join(command)}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return server, url
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    server.kill()
    raise SystemExit("the server did not start within 120 s")


def stop_server(server: subprocess.Popen) -> int:
    """SIGTERM, as a service manager stops it: the exit status (0 after a graceful shutdown)."""
    server.send_signal(signal.SIGTERM)
    try:
        return server.wait(60)
    except subprocess.TimeoutExpired:
        server.kill()
        return server.wait()


async def run_load(
    url: str, sentences: list[str], expected: list[str], beam: int, clients: int, requests: int, max_seconds: float
) -> dict:
    """`requests` requests (request i sends sentence i mod len(sentences)) from `clients` concurrent
    clients, each sending its next request when it has the answer to its last."""
    import httpx

    todo = iter(range(requests))
    latencies, outcome = [], {"errors": 0, "lost": 0, "wrong": 0, "different": 0, "sent": 0}
    kinds = {}  # error kind (exception name or HTTP status) -> count
    stop_at = time.monotonic() + max_seconds

    async def client(http: httpx.AsyncClient):
        for i in todo:
            if time.monotonic() > stop_at:
                return
            sentence = sentences[i % len(sentences)]
            outcome["sent"] += 1
            start = time.perf_counter()
            try:
                response = await http.post("/translate", json={"text": sentence, "beam": beam, "attention": False})
            except httpx.HTTPError as error:
                outcome["errors"] += 1
                outcome["lost"] += 1
                kinds[type(error).__name__] = kinds.get(type(error).__name__, 0) + 1
                continue
            latencies.append(time.perf_counter() - start)
            if response.status_code != 200:
                outcome["errors"] += 1
                kinds[str(response.status_code)] = kinds.get(str(response.status_code), 0) + 1
                continue
            translations = response.json()["translations"]
            if len(translations) != 1:
                outcome["lost"] += 1
            elif translations[0]["source"] != sentence:
                outcome["wrong"] += 1
            elif translations[0]["candidates"][0]["text"] != expected[i % len(sentences)]:
                outcome["different"] += 1

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    # The server's own time limit (503) bounds each request: the client waits longer than it.
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=max_seconds + 60) as http:
        start = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(clients)))
        seconds = time.perf_counter() - start
    done = len(latencies)
    latencies.sort()
    return {
        "clients": clients,
        **outcome,
        "error_kinds": kinds,
        "answered": done,
        "seconds": round(seconds, 2),
        "requests_per_s": round(done / seconds, 1),
        "sentences_per_s": round(done / seconds, 1),
        "p50_ms": round(1000 * statistics.median(latencies), 1) if latencies else None,
        "p99_ms": round(1000 * latencies[min(done - 1, int(0.99 * done))], 1) if latencies else None,
    }


def runs_of_one_server(url: str, args, sentences, expected, beam) -> list[dict]:
    results = []
    for clients in args.clients:
        asyncio.run(run_load(url, sentences, expected, beam, 1, 3, 30))  # warm-up
        result = asyncio.run(run_load(url, sentences, expected, beam, clients, args.requests, args.max_seconds))
        print(json.dumps(result), flush=True)
        results.append(result)
    return results


def table(rows: list[dict]) -> str:
    lines = [
        "| batching | clients | requests | s | requests/s | sentences/s | p50 ms | p99 ms | errors | lost | "
        "wrong | differ from alone |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['batching']} | {r['clients']} | {r['answered']}/{r['sent']} | {r['seconds']} | "
            f"{r['requests_per_s']} | {r['sentences_per_s']} | {r['p50_ms']} | {r['p99_ms']} | "
            f"{r['errors']} | {r['lost']} | {r['wrong']} | {r['different']} |"
        )
    return "\n".join(lines)


def check_requirements(args):
    """httpx (the clients), the model and the sentences, checked before the first translation."""
    from requirements import check, module, path, trained_model

    multi30k = args.model and not args.sentences and not (args.model.parent / "data" / "test.tsv").is_file()
    check(
        "benchmarks/load_test.py",
        module("httpx", "the HTTP clients"),
        trained_model(args.model, "the model to serve (--model)") if args.model else None,
        path(args.sentences, "the sentences to send (--sentences)") if args.sentences else None,
        path(MULTI30K / "test_2016_flickr.de.gz", "the sentences to send (Multi30k test_2016)") if multi30k else None,
    )


def main(argv=None) -> int:
    args = parse_args(argv)
    check_requirements(args)
    model = (args.model or quickstart_model()).resolve()
    sentences = read_sentences(args, model)
    print(f"model {model}; {len(sentences)} distinct sentences; translating each alone first", flush=True)
    expected, beam, alone_per_s = expected_answers(model, sentences, args.beam, args.threads)
    print(f"beam {beam}; alone, in process: {alone_per_s:.1f} sentences/s", flush=True)

    rows, exits = [], {}
    if args.url:
        rows += [{"batching": "as started", **r} for r in runs_of_one_server(args.url, args, sentences, expected, beam)]
    else:
        for batching, flags in (("off", ["--no-batching"]), ("on", args.serve_args.split())):
            server, url = start_server(model, ["--threads", str(args.threads), *flags])
            try:
                rows += [{"batching": batching, **r} for r in runs_of_one_server(url, args, sentences, expected, beam)]
            finally:
                exits[batching] = stop_server(server)
    print("\n" + table(rows))
    by = {(r["batching"], r["clients"]): r for r in rows}
    summary = {
        "model": str(model),
        "beam": beam,
        "distinct_sentences": len(sentences),
        "server_threads": args.threads,
        "alone_in_process_sentences_per_s": round(alone_per_s, 1),
        "runs": rows,
        "server_exit": exits,
    }
    if ("on", 32) in by and ("off", 32) in by:
        summary["speedup_32_clients"] = round(by["on", 32]["requests_per_s"] / by["off", 32]["requests_per_s"], 2)
        print(f"\nthroughput at 32 clients, batching on / off: {summary['speedup_32_clients']}x")
    if exits:
        print(f"server exit status after SIGTERM: {exits}")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    bad = sum(r["errors"] + r["lost"] + r["wrong"] for r in rows) + sum(code != 0 for code in exits.values())
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
