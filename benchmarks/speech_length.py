"""The claim of Chorowski et al. (2015), measured: location-aware attention keeps its place in
utterances longer than any seen in training, content-only (Bahdanau) attention loses it.

Trains both attentions with the same step budget on two corpora, then scores each on test sets of
longer utterances in two ways:

    recognition  free decoding (greedy unless --beam): CER and WER, by length in words
    place kept   forced decoding of the reference (the paper's forced alignment): the share of
                 characters whose attention peaks in the stretch of audio that says them, by
                 position in the joined utterance (attnmt.speech.error_rates.place_kept); this measures
                 keeping one's place apart from knowing when to stop

on two corpora:

    synthesized  espeak-ng speech (attnmt.speech.corpora): 1-5 words per utterance in training; test on
                 the held-out utterances (half by unseen voices) and on 2, 3 and 4 of them joined
    digits       real speech (FSDD, attnmt.speech.digits): strings of 1-3 digits by 4 speakers in
                 training; test on 1-3 digits by the fifth speaker and on 4-8 digits by all five

Quality figures come from step budgets, so the machine's load does not change them (run it alone:
    flock /tmp/attnmt-bench.lock python benchmarks/speech_length.py --out runs/speech-length
). Writes runs/.../results.json, prints the tables of docs/speech.md and draws, in runs/.../figures/,
each model's free and forced attention on a longer-than-training utterance and the place kept by
position. With --window LEFT,RIGHT it scores the trained models again, decoding with an attention
window (results-window-LEFT-RIGHT.json, figures-window-LEFT-RIGHT/).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from attnmt.cli import window_argument  # noqa: E402
from attnmt.compare import assignment, merged  # noqa: E402
from attnmt.core.config import config_from_dict  # noqa: E402
from attnmt.speech import corpora as speech  # noqa: E402
from attnmt.speech import digits  # noqa: E402
from attnmt.speech.quickstart import speech_config  # noqa: E402
from attnmt.training import train  # noqa: E402

FSDD = ROOT.parent / "shared" / "data" / "speech" / "fsdd"
ATTENTIONS = ("location", "bahdanau")
DEFAULT_STEPS = {"synthesized": 800, "digits": 300}  # batches of 32: the quick start's budget; 3 epochs of digits


def corpora(
    out: Path, joined: int, short: tuple[int, int] = (1, 3), long: tuple[int, int] = (4, 8)
) -> dict[str, dict[str, Path]]:
    """name -> {"train", "dev", test sets...}: the synthesized corpus with its joined test sets, and
    the digit strings."""
    synth = speech.write_spoken_corpus(out / "synthesized")
    for copies in (2, 3, 4):
        if not (out / "synthesized" / f"joined-{copies}.tsv").is_file():
            speech.join_utterances(synth["test"], out / "synthesized", copies, joined)
    synth.update({f"joined-{c}": out / "synthesized" / f"joined-{c}.tsv" for c in (2, 3, 4)})
    digit_sets = {
        name: out / "digits" / f"{name}.tsv"
        for name in ("train", "dev", "test-speaker", "test-long", "test-long-speaker")
    }
    if not all(p.is_file() for p in digit_sets.values()):
        digit_sets = digits.write_digit_corpus(FSDD, out / "digits", short=short, long=long)
    return {"synthesized": synth, "digits": digit_sets}


def run(
    out: Path,
    corpus: str,
    sets: dict[str, Path],
    attention: str,
    steps: int,
    beam: int,
    overrides: dict,
    window: tuple[int, int] | None = None,
) -> dict:
    """Trains (unless trained) and scores one model: {"scores": test-scores.json, "place": {set: place_kept}};
    with a decoding ``window``, the scores of the trained model decoding within it."""
    from attnmt.api import load
    from attnmt.speech.error_rates import place_report, speech_test_set_reports

    folder = out / f"{corpus}-{attention}"
    raw = speech_config(folder, sets, steps, attention)
    raw["training"].update({"validate_every": max(steps // 5, 1), "threads": 2})
    raw["decoding"]["beam"] = beam
    raw = merged(raw, overrides)
    config = config_from_dict(raw, Path("."))
    features = config.experiment_dir / "features"
    for other in ATTENTIONS:  # the same corpus and settings: the other run's feature cache serves (checked)
        cached = out / f"{corpus}-{other}" / "model" / "features"
        if other != attention and cached.is_dir() and not features.exists():
            shutil.copytree(cached, features)
    if not (config.experiment_dir / "test-scores.json").is_file():
        train(config, progress=False)
    scores = json.loads((config.experiment_dir / "test-scores.json").read_text(encoding="utf-8"))
    model = load(config.experiment_dir)
    if window is not None:
        model.attention_window = window
        reports = speech_test_set_reports(
            model, model.test_sets, beam=beam, log=lambda m: None, cache=config.experiment_dir / "features"
        )
        scores = {name: {k: v for k, v in report.items() if k != "hypotheses"} for name, report in reports.items()}
    place = {
        name: place_report(model, tsv, log=lambda m: None)
        for name, tsv in sets.items()
        if name not in ("train", "dev") and has_pieces(tsv)
    }
    return {"scores": scores, "place": place}


def has_pieces(tsv: Path) -> bool:
    """Whether a test set says where its joined pieces lie (joined utterances, digit strings)."""
    first = tsv.read_text(encoding="utf-8").split("\n", 1)[0].split("\t")
    return len(first) > 2 and ":" in first[2]


def draw(out: Path, corpus: str, attention: str, tsv: Path, window: tuple[int, int] | None, figures: Path):
    """The free attention (what the model writes) and the forced attention (made to write the
    reference) above the spectrogram of the first utterance of ``tsv``, a longer-than-training test
    set: out/figures/CORPUS-ATTENTION.png and CORPUS-ATTENTION-forced.png."""
    from dataclasses import replace

    from attnmt.api import load
    from attnmt.speech.audio import read_speech_tsv
    from attnmt.speech.figures import spectrogram_attention
    from attnmt.viz.figures import save

    paths, texts = read_speech_tsv(tsv)
    model = load(out / f"{corpus}-{attention}" / "model")
    if window is not None:  # else the model's own (decoding.attention_window)
        model.attention_window = window
    [t] = model.transcribe([tsv.parent / paths[0]], beam=1)
    save(
        spectrogram_attention(t, title=f"{attention} attention, {tsv.stem}: {texts[0]!r} -> {t.text!r}"),
        figures / f"{corpus}-{attention}.png",
    )
    [forced] = model.force_attention([model.features(tsv.parent / paths[0])], [texts[0]])
    pieces = model.tgt_subwords.pieces(model.tgt_subwords.encode([texts[0]])[0])
    forced_view = replace(t, candidates=[replace(t.candidates[0], tokens=pieces + ["</s>"], attention=forced)])
    save(
        spectrogram_attention(forced_view, title=f"{attention} attention, forced to write {texts[0]!r}"),
        figures / f"{corpus}-{attention}-forced.png",
    )


def draw_place(figures: Path, corpus: str, results: dict, test_set: str):
    """The place kept by position in the joined utterance, one line per attention."""
    from attnmt.viz.figures import new_figure, save

    fig = new_figure(6.0, 3.6)
    ax = fig.subplots()
    for attention, result in results.items():
        place = result["place"][test_set]
        pieces = place["by_piece"]
        (line,) = ax.plot([p["piece"] for p in pieces], [p["in_place"] for p in pieces], marker="o", label=attention)
        ax.plot([len(pieces) + 1.5], [place["last"]["in_place"]], marker="s", color=line.get_color())
    ticks = range(1, len(pieces) + 1)
    ax.set_xticks([*ticks, len(pieces) + 1.5], [*map(str, ticks), "last"])
    ax.set_xlabel("position of the recording in the utterance (the last one apart)")
    ax.set_ylabel("characters attending to it (%)")
    ax.set_ylim(-2, 104)
    ax.set_title(f"{corpus}, {test_set}: forced attention in place", fontsize=10)
    ax.legend(loc="lower left")
    save(fig, figures / f"{corpus}-place.png")


def table(results: dict) -> str:
    lines = []
    for corpus, by_attention in results.items():
        first = next(iter(by_attention.values()))
        lines += [
            f"\n{corpus}: CER / WER (%) by test set (free decoding), and characters whose forced attention "
            "is in place (%)",
            "test set | " + " | ".join(f"{a} CER | {a} WER | {a} in place" for a in by_attention),
        ]
        for name in first["scores"]:
            cells = []
            for result in by_attention.values():
                s, place = result["scores"][name], result["place"].get(name)
                in_place = "-" if place is None else f"{place['in_place']:.1f}"
                cells.append(f"{s['cer']:.1f} | {s['wer']:.1f} | {in_place}")
            lines.append(f"{name} ({first['scores'][name]['utterances']}) | " + " | ".join(cells))
        lines.append(f"\n{corpus}: CER (%) by reference length in words, per test set:")
        for name in first["scores"]:
            for attention, result in by_attention.items():
                buckets = ", ".join(
                    f"{b['low']}{'+' if b['high'] is None else ''}: {b['cer']:.1f}"
                    for b in result["scores"][name]["by_length"]
                )
                lines.append(f"  {name:18} {attention:9} {buckets}")
        lines.append(f"\n{corpus}: forced attention in place (%) by position of the piece:")
        for name in first["place"]:
            for attention, result in by_attention.items():
                place = result["place"][name]
                pieces = ", ".join(f"{p['piece']}: {p['in_place']:.1f}" for p in place["by_piece"])
                lines.append(f"  {name:18} {attention:9} {pieces}, last: {place['last']['in_place']:.1f}")
    return "\n".join(lines)


def check_requirements(out: Path):
    """What `corpora` needs to make the two corpora (each once: not again when its files are there)."""
    from requirements import check, path, program

    synthesized = all((out / "synthesized" / f"{name}.tsv").is_file() for name in ("train", "dev", "test"))
    digit_sets = ("train", "dev", "test-speaker", "test-long", "test-long-speaker")
    digit_strings = all((out / "digits" / f"{name}.tsv").is_file() for name in digit_sets)
    check(
        "benchmarks/speech_length.py",
        None if synthesized else program("espeak-ng", "synthesizes the spoken corpus", apt="espeak-ng"),
        None if digit_strings else path(FSDD, "the spoken digits (FSDD) of the digit strings"),
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="runs/speech-length", help="folder of corpora, models and results")
    parser.add_argument(
        "--steps", type=int, help="training steps of every model (default: synthesized 800, digits 300)"
    )
    parser.add_argument("--joined", type=int, default=100, help="utterances of each joined test set")
    parser.add_argument("--beam", type=int, default=1, help="beam of the test scores (default 1: greedy)")
    parser.add_argument("--only", choices=["synthesized", "digits"], help="one corpus only")
    parser.add_argument(
        "--short-digits",
        type=digits.lengths,
        default=(1, 3),
        metavar="MIN-MAX",
        help="digits of a training string (default 1-3)",
    )
    parser.add_argument(
        "--long-digits",
        type=digits.lengths,
        default=(4, 8),
        metavar="MIN-MAX",
        help="digits of a longer-than-training test string (default 4-8)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a config field of both models, over the quick start's, e.g. model.decoder_init=zeros "
        "(all the decoder learns of the audio comes through attention) or speech.ctc_weight=0.3 "
        "(repeatable)",
    )
    parser.add_argument(
        "--window",
        type=window_argument,
        metavar="LEFT,RIGHT",
        help="score the trained models decoding with an attention window (each step within LEFT "
        "encoder states before and RIGHT after the median of the previous step's weights): "
        "into results-window-LEFT-RIGHT.json and figures-window-LEFT-RIGHT/",
    )
    args = parser.parse_args(argv)
    check_requirements(Path(args.out).resolve())
    overrides = {}
    for text in args.set:
        overrides = merged(overrides, assignment(text, "--set"))
    out = Path(args.out).resolve()
    suffix = "" if args.window is None else "-window-{}-{}".format(*args.window)
    figures = out / f"figures{suffix}"
    results = {}
    for corpus, sets in corpora(out, args.joined, args.short_digits, args.long_digits).items():
        if args.only and corpus != args.only:
            continue
        steps = args.steps or DEFAULT_STEPS[corpus]
        results[corpus] = {
            attention: run(out, corpus, sets, attention, steps, args.beam, overrides, args.window)
            for attention in ATTENTIONS
        }
        longest = "joined-4" if corpus == "synthesized" else "test-long-speaker"
        for attention in ATTENTIONS:
            draw(
                out,
                corpus,
                attention,
                sets["joined-3" if corpus == "synthesized" else "test-long-speaker"],
                args.window,
                figures,
            )
        draw_place(figures, corpus, results[corpus], longest)
    (out / f"results{suffix}.json").write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(table(results))


if __name__ == "__main__":
    main()
