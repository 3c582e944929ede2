"""The claim of Chorowski et al. (2015), measured: location-aware attention keeps its place in
utterances longer than any seen in training, content-only (Bahdanau) attention loses it.

Trains both attentions with the same step budget on two corpora, then scores each on test sets of
longer utterances (CER and WER, by length in words):

    synthesized  espeak-ng speech (attnmt.tasks.speech): 1-5 words per utterance in training; test on
                 the held-out utterances (half by unseen voices) and on 2, 3 and 4 of them joined
    digits       real speech (FSDD, attnmt.tasks.digits): strings of 1-3 digits by 4 speakers in
                 training; test on 1-3 digits by the fifth speaker and on 4-8 digits by all five

Quality figures come from step budgets, so the machine's load does not change them (run it alone:
    flock /tmp/attnmt-bench.lock python benchmarks/speech_length.py --out runs/speech-length
). Writes runs/.../results.json, prints the tables of docs/speech.md and draws the attention of
each model on a longer-than-training utterance in runs/.../figures/.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from attnmt.config import config_from_dict  # noqa: E402
from attnmt.tasks import digits, speech  # noqa: E402
from attnmt.tasks.speech_quickstart import speech_config  # noqa: E402
from attnmt.training import train  # noqa: E402

FSDD = ROOT.parent / "shared" / "data" / "speech" / "fsdd"
ATTENTIONS = ("location", "bahdanau")
DEFAULT_STEPS = {"synthesized": 800, "digits": 300}  # batches of 32: the quick start's budget; 3 epochs of digits


def corpora(out: Path, joined: int) -> dict[str, dict[str, Path]]:
    """name -> {"train", "dev", test sets...}: the synthesized corpus with its joined test sets, and
    the digit strings."""
    synth = speech.write_spoken_corpus(out / "synthesized")
    for copies in (2, 3, 4):
        if not (out / "synthesized" / f"joined-{copies}.tsv").is_file():
            speech.join_utterances(synth["test"], out / "synthesized", copies, joined)
    synth.update({f"joined-{c}": out / "synthesized" / f"joined-{c}.tsv" for c in (2, 3, 4)})
    digit_sets = {name: out / "digits" / f"{name}.tsv" for name in ("train", "dev", "test-speaker", "test-long",
                                                                    "test-long-speaker")}
    if not all(p.is_file() for p in digit_sets.values()):
        digit_sets = digits.write_digit_corpus(FSDD, out / "digits")
    return {"synthesized": synth, "digits": digit_sets}


def run(out: Path, corpus: str, sets: dict[str, Path], attention: str, steps: int, beam: int,
        decoder_init: str = "bridge") -> dict:
    folder = out / f"{corpus}-{attention}"
    raw = speech_config(folder, sets, steps, attention)
    raw["model"]["decoder_init"] = decoder_init
    raw["training"].update({"validate_every": max(steps // 5, 1), "threads": 2})
    raw["decoding"]["beam"] = beam
    config = config_from_dict(raw, Path("."))
    features = config.experiment_dir / "features"
    for other in ATTENTIONS:  # the same corpus and settings: the other run's feature cache serves (checked)
        cached = out / f"{corpus}-{other}" / "model" / "features"
        if other != attention and cached.is_dir() and not features.exists():
            shutil.copytree(cached, features)
    if not (config.experiment_dir / "test-scores.json").is_file():
        train(config, progress=False)
    return json.loads((config.experiment_dir / "test-scores.json").read_text(encoding="utf-8"))


def draw(out: Path, corpus: str, attention: str, tsv: Path):
    """The attention above the spectrogram of the first utterance of ``tsv`` (a longer-than-training
    test set): out/figures/CORPUS-ATTENTION.png."""
    from attnmt.api import load
    from attnmt.data.audio import read_speech_tsv
    from attnmt.viz.figures import save
    from attnmt.viz.speech import spectrogram_attention

    paths, texts = read_speech_tsv(tsv)
    [t] = load(out / f"{corpus}-{attention}" / "model").transcribe([tsv.parent / paths[0]], beam=1)
    title = f"{attention} attention, {tsv.stem}: {texts[0]!r} -> {t.text!r}"
    save(spectrogram_attention(t, title=title), out / "figures" / f"{corpus}-{attention}.png")


def table(results: dict) -> str:
    lines = []
    for corpus, by_attention in results.items():
        lines += [f"\n{corpus}: CER / WER (%) by test set",
                  "test set | " + " | ".join(f"{a} CER | {a} WER" for a in by_attention)]
        for name in next(iter(by_attention.values())):
            cells = [f"{s[name]['cer']:.1f} | {s[name]['wer']:.1f}" for s in by_attention.values()]
            lines.append(f"{name} ({next(iter(by_attention.values()))[name]['utterances']}) | " + " | ".join(cells))
        lines += [f"\n{corpus}: CER (%) by reference length in words, all test sets together is not meaningful; "
                  "per test set:"]
        for name in next(iter(by_attention.values())):
            for attention, scores in by_attention.items():
                buckets = ", ".join(f"{b['low']}{'+' if b['high'] is None else ''}: {b['cer']:.1f}"
                                    for b in scores[name]["by_length"])
                lines.append(f"  {name:18} {attention:9} {buckets}")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="runs/speech-length", help="folder of corpora, models and results")
    parser.add_argument("--steps", type=int, help="training steps of every model (default: synthesized 800, "
                                                  "digits 300)")
    parser.add_argument("--joined", type=int, default=100, help="utterances of each joined test set")
    parser.add_argument("--beam", type=int, default=1, help="beam of the test scores (default 1: greedy)")
    parser.add_argument("--only", choices=["synthesized", "digits"], help="one corpus only")
    parser.add_argument("--decoder-init", choices=["bridge", "zeros"], default="bridge",
                        help="the decoders' first state (model.decoder_init): a summary of the audio (bridge, the "
                             "quick start's) or zeros, so that all they learn of the audio comes through attention")
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    results = {}
    for corpus, sets in corpora(out, args.joined).items():
        if args.only and corpus != args.only:
            continue
        steps = args.steps or DEFAULT_STEPS[corpus]
        results[corpus] = {attention: run(out, corpus, sets, attention, steps, args.beam, args.decoder_init)
                           for attention in ATTENTIONS}
        for attention in ATTENTIONS:
            draw(out, corpus, attention, sets["joined-3" if corpus == "synthesized" else "test-long-speaker"])
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(table(results))


if __name__ == "__main__":
    main()
