"""attnmt evaluate: sacreBLEU and chrF (speech: CER and WER; sentence pairs: accuracy, F1) on the
test sets given on the command line or named by the model's config."""

from __future__ import annotations

import json

from attnmt.cli.models import check_rerank, load_model, reranker, translate_lines
from attnmt.cli.options import decoding_options, rerank_options
from attnmt.cli.streams import log, read_line_pairs, write_text
from attnmt.core.errors import AttnmtError


def add_parser(subparsers):
    p = subparsers.add_parser(
        "evaluate",
        help="sacreBLEU and chrF against references, BLEU by source length (speech "
        "models: CER and WER, by length); by default on every test set of the "
        "model's config (data.test)",
    )
    decoding_options(p)
    p.add_argument("--src", help="source file (with --ref)")
    p.add_argument("--ref", help="reference translations, line by line")
    p.add_argument(
        "--tsv",
        help="a TSV test set: source and reference columns (instead of --src/--ref); of a "
        "sentence-pair model: premise, hypothesis and label columns as in its training data",
    )
    p.add_argument("--src-column", type=int, default=0, help="of --tsv, counting from 0 (default 0)")
    p.add_argument("--tgt-column", type=int, default=1, help="of --tsv (default 1)")
    p.add_argument("--json", help="also write the report as JSON to this file (several test sets: {name: report})")
    p.add_argument(
        "--hypotheses",
        help="also write the translations (or predicted labels) to this file (several test sets: FILE.NAME)",
    )
    rerank_options(p)
    p.add_argument(
        "--trust-config",
        action="store_true",
        help="read the test sets that the folder's config names outside the folder (a folder you trained: "
        "without it, a model folder cannot make attnmt read other files; see docs/security.md)",
    )
    p.set_defaults(func=run)


def run(args):
    """One test set given on the command line (--src/--ref or --tsv), or else every test set of the
    model's config (data.test), each scored alone."""
    if (args.src is None) != (args.ref is None) or (args.tsv and args.src):
        raise AttnmtError(
            "give --src and --ref (two line-aligned files), or --tsv FILE, or neither to score the "
            "test sets of the model's config (data.test)"
        )
    model = load_model(args)
    check_rerank(args, model, args.beam or (model.config.decoding.beam if model.inputs == "text" else 1))
    evaluator_of(model)(model, args)


def evaluator_of(model):
    """The evaluation of what the model reads: text (translation), audio (speech), sentence pairs."""
    return {"text": evaluate_translation, "audio": evaluate_speech, "pairs": evaluate_pairs}[model.inputs]


def evaluate_translation(model, args):
    """sacreBLEU and chrF, and BLEU by source length, of --src/--ref, --tsv or the config's test sets."""
    from attnmt.data.test_sets import config_test_sets
    from attnmt.translation.evaluation import decoding_settings, evaluation_report, format_report, test_set_reports

    rerank = reranker(model, args) if args.rerank else None
    if args.src:
        sources, references = read_line_pairs(args.src, args.ref)
        warn_if_tabular(sources, args.src)
        if rerank is None:
            hypotheses = [t.text for t in translate_lines(model, sources, args, name=args.src)]
        else:  # every candidate of the beam, reranked
            beam = args.beam or model.config.decoding.beam
            hypotheses = [t.text for t in rerank(translate_lines(model, sources, args, beam, name=args.src))]
        reports = {
            "": {
                **evaluation_report(sources, hypotheses, references),
                "hypotheses": hypotheses,
                **decoding_settings(model, args.beam, args.tag),
            }
        }
    else:
        from attnmt.core.config import CorpusFiles

        sets = (
            {"": CorpusFiles(tsv=args.tsv, src_column=args.src_column, tgt_column=args.tgt_column)}
            if args.tsv
            else config_test_sets(model, args.trust_config)
        )
        if not sets:
            raise AttnmtError(
                f"{args.model_dir}: its config has no test set (data.test); give --src and --ref, or --tsv FILE"
            )
        reports = test_set_reports(
            model,
            sets,
            beam=args.beam,
            batch_size=args.batch_size,
            max_tokens=args.max_tokens,
            log=log,
            progress=True,
            rerank=rerank,
            tag=args.tag,
        )
    write_reports(reports, args, "hypotheses", format_report)


def evaluate_pairs(model, args):
    """A sentence-pair model on --tsv FILE (its columns those of the training data) or on the test
    sets of its config: accuracy, per-class precision, recall and F1, confusion matrix."""
    from attnmt.data.test_sets import config_test_sets
    from attnmt.pairs.evaluation import format_classification_report

    sets = {"": model.files_like_training(args.tsv)} if args.tsv else config_test_sets(model, args.trust_config)
    if not sets:
        raise AttnmtError(f"{args.model_dir}: its config has no test set (data.test); give --tsv FILE")
    reports = {
        name: model.evaluate(files, args.batch_size or 64, args.max_tokens, log=log) for name, files in sets.items()
    }
    write_reports(reports, args, "predictions", format_classification_report)


def evaluate_speech(model, args):
    """CER and WER (and by length) of a speech model on a TSV of audio files and transcripts (--tsv), or
    on the test sets of its config."""
    from attnmt.core.config import CorpusFiles
    from attnmt.data.test_sets import config_test_sets
    from attnmt.speech.error_rates import format_speech_report, speech_test_set_reports

    if args.src:
        raise AttnmtError(
            f"{args.model_dir} is a speech model: give --tsv FILE (audio path TAB transcript), or "
            "nothing to score the test sets of its config"
        )
    sets = {"": CorpusFiles(tsv=args.tsv)} if args.tsv else config_test_sets(model, args.trust_config)
    if not sets:
        raise AttnmtError(f"{args.model_dir}: its config has no test set (data.test); give --tsv FILE")
    reports = speech_test_set_reports(model, sets, beam=args.beam, batch_size=args.batch_size, log=log, progress=True)
    write_reports(reports, args, "hypotheses", format_speech_report)


def write_reports(reports: dict[str, dict], args, outputs: str, format_report):
    """Prints each test set's report; writes its ``outputs`` (a list of lines in the report) to
    --hypotheses (FILE, or FILE.NAME for several sets) and the reports to --json."""
    for name, report in reports.items():
        lines = report.pop(outputs)
        if args.hypotheses:
            write_text(
                args.hypotheses if len(reports) == 1 else f"{args.hypotheses}.{name}",
                "".join(line + "\n" for line in lines),
            )
        tag = f", tag {report['tag']}" if report.get("tag") else ""
        beam = f" (beam {report['beam']}{tag})" if "beam" in report else ""
        print(f"== test set {name}{beam}\n" if name else "", end="")
        print(format_report(report) + ("\n" if len(reports) > 1 else ""))
    if args.json:
        write_text(args.json, json.dumps(reports[""] if "" in reports else reports, indent=2) + "\n")


def warn_if_tabular(sources: list[str], path: str):
    """A TSV file given as --src is translated whole, columns and all: say so loudly."""
    tabbed = sum("\t" in line for line in sources)
    if tabbed > len(sources) / 2:
        log(
            f"attnmt: WARNING: {tabbed:,} of the {len(sources):,} lines of {path} contain a tab: is it a TSV file? "
            "Its lines are translated whole, columns and all; to score one column against another, give it as "
            "--tsv FILE (--src-column, --tgt-column)"
        )
