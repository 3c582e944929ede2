"""Mixed load test of the HTTP server: one `attnmt serve` process serving three models at once,
the quick-start dates model (text), a speech model and a sentence-pair model, under concurrent
clients sending text /translate, audio /translate (base64 sound files) and /classify requests.

    python benchmarks/load_test_mixed.py                   # the three quick-start models (trained once)
    python benchmarks/load_test_mixed.py --clients 24 --requests 900 --json mixed.json

Each request's answer is known: every text, sound file and sentence pair (held-out data of the
quick starts) is first translated, transcribed or classified alone, one after the other, in this
process. The server (batching as by default) is started on a free loopback port; the clients
send requests in turn (text, audio, pair, text, ...), each its next when it has the answer to its
last; for each kind the script reports requests/s, p50 and p99 latency, errors (non-200), 5xx
among them, lost answers (no answer), wrong answers (another request's) and answers that differ
from the one computed alone. Then it stops the server with SIGTERM and checks that it exits with 0.
The helpers (starting, stopping the server) are those of benchmarks/load_test.py.

Bounded: at most --requests requests and --max-seconds seconds; loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load_test import REPO, quickstart_model, start_server, stop_server  # noqa: E402

SPEECH = REPO / "runs" / "loadtest-speech"
PAIRS = REPO / "runs" / "loadtest-pairs"
KINDS = ("text", "audio", "pair")


@dataclass
class Item:
    """One request to send, with what its answer must say: ``identity`` names the request in the
    answer (the source text, the encoder states of the audio, the pair's tokens), ``answer`` is
    the answer computed alone."""

    kind: str
    path: str
    body: dict
    identity: object
    answer: object


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=900, help="requests in all, the kinds in turn (default 900)")
    p.add_argument("--clients", type=int, default=24, help="concurrent clients (default 24)")
    p.add_argument("--distinct", type=int, default=40, help="distinct texts, sound files and pairs (default 40 each)")
    p.add_argument("--max-seconds", type=float, default=240, help="time limit of the run (default 240)")
    p.add_argument("--threads", type=int, default=1, help="torch threads of the server (default 1)")
    p.add_argument("--json", type=Path, help="also write the results to this file")
    args = p.parse_args(argv)
    if not (1 <= args.requests <= 100_000 and 1 <= args.clients <= 256 and 1 <= args.distinct and args.max_seconds > 0):
        p.error("need 1 <= --requests <= 100000, 1 <= --clients <= 256, --distinct >= 1 and --max-seconds > 0")
    return args


def trained(folder: Path, flag: str, minutes: str) -> Path:
    """The model of `attnmt quickstart <flag> --dir folder`, trained once."""
    if not (folder / "model" / "last.safetensors").is_file():
        print(f"training `attnmt quickstart {flag}` into {folder} ({minutes})", flush=True)
        subprocess.run([sys.executable, "-m", "attnmt.cli", "quickstart", flag, "--dir", str(folder)], check=True)
    return folder / "model"


def text_items(model: Path, distinct: int) -> list[Item]:
    import attnmt
    from attnmt.data.corpus import read_tsv

    translator = attnmt.load(model)
    beam = translator.config.decoding.beam
    sources = read_tsv(model.parent / "data" / "test.tsv").sources[:distinct]
    return [
        Item(
            "text",
            "/translate",
            {"model": "dates", "text": s, "beam": beam, "attention": False},
            s,
            translator.translate([s], beam=beam)[0].text,
        )
        for s in sources
    ]


def audio_items(model: Path, distinct: int) -> list[Item]:
    import attnmt
    from attnmt.speech.audio import read_speech_tsv

    recognizer = attnmt.load(model)
    beam = recognizer.config.decoding.beam
    tsv = model.parent / "data" / "test.tsv"
    items = []
    for path in read_speech_tsv(tsv)[0][:distinct]:
        data = (tsv.parent / path).read_bytes()
        [alone] = recognizer.transcribe([data], beam=beam)
        body = {"model": "speech", "audio": base64.b64encode(data).decode("ascii"), "beam": beam, "attention": False}
        # The answer's source is "audio" for every file: its encoder states (their start times) name it.
        items.append(Item("audio", "/translate", body, alone.source_tokens, alone.text))
    return items


def pair_items(model: Path, distinct: int) -> list[Item]:
    import attnmt
    from attnmt.data.corpus import read_tsv

    classifier = attnmt.load(model)
    corpus = read_tsv(model.parent / "data" / "test.tsv")
    pairs = list(zip(corpus.sources, corpus.targets))[:distinct]
    items = []
    for premise, hypothesis in pairs:
        [alone] = classifier.classify([(premise, hypothesis)])
        items.append(
            Item(
                "pair",
                "/classify",
                {"model": "pairs", "premise": premise, "hypothesis": hypothesis},
                (alone.premise_tokens, alone.hypothesis_tokens),
                (alone.label, alone.probabilities),
            )
        )
    return items


def answer_of(kind: str, body: dict):
    """(identity, answer) of a 200 answer, as Item has them; None when it holds no answer."""
    if kind == "pair":
        return (body["premise_tokens"], body["hypothesis_tokens"]), (body["label"], body["probabilities"])
    translations = body["translations"]
    if len(translations) != 1:
        return None
    t = translations[0]
    return (t["source"] if kind == "text" else t["source_tokens"]), t["candidates"][0]["text"]


def same_answer(kind: str, got, expected) -> bool:
    if kind != "pair":
        return got == expected
    # Probabilities may move in their last digits between a lone run and the server's.
    (label, probabilities), (expected_label, expected_probabilities) = got, expected
    return (
        label == expected_label
        and probabilities.keys() == expected_probabilities.keys()
        and all(abs(probabilities[k] - expected_probabilities[k]) <= 1e-4 for k in probabilities)
    )


def judge(item: Item, body: dict, others: list[Item]) -> str:
    """ok, lost (no answer), wrong (the answer of another request) or different (this request's
    answer, but not the one computed alone)."""
    found = answer_of(item.kind, body)
    if found is None:
        return "lost"
    identity, answer = found
    if identity != item.identity:
        return "wrong"
    if same_answer(item.kind, answer, item.answer):
        return "ok"
    # Two sound files may last as long (same encoder states): another's transcript is then wrong.
    if any(o is not item and o.identity == identity and same_answer(o.kind, answer, o.answer) for o in others):
        return "wrong"
    return "different"


def new_counts() -> dict:
    return {
        "sent": 0,
        "answered": 0,
        "errors": 0,
        "5xx": 0,
        "lost": 0,
        "wrong": 0,
        "different": 0,
        "error_kinds": {},
        "latencies": [],
    }


async def run_mixed(
    url: str, mix: list[Item], by_kind: dict[str, list[Item]], clients: int, requests: int, max_seconds: float
) -> tuple[dict, float]:
    """`requests` requests (request i sends mix[i mod len(mix)]) from `clients` concurrent clients."""
    import httpx  # (not at the top: of the test extra, which main's check names if it is missing)

    todo = iter(range(requests))
    counts = {kind: new_counts() for kind in by_kind}
    stop_at = time.monotonic() + max_seconds

    async def client(http: httpx.AsyncClient):
        for i in todo:
            if time.monotonic() > stop_at:
                return
            item = mix[i % len(mix)]
            c = counts[item.kind]
            c["sent"] += 1
            start = time.perf_counter()
            try:
                response = await http.post(item.path, json=item.body)
            except httpx.HTTPError as error:
                c["errors"] += 1
                c["lost"] += 1
                c["error_kinds"][type(error).__name__] = c["error_kinds"].get(type(error).__name__, 0) + 1
                continue
            c["latencies"].append(time.perf_counter() - start)
            if response.status_code != 200:
                c["errors"] += 1
                c["5xx"] += response.status_code >= 500
                c["error_kinds"][str(response.status_code)] = c["error_kinds"].get(str(response.status_code), 0) + 1
                continue
            c["answered"] += 1
            verdict = judge(item, response.json(), by_kind[item.kind])
            if verdict != "ok":
                c[verdict] += 1

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=max_seconds + 60) as http:
        start = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(clients)))
        seconds = time.perf_counter() - start
    return counts, seconds


def summary_row(kind: str, c: dict, seconds: float) -> dict:
    latencies = sorted(c.pop("latencies"))
    n = len(latencies)
    return {
        "kind": kind,
        **c,
        "requests_per_s": round(c["answered"] / seconds, 1),
        "p50_ms": round(1000 * statistics.median(latencies), 1) if latencies else None,
        "p99_ms": round(1000 * latencies[min(n - 1, int(0.99 * n))], 1) if latencies else None,
    }


def table(rows: list[dict]) -> str:
    lines = [
        "| kind | answered/sent | requests/s | p50 ms | p99 ms | errors | 5xx | lost | wrong | differ from alone |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['kind']} | {r['answered']}/{r['sent']} | {r['requests_per_s']} | {r['p50_ms']} | "
            f"{r['p99_ms']} | {r['errors']} | {r['5xx']} | {r['lost']} | {r['wrong']} | {r['different']} |"
        )
    return "\n".join(lines)


def interleaved(by_kind: dict[str, list[Item]]) -> list[Item]:
    """The items of each kind in turn: text 1, audio 1, pair 1, text 2, ..."""
    longest = max(len(items) for items in by_kind.values())
    return [items[i % len(items)] for i in range(longest) for items in by_kind.values()]


def main(argv=None) -> int:
    args = parse_args(argv)
    from requirements import check, module, program

    check(
        "benchmarks/load_test_mixed.py",
        module("httpx", "the HTTP clients"),
        program("espeak-ng", "synthesizes the speech quick start's corpus", apt="espeak-ng")
        if not (SPEECH / "model" / "last.safetensors").is_file()
        else None,
    )
    import torch

    models = {
        "dates": quickstart_model().resolve(),
        "speech": trained(SPEECH, "--speech", "about 4 minutes").resolve(),
        "pairs": trained(PAIRS, "--pairs", "about 2 minutes").resolve(),
    }
    torch.set_num_threads(args.threads)
    print("computing each answer alone first", flush=True)
    by_kind = {
        "text": text_items(models["dates"], args.distinct),
        "audio": audio_items(models["speech"], args.distinct),
        "pair": pair_items(models["pairs"], args.distinct),
    }
    mix = interleaved(by_kind)

    server, url = start_server([f"{name}={path}" for name, path in models.items()], ["--threads", str(args.threads)])
    try:
        asyncio.run(run_mixed(url, mix, by_kind, 1, len(by_kind), 60))  # warm-up: one of each
        counts, seconds = asyncio.run(run_mixed(url, mix, by_kind, args.clients, args.requests, args.max_seconds))
    finally:
        exit_status = stop_server(server)
    everything = new_counts()
    for c in counts.values():
        for key, value in c.items():
            if key != "error_kinds":
                everything[key] += value
        for name, n in c["error_kinds"].items():
            everything["error_kinds"][name] = everything["error_kinds"].get(name, 0) + n
    rows = [summary_row(kind, c, seconds) for kind, c in (*counts.items(), ("all", everything))]
    total = rows[-1]
    print(f"\n{args.clients} clients, {seconds:.1f} s\n" + table(rows))
    print(f"server exit status after SIGTERM: {exit_status}")
    if args.json:
        summary = {
            "models": {k: str(v) for k, v in models.items()},
            "clients": args.clients,
            "seconds": round(seconds, 2),
            "server_threads": args.threads,
            "rows": rows,
            "server_exit": exit_status,
        }
        args.json.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return 1 if total["errors"] + total["lost"] + total["wrong"] or exit_status != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
