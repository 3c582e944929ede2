"""The worst /translate requests the HTTP server accepts with its limits: how long each holds the
model, and how large its answer is (issue 17, point 11).

    python benchmarks/worst_request.py --untrained            # the worst case: see below
    python benchmarks/worst_request.py --model runs/fr-en     # a trained model
    python benchmarks/worst_request.py --untrained --max-work 131072 --timeout 60   # other limits

Each text is French Multi30k test sentences run together up to the server's character limit, cut
to its subword token limit. The requests go through the whole application (create_app, FastAPI's
test client: everything but the socket), one at a time, with the server's default limits unless
given, and with a time limit far above them (--timeout) so that they run to the end:

    issue 17      max_sentences texts, beam = n_best = max_beam: the request of the issue (64 texts
                  of 900 characters, beam 16, n-best 16), which held the model for 30 s
    widest beam   beam = n_best = max_beam, as many full texts as max_work allows
    most texts    as many full texts as max_work allows (at most max_sentences), with the largest beam
                  that allows as many, n_best = beam

each with and without the attention matrices. --untrained makes (once) a model of the default
config (Bahdanau, BPE 8000, 12 M parameters) trained for one step: it ends no sentence before its
length limit (1.5 x the source + 10 tokens), so every request does the most work it can, more than
any trained model of that size. Timings depend on the machine and on its load: run alone. "CPU s"
is the CPU time of the process (all its threads): on a busy machine, CPU s / threads estimates the
time it would take alone.
"""

from __future__ import annotations

import argparse
import gzip
import os
import subprocess
import sys
import time
import warnings
from dataclasses import fields
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MULTI30K = REPO.parent / "shared" / "data" / "multi30k"
UNTRAINED = REPO / "runs" / "worst-request"


def parse_args(argv=None) -> argparse.Namespace:
    from attnmt.serve import ServerLimits

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    model = p.add_mutually_exclusive_group(required=True)
    model.add_argument("--model", type=Path, help="a trained model folder")
    model.add_argument("--untrained", action="store_true", help=f"the worst case (made once in {UNTRAINED})")
    p.add_argument("--timeout", type=float, default=600, help="the server's time limit here (default 600 s)")
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    for f in fields(ServerLimits):  # every limit of the server, with its default
        if f.name not in ("timeout", "batch_wait"):
            p.add_argument(f"--{f.name.replace('_', '-')}", type=int, default=f.default)
    return p.parse_args(argv)


def untrained_model() -> Path:
    folder = UNTRAINED / "model"
    if not (folder / "best.safetensors").is_file():
        UNTRAINED.mkdir(parents=True, exist_ok=True)
        (UNTRAINED / "config.yaml").write_text(
            "experiment_dir: model\n"
            f"data:\n  train: {{src: {MULTI30K / 'train.fr.gz'}, tgt: {MULTI30K / 'train.en.gz'}}}\n"
            "  subwords: {type: bpe, vocab_size: 8000, joint: true}\n"
            "model: {attention: bahdanau}\n"
            "training: {max_steps: 1, validate_every: 1000}\n",
            encoding="utf-8",
        )
        subprocess.run(
            [sys.executable, "-m", "attnmt.cli", "train", str(UNTRAINED / "config.yaml"), "--no-progress"], check=True
        )
    return folder


def long_texts(translator, limits, n: int) -> list[str]:
    """``n`` texts of test sentences run together, each as long as the character and token limits allow."""
    with gzip.open(MULTI30K / "test_2016_flickr.fr.gz", "rt", encoding="utf-8") as f:
        sentences = [line.strip() for line in f if line.strip()]
    texts, i = [], 0
    while len(texts) < n:
        words = []
        while len(" ".join(words)) < limits.max_chars:
            words += sentences[i % len(sentences)].split()
            i += 1
        text = " ".join(words)[: limits.max_chars]
        while len(translator.src_subwords.encode([text])[0]) > limits.max_tokens:
            text = text[:-10]
        texts.append(text)
    return texts


def shapes(limits, tokens: int) -> dict[str, tuple[int, int]]:
    """name -> (texts, beam) of each worst request; ``tokens``: subword tokens of a full text."""
    from attnmt.serve.limits import work

    def most(beam: int) -> int:  # full texts within max_work at this beam
        return max(1, min(limits.max_sentences, limits.max_work // work([tokens], beam)))

    most_texts_beam = max([b for b in range(1, limits.max_beam + 1) if most(b) == most(1)])
    return {
        "issue 17": (limits.max_sentences, limits.max_beam),
        "widest beam": (most(limits.max_beam), limits.max_beam),
        "most texts": (most(1), most_texts_beam),
    }


def main(argv=None):
    args = parse_args(argv)
    from requirements import check, files, module, trained_model

    names = ["test_2016_flickr.fr.gz"]  # the texts; and the corpus of the untrained model's subwords
    if args.untrained and not (UNTRAINED / "model" / "best.safetensors").is_file():
        names += ["train.fr.gz", "train.en.gz"]
    check(
        "benchmarks/worst_request.py",
        module("httpx", "FastAPI's test client sends the requests"),
        trained_model(args.model, "the model to serve (--model)") if args.model else None,
        files(MULTI30K, names, "Multi30k"),
    )
    import torch

    from attnmt.serve import ServerLimits, create_app

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    torch.set_num_threads(args.threads)
    model = untrained_model() if args.untrained else args.model
    limits = ServerLimits(**{f.name: getattr(args, f.name) for f in fields(ServerLimits) if f.name != "batch_wait"})
    app = create_app([model], limits)
    translator = next(iter(app.state.models.values())).translator
    texts = long_texts(translator, limits, limits.max_sentences)
    tokens = max(len(ids) for ids in translator.src_subwords.encode(texts))
    print(
        f"model {model}: {sum(p.numel() for p in translator.model.parameters()):,} parameters; texts of "
        f"{max(map(len, texts))} characters, {tokens} subword tokens; max_work {limits.max_work}, "
        f"max_answer_values {limits.max_answer_values}, {args.threads} threads; load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    print(
        f"{'request':<12} {'texts':>5} {'beam':>4} {'work':>7} {'attention':>9} {'status':>6} {'seconds':>8} "
        f"{'CPU s':>6} {'answer MB':>9}  detail"
    )
    from attnmt.serve.limits import work

    with TestClient(app, base_url="http://localhost") as client:
        for name, (n, beam) in shapes(limits, tokens).items():
            for attention in (True, False):
                body = {"text": texts[:n], "beam": beam, "n_best": beam, "attention": attention}
                start, cpu = time.perf_counter(), time.process_time()
                response = client.post("/translate", json=body)
                seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
                detail = response.json().get("detail", "") if response.status_code != 200 else ""
                print(
                    f"{name:<12} {n:>5} {beam:>4} {work([tokens] * n, beam):>7} {str(attention):>9} "
                    f"{response.status_code:>6} {seconds:>8.1f} {cpu:>6.1f} {len(response.content) / 1e6:>9.2f}  "
                    f"{detail[:90]}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
