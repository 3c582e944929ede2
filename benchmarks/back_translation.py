"""Back-translation: does target-side monolingual text, translated back into the source language by a
reverse model, make a better model? And does a tag on those synthetic pairs help?

    flock /tmp/attnmt-bench.lock python benchmarks/back_translation.py \\
        --base configs/experiments/transformer-averaged.yaml --reverse runs/experiments/transformer-en-de

Sennrich, Haddow & Birch (2016) translated target-language monolingual text back into the source
language with a reverse model and trained on those synthetic pairs beside the genuine ones: +2.8 to
+3.7 BLEU on English <-> German news. Caswell, Chelba & Grangier (2019) marked the synthetic sources
with a tag and found it at least as good as the noise of Edunov et al. (2018), who found back-translations
sampled from the reverse model better than its beam search's at scale (and worse with little data).

Here the base model is the German -> English Transformer of --base (Multi30k, 29,000 pairs; trained
as that config says, and scored again here); the English monolingual text is every
distinct sentence of the SICK corpus (image and video descriptions, the shared nli/ folder) that is
not a sentence of Multi30k (train, val or test, compared in lower case without the final period);
the reverse model (--reverse, English -> German, trained on Multi30k) translates them with beam 5.
Then the base config is trained again, the same steps and seed, with those pairs as
``data.extra_train``: untagged, tagged "<BT>", drawn from the reverse model by sampling
(temperature 1, seed 1) instead of beam search, untagged and tagged, and untagged with a period put at the end of
each English sentence that has none ("periods": SICK's sentences hardly ever end with one, Multi30k's
almost always do) (--variants: which). Lines: test_2016 BLEU and
chrF (beam 5) of the best checkpoint of each, the paired bootstrap of sacreBLEU against the base
model, and two marks of SICK's style in the outputs: the share without a final period (SICK's
sentences have none, Multi30k's do) and the share saying "is/are ...ing". The tagged model is
scored twice: as it is used (sources untagged) and with "<BT>" before every source (``translate
--tag``: does the tag steer the output to the synthetic corpus's style?). Each model already
trained in --out is only scored.
"""

from __future__ import annotations

import argparse
import gzip
import re
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
SICK = ("SICK_train.txt", "SICK_trial.txt", "SICK_test_annotated.txt")
MULTI30K_ENGLISH = ("train.en.gz", "val.en.gz", "test_2016_flickr.en.gz")
VARIANTS = {"untagged": None, "tagged": "<BT>", "sampled": None, "sampled-tagged": "<BT>", "periods": None}  # name: tag


PROGRESSIVE = re.compile(r"\b(is|are)\s+\w+ing\b")  # "is/are ...ing": 78 % of SICK's sentences


def _key(sentence: str) -> str:
    return sentence.strip().lower().rstrip(" .")


def monolingual_english(out: Path) -> Path:
    """Every distinct SICK sentence that is no Multi30k sentence, sorted, one a line in ``out``."""
    sentences = set()
    for name in SICK:
        rows = (SHARED / "nli" / name).read_text(encoding="utf-8").splitlines()[1:]  # (a header line)
        for row in rows:
            sentences.update(column.strip() for column in row.split("\t")[1:3])
    multi30k = set()
    for name in MULTI30K_ENGLISH:
        with gzip.open(SHARED / "multi30k" / name, "rt", encoding="utf-8") as lines:
            multi30k.update(_key(line) for line in lines)
    kept = sorted(s for s in sentences if s and _key(s) not in multi30k)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(s + "\n" for s in kept), encoding="utf-8")
    print(
        f"monolingual English: {len(kept):,} distinct SICK sentences ({len(sentences) - len(kept)} dropped: "
        "sentences of Multi30k)"
    )
    return out


def back_translated(reverse: Path, english: Path, out: Path, sample: bool = False) -> Path:
    """``english`` translated by the reverse model (beam 5, or ``sample``d) into ``out``, unless it is there."""
    import attnmt
    from attnmt.data.corpus import read_lines

    if out.is_file():
        return out
    started = time.perf_counter()
    lines = read_lines(english)
    search = {"beam": 1, "sampling": {"seed": 1}} if sample else {"beam": 5}
    translations = attnmt.load(reverse).translate(lines, batch_size=64, **search)
    tmp = out.with_suffix(".tmp")
    tmp.write_text("".join(t.text + "\n" for t in translations), encoding="utf-8")
    tmp.replace(out)
    print(f"back-translated {len(lines):,} sentences with {reverse} in {time.perf_counter() - started:.0f} s")
    return out


def config_for(base: Path, synthetic: tuple[Path, Path], folder: Path, tag: str | None):
    """The base config with the synthetic pairs as data.extra_train (tagged ``tag``), into ``folder``."""
    from attnmt.core.config import config_from_dict, load_config

    raw = load_config(base).model_dump(mode="json", exclude_none=True)
    raw["experiment_dir"] = str(folder.resolve())
    extra = {"src": str(synthetic[0].resolve()), "tgt": str(synthetic[1].resolve())}
    raw["data"]["extra_train"] = [{**extra, **({"tag": tag} if tag else {})}]
    return config_from_dict(raw, folder.parent)


def check_requirements(args):
    """The corpora and models the run reads, checked before it writes or trains anything."""
    from requirements import check, files, trained_model, path

    from attnmt.core.config import load_config

    base = load_config(args.base).experiment_dir if args.base.is_file() else None
    check(
        "benchmarks/back_translation.py",
        files(SHARED / "nli", SICK, "the English monolingual text (SICK)"),
        files(SHARED / "multi30k", MULTI30K_ENGLISH, "Multi30k's English side (left out of SICK's)"),
        path(args.base, "the German -> English config (--base)"),
        trained_model(base, "the base model (--base's experiment_dir)", f"train it first: attnmt train {args.base}")
        if base
        else None,
        trained_model(
            args.reverse,
            "the English -> German model (--reverse)",
            "train it first: attnmt train configs/experiments/transformer-en-de.yaml",
        ),
    )


def main():
    import attnmt
    import sacrebleu
    from attnmt.core.config import load_config
    from attnmt.data.corpus import read_lines
    from attnmt.training import train
    from coverage_penalty import significance  # (benchmarks/ is on the path of a script run from it)

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--base",
        type=Path,
        default=Path("configs/experiments/transformer-averaged.yaml"),
        help="the German -> English config (trained already: its best checkpoint is the baseline)",
    )
    parser.add_argument(
        "--reverse",
        type=Path,
        default=Path("runs/experiments/transformer-en-de"),
        help="the English -> German model that back-translates",
    )
    parser.add_argument("--out", type=Path, default=Path("runs/experiments/back-translation"))
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=VARIANTS,
        default=list(VARIANTS),
        help="the variants to train (unless trained) and score",
    )
    args = parser.parse_args()
    check_requirements(args)

    english = monolingual_english(args.out / "sick.en")
    german = back_translated(args.reverse, english, args.out / "sick.bt.de")
    sampled, periods = args.out / "sick.sampled.de", args.out / "sick.periods.en"
    if any(name.startswith("sampled") for name in args.variants):
        back_translated(args.reverse, english, sampled, sample=True)
    if "periods" in args.variants:  # SICK's sentences end without a period, Multi30k's with one
        periods.write_text("".join(line.rstrip(".") + ".\n" for line in read_lines(english)), encoding="utf-8")
    base = load_config(args.base)
    test = base.data.test["test_2016"]
    sources, references = read_lines(test.src), read_lines(test.tgt)
    print(
        f"base {args.base} ({base.training.max_steps} steps, seed {base.training.seed}); "
        f"{time.strftime('%Y-%m-%d %H:%M')}"
    )
    rows = [("Multi30k alone (the base)", attnmt.load(base.experiment_dir), None)]
    for name in args.variants:
        tag = VARIANTS[name]
        synthetic = (sampled if name.startswith("sampled") else german, periods if name == "periods" else english)
        folder = args.out / name
        if not (folder / "best.safetensors").is_file():
            started = time.perf_counter()
            train(config_for(args.base, synthetic, folder, tag), log=print, progress=False)
            print(f"  {name}: trained in {time.perf_counter() - started:.0f} s")
        rows.append((f"+ back-translated SICK, {name}", attnmt.load(folder), None))
        if tag:
            rows.append((f"  ... translated with {tag}", rows[-1][1], tag))
    baseline = None
    print(
        f"{'training data':<40}{'BLEU':>7}{'chrF':>7}{'p (paired bootstrap)':>22}{'no final period':>17}"
        f"{'is/are ...ing':>15}"
    )
    attended, variant = [], ""
    for name, model, tag in rows:
        translations = model.translate(sources, beam=5, batch_size=64, tag=tag)
        outputs = [t.text for t in translations]
        if tag:
            attended.append((variant, tag_attention(model, sources, translations, tag)))
        else:
            variant = name.removeprefix("+ back-translated SICK, ")
        p_value = "" if baseline is None else f"{significance(baseline, outputs, references):.3f}"
        baseline = baseline or outputs
        print(
            f"{name:<40}{sacrebleu.corpus_bleu(outputs, [references]).score:>7.2f}"
            f"{sacrebleu.corpus_chrf(outputs, [references]).score:>7.2f}{p_value:>22}{style(outputs)}"
        )
    print(f"{'(the references)':<76}{style(references)}")
    print(f"{'(the SICK sentences)':<76}{style(read_lines(english))}")
    for variant, line in attended:
        print(f"{variant}, translated with its tag, attention on the tag: {line}")


def tag_attention(model, sources: list[str], translations: list, tag: str) -> str:
    """How much the model looks at ``tag`` in translating ``sources`` after it (``translations``): the
    cross-attention of the last layer, heads averaged (a Translation's attention), per output token
    and at the step that ends the output; the encoder's self-attention to it, per layer."""
    import numpy as np

    weights = [t.attention[:, 0] for t in translations if t.attention is not None and t.tokens[-1:] == ["</s>"]]
    uniform = np.mean([1 / t.attention.shape[1] for t in translations if t.attention is not None])
    encoder = np.mean(
        [
            model.attention(s, t, tag=tag)["encoder"][:, :, 1:, 0].mean(axis=(1, 2))
            for s, t in zip(sources, translations)
            if t.tokens
        ],
        axis=0,
    )
    return (
        f"cross-attention {np.mean(np.concatenate(weights)):.1%} of each output token's (uniform: "
        f"{uniform:.1%}), {np.mean([w[-1] for w in weights]):.1%} at the step writing </s>; encoder "
        f"self-attention to it by layer {', '.join(f'{x:.1%}' for x in encoder)}"
    )


def style(sentences: list[str]) -> str:
    """The shares of sentences without a final period and saying "is/are ...ing", as two columns."""
    no_period = sum(not s.rstrip().endswith(".") for s in sentences) / len(sentences)
    progressive = sum(bool(PROGRESSIVE.search(s)) for s in sentences) / len(sentences)
    return f"{no_period:>16.1%}{progressive:>15.1%}"


if __name__ == "__main__":
    main()
