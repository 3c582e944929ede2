"""A pretrained Marian model (OPUS-MT's shape) decoded three ways: attnmt on the imported model
(`attnmt import`), transformers' ``generate`` on the Marian model itself, and CTranslate2 on the
imported model exported (`attnmt export --ct2`). Issue 52, point 5.

    python benchmarks/hub.py                      # builds the model once (runs/hub-bench/), then measures
    python benchmarks/hub.py --model DIR          # a folder that save_pretrained wrote (Helsinki-NLP/opus-mt-de-en)
    python benchmarks/hub.py --rounds 5 --limit 200 --beams 1
    flock -x LOCKFILE python benchmarks/hub.py    # on a shared machine: nothing else beside the timings

The model. The hub cannot be reached from every machine, so by default the model has the shape of
Helsinki-NLP/opus-mt-de-en (d_model 512, 6 + 6 layers, 8 heads, feed-forward 2,048, swish,
embeddings scaled by sqrt(d_model), one vocabulary for both sides, tied embeddings), random weights,
and sentencepiece models of --pieces pieces each trained on Multi30k's train.de and train.en (the
vocabulary is their union, as OPUS-MT's vocab.json is its two models'), trained --steps steps on
Multi30k train German -> English (batches of 64 pairs, AdamW, label smoothing 0.1) so that its
outputs end as a trained model's do: an untrained one loops to the length limit; after 600 steps
greedy outputs of val average 14.4 pieces against the references' 14.0, none at the limit, and BLEU
on test_2016 is 23 greedy, 25 beam 4 (the sentencepiece models: 7,997 and 7,927 pieces, 15,258 in
vocab.json). Built once into --cache (git-ignored runs/; 86 minutes on 2 shared cores of an AMD
EPYC), with what it was built from and its checks in built.json; a rerun with the same settings
reuses it. final_logits_bias, which training leaves at 0, is 0 there but -100 for <pad>: a Marian
model never writes its pad (generate forbids it with bad_words_ids after the log-softmax, attnmt
leaves it out of the softmax; with p(pad) = 0 both are the same). --model DIR benchmarks a real
model instead (the folder of MarianMTModel's and MarianTokenizer's save_pretrained).

Each run imports the Marian folder afresh (`attnmt import`, in a temporary folder) and exports that
to CTranslate2 (`attnmt export --ct2`, float32), so what is measured is today's import.

The same search for all three: the first --limit sentences of test_2016_flickr (German -> English),
batch --batch (64) sentences of similar lengths (attnmt and CTranslate2 sort by length themselves;
generate's batches are cut the same way here: sorted by source length), greedy and beam 4, no length
penalty, one length limit for every sentence (--max-length tokens, </s> included: attnmt's
max_length_ratio ~0 and max_length_offset N, generate's max_length N + 1 after the decoder's start,
CTranslate2's max_decoding_length N - 1 as it writes no </s>), generate with early_stopping False
(its beam stops when no live hypothesis can beat the finished ones, whose best attnmt's search
returns too: the same outputs), <pad> forbidden, and at the limit only </s> allowed with its own
log-probability (attnmt's ended_at_limit; generate's forced_eos_token_id would give it 0).
--threads (2) threads for each: torch.set_num_threads and attnmt's own setting
(attnmt.core.threads.choose), CTranslate2's intra_threads, inter_threads 1. attnmt is imported
before torch, so GNU OpenMP's threads wait as in attnmt's commands, for generate too (one process).

Timed: text in, text out (tokenization, search, detokenization), the model loaded before. --rounds
rounds, the systems taking turns (their order rotated each round), after one untimed batch each; the
median of the rounds is reported. Figures: sentences/s and target tokens/s (the outputs' pieces, </s>
not counted), the ratios attnmt / transformers and attnmt / CTranslate2, how many outputs are the
same pieces as attnmt's, the mean output length, how many outputs reach the limit, BLEU (sacreBLEU
13a) against the references, and the CPU seconds of this process per second of the timing (at most
--threads; the log gives each round's, and what other processes took of the machine meanwhile, from
/proc/stat: on a shared or virtual machine a slow round shows there). Nothing is written into the
repository but --cache.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import attnmt  # noqa: F401 (before torch, so that OpenMP's threads wait as in attnmt's commands)
import torch

REPO = Path(__file__).resolve().parents[1]
MULTI30K = REPO.parent / "shared" / "data" / "multi30k"
CACHE = REPO / "runs" / "hub-bench"

# Helsinki-NLP/opus-mt-de-en's config.json, but for the vocabulary
OPUS_SHAPE = {
    "d_model": 512,
    "encoder_layers": 6,
    "decoder_layers": 6,
    "encoder_attention_heads": 8,
    "decoder_attention_heads": 8,
    "encoder_ffn_dim": 2048,
    "decoder_ffn_dim": 2048,
    "activation_function": "swish",
    "scale_embedding": True,
    "share_encoder_decoder_embeddings": True,
    "tie_word_embeddings": True,
    "max_position_embeddings": 512,
    "dropout": 0.1,
    "attention_dropout": 0.0,
    "activation_dropout": 0.0,
    "init_std": 0.02,
}
TRAINING_FILES = ["train.de.gz", "train.en.gz", "val.de.gz", "val.en.gz"]  # of Multi30k, for the built model
BUILD_BATCH = 64  # training sentences a step
BUILD_MAX_PIECES = 64  # training pairs with longer sides left out
CHECK_SENTENCES = 64  # val sentences decoded greedy at each check of the build


def log(message: str):
    print(message, file=sys.stderr, flush=True)


def cpu() -> str:
    """The CPU as lscpu names it (/proc/cpuinfo's model name), with its vector extensions."""
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    name = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    flags = set((re.search(r"^flags\s*:\s*(.+)$", text, re.M) or [None, ""])[1].split())
    wide = [f for f in ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8") if f in flags]
    return f"{name[1] if name else 'unknown CPU'} ({os.cpu_count()} CPUs; {', '.join(wide) or 'no AVX2'})"


# ---------------------------------------------------------------- the model of OPUS-MT's shape


def multi30k(name: str) -> list[str]:
    from attnmt.data.corpus import read_lines

    return [line.strip() for line in read_lines(MULTI30K / f"{name}.gz")]


def train_spm(folder: Path, name: str, lines: list[str], pieces: int, threads: int) -> Path:
    """A unigram sentencepiece model of at most ``pieces`` pieces (fewer where the corpus has fewer:
    Multi30k's English gives some 7,900 of 8,000), sentencepiece's own ids (as Marian's: unk 0, bos 1,
    eos 2), saved as Marian names it (source.spm, target.spm)."""
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=str(folder / name),
        vocab_size=pieces,
        hard_vocab_limit=False,
        model_type="unigram",
        character_coverage=1.0,
        num_threads=threads,
        minloglevel=2,
    )
    (folder / f"{name}.model").replace(folder / f"{name}.spm")
    (folder / f"{name}.vocab").unlink()
    return folder / f"{name}.spm"


def spm_pieces(path: Path) -> list[str]:
    """The pieces of a sentencepiece model, its control and unknown pieces left out."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(path))
    return [sp.id_to_piece(i) for i in range(len(sp)) if not (sp.is_control(i) or sp.is_unknown(i))]


def shared_vocabulary(models: list[Path]) -> dict[str, int]:
    """vocab.json of OPUS-MT's layout: </s> 0, <unk> 1, the pieces of the models in turn (each once), <pad> last."""
    vocab = {"</s>": 0, "<unk>": 1}
    for path in models:
        for piece in spm_pieces(path):
            vocab.setdefault(piece, len(vocab))
    vocab["<pad>"] = len(vocab)
    return vocab


def build(cache: Path, settings: dict, threads: int) -> Path:
    """The Marian folder of OPUS-MT's shape in ``cache``/marian, built unless built.json says it was
    built with ``settings``."""
    built = cache / "built.json"
    if built.is_file() and json.loads(built.read_text())["settings"] == settings:
        log(f"model: {cache / 'marian'} (built before with the same settings; --rebuild to build it again)")
        return cache / "marian"
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    started = time.perf_counter()
    work = cache / "building"
    if work.exists():
        import shutil

        shutil.rmtree(work)
    work.mkdir(parents=True)
    de, en = multi30k("train.de"), multi30k("train.en")
    source = train_spm(work, "source", de, settings["pieces"], threads)
    target = train_spm(work, "target", en, settings["pieces"], threads)
    vocab = shared_vocabulary([source, target])
    (work / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    tokenizer = MarianTokenizer(source_spm=str(source), target_spm=str(target), vocab=str(work / "vocab.json"))
    sizes = [len(spm_pieces(path)) for path in (source, target)]
    log(f"sentencepiece: {sizes[0]:,} and {sizes[1]:,} pieces, {len(vocab):,} in the shared vocabulary")
    pad = vocab["<pad>"]
    config = MarianConfig(
        **OPUS_SHAPE,
        vocab_size=len(vocab),
        decoder_vocab_size=len(vocab),
        pad_token_id=pad,
        decoder_start_token_id=pad,
        eos_token_id=0,
        forced_eos_token_id=0,
    )
    torch.manual_seed(settings["seed"])
    model = MarianMTModel(config)
    history = train(model, tokenizer, de, en, settings)
    with torch.no_grad():
        model.final_logits_bias.zero_()
        model.final_logits_bias[0, pad] = -100.0  # never written (see the module's docstring)
    model.generation_config.update(num_beams=4, max_length=512, bad_words_ids=[[pad]])
    out = work / "marian"
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    final = cache / "marian"
    if final.exists():
        import shutil

        shutil.rmtree(final)
    out.rename(final)
    minutes = (time.perf_counter() - started) / 60
    record = {"settings": settings, "shape": OPUS_SHAPE, "vocabulary": len(vocab), "minutes": round(minutes, 1)}
    built.write_text(json.dumps({**record, "training": history}, indent=1) + "\n")
    log(f"model built in {minutes:.1f} min: {final}")
    return final


def train(model, tokenizer, de: list[str], en: list[str], settings: dict) -> list[dict]:
    """``settings['steps']`` steps of AdamW on random batches of Multi30k train (warm-up, then the
    inverse square root), with greedy checks on val every ``settings['check_every']`` steps."""
    sources = tokenizer(de)["input_ids"]
    targets = tokenizer(text_target=en)["input_ids"]
    pairs = [i for i in range(len(de)) if max(len(sources[i]), len(targets[i])) <= BUILD_MAX_PIECES]
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings["lr"], betas=(0.9, 0.98), weight_decay=0.0)
    warmup = settings["warmup"]
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, math.sqrt(warmup / (s + 1)))
    )
    draw = torch.Generator().manual_seed(settings["seed"])
    pad = model.config.pad_token_id
    val_de, val_en = multi30k("val.de")[:CHECK_SENTENCES], multi30k("val.en")[:CHECK_SENTENCES]
    history, losses, started = [], [], time.perf_counter()
    for step in range(1, settings["steps"] + 1):
        model.train()
        rows = [pairs[i] for i in torch.randint(0, len(pairs), (BUILD_BATCH,), generator=draw).tolist()]
        src = padded([sources[i] for i in rows], pad)
        labels = padded([targets[i] for i in rows], -100)
        decoder_in = torch.cat(
            [torch.full((len(rows), 1), pad), labels[:, :-1].masked_fill(labels[:, :-1] < 0, pad)], 1
        )
        logits = model(input_ids=src, attention_mask=src != pad, decoder_input_ids=decoder_in).logits
        loss = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), labels.flatten(), ignore_index=-100, label_smoothing=0.1
        )
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        if step % settings["check_every"] == 0 or step == settings["steps"]:
            lengths, at_limit = greedy_check(model, tokenizer, val_de, 128)
            entry = {
                "step": step,
                "loss": round(statistics.mean(losses), 3),
                "seconds": round(time.perf_counter() - started),
                "val_mean_length": round(statistics.mean(lengths), 1),
                "val_at_limit": at_limit,
            }
            history.append(entry)
            losses = []
            reference = statistics.mean(len(t) - 1 for t in tokenizer(text_target=val_en)["input_ids"])
            log(
                f"  step {step}: loss {entry['loss']}, {entry['seconds']} s; greedy on {len(val_de)} val sentences: "
                f"mean length {entry['val_mean_length']} pieces (references {reference:.1f}), {at_limit} at the limit"
            )
    model.eval()
    return history


def padded(rows: list[list[int]], value: int) -> torch.Tensor:
    out = torch.full((len(rows), max(map(len, rows))), value)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row)
    return out


def greedy_check(model, tokenizer, texts: list[str], limit: int) -> tuple[list[int], int]:
    """The lengths (pieces, </s> not counted) of generate's greedy outputs, and how many reach ``limit``."""
    model.eval()
    inputs = tokenizer(texts, return_tensors="pt", padding=True)
    with torch.inference_mode():
        out = model.generate(**inputs, num_beams=1, do_sample=False, max_length=limit + 1)
    lengths = [ended(row, model.config.eos_token_id)[1] for row in out[:, 1:].tolist()]
    return lengths, sum(length >= limit - 1 for length in lengths)


def ended(row: list[int], eos: int) -> tuple[list[int], int]:
    """The ids of an output before its </s> (if any), and their number."""
    row = row[: row.index(eos)] if eos in row else row
    return row, len(row)


# ---------------------------------------------------------------- the three systems


class Outputs:
    """One system's outputs: texts, and each output's pieces (</s> left out)."""

    def __init__(self, texts: list[str], pieces: list[list[str]]):
        self.texts, self.pieces = texts, pieces

    @property
    def tokens(self) -> int:
        return sum(map(len, self.pieces))


def attnmt_system(imported: Path, limit: int, batch: int):
    translator = attnmt.load(imported)
    # one length limit for every sentence, as generate's max_length
    translator.set_decoding(length_penalty=0.0, max_length_ratio=1e-6, max_length_offset=limit)

    def translate(texts: list[str], beam: int) -> Outputs:
        out = translator.translate(texts, beam=beam, batch_size=batch)
        return Outputs([t.text for t in out], [[p for p in t.candidates[0].tokens if p != "</s>"] for t in out])

    return translate, translator


def beamed(beam: int) -> dict:
    """generate's settings of beam search: no length penalty, and early_stopping False (see the docstring)."""
    return {"length_penalty": 0.0, "early_stopping": False} if beam > 1 else {}


class EndAtLimit:
    """generate's logits processor: at the last step max_length allows, every token but </s> at
    -inf, </s>'s own log-probability kept (attnmt's ended_at_limit)."""

    def __init__(self, max_length: int, eos: int):
        self.max_length, self.eos = max_length, eos

    def __call__(self, input_ids, scores):
        if input_ids.shape[-1] != self.max_length - 1:
            return scores
        only_eos = torch.full_like(scores, float("-inf"))
        only_eos[:, self.eos] = scores[:, self.eos]
        return only_eos


def transformers_system(folder: Path, limit: int, batch: int):
    from transformers import LogitsProcessorList, MarianMTModel, MarianTokenizer

    model = MarianMTModel.from_pretrained(folder).eval()
    tokenizer = MarianTokenizer.from_pretrained(folder)
    eos, start = model.config.eos_token_id, model.config.decoder_start_token_id
    settings = dict(
        do_sample=False,
        max_length=limit + 1,  # (after the decoder's start)
        min_length=0,
        num_return_sequences=1,
        forced_eos_token_id=None,
        bad_words_ids=[[start]],  # the target's <pad>
        renormalize_logits=False,
        repetition_penalty=1.0,
        no_repeat_ngram_size=0,
        logits_processor=LogitsProcessorList([EndAtLimit(limit + 1, eos)]),
    )

    def translate(texts: list[str], beam: int) -> Outputs:
        ids = tokenizer(texts)["input_ids"]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        rows: list[list[int]] = [[] for _ in texts]
        for first in range(0, len(order), batch):
            indices = order[first : first + batch]
            inputs = tokenizer.pad({"input_ids": [ids[i] for i in indices]}, return_tensors="pt")
            with torch.inference_mode():
                out = model.generate(**inputs, num_beams=beam, **settings, **beamed(beam))
            for i, row in zip(indices, out[:, 1:].tolist()):
                rows[i] = ended(row, eos)[0]
        return Outputs(
            tokenizer.batch_decode(rows, skip_special_tokens=True), list(map(tokenizer.convert_ids_to_tokens, rows))
        )

    return translate, model


def ct2_system(ct2_dir: Path, translator, limit: int, batch: int, threads: int):
    import ctranslate2

    src, tgt = translator.src_subwords, translator.tgt_subwords
    ct2 = ctranslate2.Translator(
        str(ct2_dir), device="cpu", compute_type="float32", inter_threads=1, intra_threads=threads
    )

    def translate(texts: list[str], beam: int) -> Outputs:
        pieces = [src.pieces(ids) for ids in src.encode(texts)]  # (it adds the source's </s>: add_source_eos)
        results = ct2.translate_batch(
            pieces, beam_size=beam, max_batch_size=batch, max_decoding_length=limit - 1, length_penalty=0.0
        )
        best = [r.hypotheses[0] for r in results]
        return Outputs([tgt.sp.decode(h) for h in best], best)

    return translate


# ---------------------------------------------------------------- measuring


def measure(systems: dict, sources: list[str], beam: int, rounds: int, batch: int) -> dict:
    """Each system's seconds in each round (their order rotated), and its outputs (of the last round)."""
    names = list(systems)
    seconds, cpu_seconds, others = ({name: [] for name in names} for _ in range(3))
    outputs = {}
    for name in names:
        systems[name](sources[:batch], beam)  # untimed: first calls allocate and choose kernels
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            machine, mine, started = machine_cpu_seconds(), time.process_time(), time.perf_counter()
            outputs[name] = systems[name](sources, beam)
            seconds[name].append(time.perf_counter() - started)
            cpu_seconds[name].append(time.process_time() - mine)
            others[name].append(max(0.0, machine_cpu_seconds() - machine - cpu_seconds[name][-1]))
            log(
                f"  {search_name(beam)}, round {r + 1}: {name} {len(sources) / seconds[name][-1]:.1f} sentences/s "
                f"({seconds[name][-1]:.1f} s; CPU {cpu_seconds[name][-1]:.1f} s, others' {others[name][-1]:.1f} s)"
            )
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "others_cpu_seconds": others, "outputs": outputs}


def machine_cpu_seconds() -> float:
    """CPU seconds the whole machine has been busy since boot (/proc/stat: all but idle and iowait,
    steal included), 0 where it cannot be read: less this process's, what others took meanwhile."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return 0.0
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def search_name(beam: int) -> str:
    return "greedy" if beam == 1 else f"beam {beam}"


def figures(measured: dict, references: list[str], limit: int) -> dict:
    from attnmt.translation.evaluation import corpus_scores

    ours = measured["outputs"]["attnmt"]
    result = {}
    for name, out in measured["outputs"].items():
        median = statistics.median(measured["seconds"][name])
        lengths = list(map(len, out.pieces))
        result[name] = {
            "seconds_median": median,
            "seconds": measured["seconds"][name],
            "cpu_seconds": measured["cpu_seconds"][name],
            "others_cpu_seconds": measured["others_cpu_seconds"][name],
            "sentences_per_s": len(out.texts) / median,
            "target_tokens_per_s": out.tokens / median,
            "mean_output_pieces": statistics.mean(lengths),
            "at_limit": sum(length >= limit - 1 for length in lengths),
            "same_as_attnmt": sum(a == b for a, b in zip(out.pieces, ours.pieces)),
            "bleu": corpus_scores(out.texts, references)["bleu"].score,
        }
    return result


def table(results: dict, sentences: int) -> str:
    lines = [
        "| search | system | sentences/s | target tokens/s | attnmt / it | outputs = attnmt's "
        "| mean output, pieces | at the limit | BLEU | CPU s / s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for search, systems in results.items():
        ours = systems["attnmt"]
        for name, r in systems.items():
            ratio = "" if name == "attnmt" else f"**{ours['sentences_per_s'] / r['sentences_per_s']:.2f}x**"
            lines.append(
                f"| {search} | {name} | {r['sentences_per_s']:.1f} | {r['target_tokens_per_s']:,.0f} | {ratio} | "
                f"{r['same_as_attnmt']:,} / {sentences:,} | {r['mean_output_pieces']:.1f} | {r['at_limit']} | "
                f"{r['bleu']:.1f} | {statistics.median(r['cpu_seconds']) / r['seconds_median']:.2f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a Marian folder that save_pretrained wrote (default: OPUS-MT's shape, built)")
    parser.add_argument("--cache", default=str(CACHE), help="where the built model is kept (default runs/hub-bench)")
    parser.add_argument("--rebuild", action="store_true", help="build the model again even if --cache has it")
    parser.add_argument("--pieces", type=int, default=8000, help="sentencepiece pieces a side, at most (8,000)")
    parser.add_argument("--steps", type=int, default=600, help="training steps of the built model (600)")
    parser.add_argument("--lr", type=float, default=7e-4, help="its peak learning rate (7e-4)")
    parser.add_argument("--warmup", type=int, default=100, help="its warm-up steps (100)")
    parser.add_argument("--check-every", type=int, default=100, help="greedy checks on val while it trains (steps)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--limit", type=int, default=1000, help="first N test sentences (default 1000: all)")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per system and search; the median is kept")
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--max-length", type=int, default=128, help="every output's length limit, </s> included")
    parser.add_argument("--src", default=str(MULTI30K / "test_2016_flickr.de.gz"))
    parser.add_argument("--ref", default=str(MULTI30K / "test_2016_flickr.en.gz"))
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)

    from requirements import Missing, check, extra, multi30k as multi30k_files, path

    given = Path(args.model) if args.model else None
    needed = ("config.json", "model.safetensors", "source.spm", "target.spm", "vocab.json")
    not_marian = None
    if given is not None and not all((given / name).is_file() for name in needed):
        not_marian = Missing(f"{given} (not a save_pretrained Marian folder: {', '.join(needed)})", "--model")
    check(
        "benchmarks/hub.py",
        extra("hub", "transformers", "generate, and the Marian model"),
        extra("hub", "google.protobuf", "attnmt import reads the sentencepiece models with it"),
        extra("ct2", "ctranslate2", "decodes the exported model"),
        None if given else multi30k_files(MULTI30K, TRAINING_FILES, "to build the model; or give --model"),
        not_marian,
        [path(file, option) for file, option in ((args.src, "--src"), (args.ref, "--ref"))],
    )
    import ctranslate2
    import transformers

    transformers.utils.logging.disable_progress_bar()  # (loading and saving bars: noise among the figures)

    from attnmt.core import threads
    from attnmt.data.corpus import read_lines
    from attnmt.translation.export import export_ct2
    from attnmt.translation.marian import import_marian

    torch.set_num_threads(args.threads)
    threads.choose(args.threads)
    settings = {k: getattr(args, k) for k in ("pieces", "steps", "lr", "warmup", "check_every", "seed")}
    if given is None:
        cache = Path(args.cache)
        if args.rebuild and (cache / "built.json").exists():
            (cache / "built.json").unlink()
        folder = build(cache, settings, args.threads)
    else:
        folder = given
    sources, references = read_lines(args.src)[: args.limit], read_lines(args.ref)[: args.limit]
    with tempfile.TemporaryDirectory() as tmp:
        imported = import_marian(folder, Path(tmp) / "imported", log=log)
        ct2_dir = export_ct2(imported, Path(tmp) / "ct2")
        ours, translator = attnmt_system(imported, args.max_length, args.batch)
        theirs, model = transformers_system(folder, args.max_length, args.batch)
        systems = {
            "attnmt": ours,
            "transformers": theirs,
            "CTranslate2": ct2_system(ct2_dir, translator, args.max_length, args.batch, args.threads),
        }
        results = {}
        for beam in args.beams:
            measured = measure(systems, sources, beam, args.rounds, args.batch)
            results[search_name(beam)] = figures(measured, references, args.max_length)
    vocabulary = model.config.vocab_size
    reference_pieces = statistics.mean(map(len, translator.tgt_subwords.encode(references)))
    what = str(folder)
    if given is None:
        what = (
            f"a MarianMTModel of OPUS-MT's shape, random weights trained {args.steps} steps on Multi30k, "
            f"sentencepiece models of at most {args.pieces:,} pieces a side trained on Multi30k train"
        )
    print(
        f"\n{what}: vocabulary {vocabulary:,}, {sum(p.numel() for p in model.parameters()):,} parameters.\n"
        f"{len(sources):,} sentences of {Path(args.src).name}, batch {args.batch}, {args.threads} threads, "
        f"limit {args.max_length} tokens, no length penalty; median of {args.rounds} interleaved rounds, "
        f"text in, text out. The references: {reference_pieces:.1f} pieces on average.\n"
        f"{cpu()}; {time.strftime('%Y-%m-%d %H:%M %Z')}; torch {torch.__version__}, transformers "
        f"{transformers.__version__} ({model.config._attn_implementation} attention), "
        f"CTranslate2 {ctranslate2.__version__}\n"
    )
    print(table(results, len(sources)))
    if args.json:
        report = {
            "command": " ".join(sys.argv),
            "model": what,
            "cpu": cpu(),
            "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        }
        Path(args.json).write_text(json.dumps({**report, "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
