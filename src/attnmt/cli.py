"""The ``attnmt`` command line: prepare, train, translate, evaluate, quickstart, plot, serve, info, ..."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from attnmt.core.config import MAX_BEAM
from attnmt.core.errors import AttnmtError


def _read_input(path: str | None) -> list[str]:
    from attnmt.data.corpus import read_lines, split_lines

    if path is None or path == "-":
        return split_lines(sys.stdin.buffer.read(), "<stdin>")
    return read_lines(path)


def _read_line_pairs(first: str, second: str) -> tuple[list[str], list[str]]:
    """Two files read line by line, which must have as many lines (empty ones included)."""
    from attnmt.data.corpus import read_lines

    a, b = read_lines(first), read_lines(second)
    if len(a) != len(b):
        raise AttnmtError(f"line counts differ: {first} has {len(a)} lines, {second} has {len(b)}")
    return a, b


def _open_output(path: str | None):
    if path is None or path == "-":
        return sys.stdout
    try:
        return open(path, "w", encoding="utf-8")
    except OSError as e:
        raise AttnmtError(f"cannot write {path}: {e.strerror or e}") from None


def _write_text(path: str, text: str):
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as e:
        raise AttnmtError(f"cannot write {path}: {e.strerror or e}") from None


def cmd_prepare(args):
    from attnmt.core.config import load_config
    from attnmt.pairs.data import prepare_pairs
    from attnmt.translation.prepare import prepare

    config = load_config(args.config)
    (prepare_pairs if config.task == "pairs" else prepare)(config, log=_log, force=args.force)
    _log(f"prepared {config.experiment_dir}")


def cmd_train(args):
    from attnmt.core.config import load_config
    from attnmt.training import train

    config = load_config(args.config)
    if args.device:
        config.training.device = args.device
        config.token_batches_on_gpus()  # the GPU's default batches, unless the config sets them
    if args.threads:
        config.training.threads = args.threads
    state = train(config, resume=args.resume, log=_log, progress=not args.no_progress)
    if os.environ.get("RANK", "0") == "0":  # under torchrun, one process reports
        _log(f"finished at step {state.step} ({state.seconds / 60:.1f} min of training); "
             f"model in {config.experiment_dir}")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _beam(text: str) -> int:
    value = _positive(text)
    if value > MAX_BEAM:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_BEAM}, got {value}")
    return value


MAX_TOKENS = 1000  # subword tokens of one line: the work of a line grows with its square (attention)


def _quantize(args) -> str | None:
    return "int8" if args.int8 else "bf16" if args.bf16 else None


def window_argument(text: str) -> tuple[int, int]:
    """"2,8" -> (2, 8): --attention-window LEFT,RIGHT (also benchmarks/speech_length.py --window)."""
    try:
        left, right = (int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give LEFT,RIGHT, two whole numbers >= 0, e.g. 2,8") from None
    if left < 0 or right < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: LEFT and RIGHT must be >= 0")
    return left, right


def _load_model(args):
    from attnmt.api import Translator, load

    model = load(args.model_dir, args.checkpoint, quantize=_quantize(args), device=args.device)
    if getattr(args, "attention_window", None) is not None:
        if not isinstance(model, Translator):
            raise AttnmtError(f"{args.model_dir}: --attention-window is for RNN decoders with attention; this is a "
                              "sentence-pair classifier")
        model.attention_window = args.attention_window
    if getattr(args, "shortlist", None) is not None:
        if not isinstance(model, Translator) or model.config.task != "translation":
            raise AttnmtError(f"{args.model_dir}: --shortlist is for translation models")
        model.shortlist = True if args.shortlist == "" else args.shortlist
    return model


def _translate_lines(model, lines: list[str], args, n_best: int = 1, name: str = "input"):
    """The translations of ``lines``, each cut to --max-tokens subword pieces with a warning."""
    translations = model.translate(lines, beam=args.beam, n_best=n_best, batch_size=args.batch_size,
                                   max_tokens=args.max_tokens, progress="translating")
    for number, t in enumerate(translations, start=1):
        if t.truncated:
            _log(f"attnmt: warning: {name}, line {number}: more than {args.max_tokens} subword tokens; its first "
                 f"{args.max_tokens} were translated (--max-tokens)")
    return translations


def cmd_translate(args):
    model = _load_model(args)
    beam = args.beam or model.config.decoding.beam
    if args.n_best > beam:
        raise AttnmtError(f"--n-best ({args.n_best}) cannot exceed the beam size ({beam}, from the model's "
                          "config); give a larger --beam")
    lines = _read_input(args.input)
    aligned = args.report_align or args.align_file
    if aligned and model.config.task == "speech":
        raise AttnmtError("--report-align links the words of a text and of its translation: a speech model has no "
                          "source words")
    unusable = {}  # speech: line index -> why its sound file was not transcribed
    if model.config.task == "speech":  # lines of sound file paths
        translations, unusable = model.transcribe_files(lines, beam=args.beam, n_best=args.n_best,
                                                        batch_size=args.batch_size)
        for i, message in unusable.items():
            _log(f"attnmt: warning: {args.input or '<stdin>'}, line {i + 1}: {message}; an empty line written")
    else:
        translations = _translate_lines(model, lines, args, args.n_best, args.input or "<stdin>")
    out = _open_output(args.output)
    links = _open_output(args.align_file) if args.align_file else None
    try:
        for i, t in enumerate(translations):
            for c in t.candidates[:args.n_best]:
                line = c.text if args.n_best == 1 else f"{i} ||| {c.text} ||| {c.score:.4f}"  # Moses n-best format
                if aligned:  # the output's word links, after " ||| " as OpenNMT-py writes them, or to their own file
                    pharaoh = _output_links(t, c, args)
                    line += f" ||| {pharaoh}" if args.report_align else ""
                    if links is not None:
                        links.write(pharaoh + "\n")
                out.write(line + "\n")
    finally:
        for stream in (out, links):
            if stream is not None and stream is not sys.stdout:
                stream.close()
    if unusable:
        first = min(unusable)
        raise AttnmtError(f"{len(unusable)} of {len(lines)} sound file(s) not transcribed (empty lines in the output); "
                          f"first: line {first + 1}: {unusable[first]}")


def _output_links(translation, candidate, args) -> str:
    from attnmt.api import links_of
    from attnmt.translation.align import format_pharaoh

    if not translation.source.strip():
        return ""
    links = links_of(translation, candidate, method=args.align_method, threshold=args.align_threshold)
    if links is None:
        raise AttnmtError("--report-align reads the attention, and this model has attention 'none'")
    return format_pharaoh(links)


def cmd_shortlist(args):
    from attnmt.translation.shortlist import build_shortlist

    build_shortlist(args.model_dir, args.top, args.frequent, log=_log)


def cmd_classify(args):
    """premise<TAB>hypothesis lines -> label and probabilities, one output line per input line."""
    from attnmt.api import load
    from attnmt.pairs.classifier import PairClassifier, classify_lines

    model = load(args.model_dir, args.checkpoint, device=args.device)
    if not isinstance(model, PairClassifier):
        raise AttnmtError(f"{args.model_dir} is a translation model: use attnmt translate")
    outputs, errors, warnings = classify_lines(model, _read_input(args.input), args.batch_size or 64, args.max_tokens)
    out = _open_output(args.output)
    try:
        out.writelines(line + "\n" for line in outputs)
    finally:
        if out is not sys.stdout:
            out.close()
    for message in warnings:
        _log(f"attnmt: warning: {message}")
    if errors:
        raise AttnmtError(f"{len(errors)} of {len(outputs)} line(s) not classified (ERROR lines in the output); "
                          f"first: {errors[0]}")


def cmd_evaluate(args):
    """One test set given on the command line (--src/--ref or --tsv), or else every test set of the
    model's config (data.test), each scored alone."""
    from attnmt.evaluation import config_test_sets, evaluation_report, format_report, test_set_reports
    from attnmt.pairs.classifier import PairClassifier

    if (args.src is None) != (args.ref is None) or (args.tsv and args.src):
        raise AttnmtError("give --src and --ref (two line-aligned files), or --tsv FILE, or neither to score the "
                          "test sets of the model's config (data.test)")
    model = _load_model(args)
    if isinstance(model, PairClassifier):
        return _evaluate_pairs(model, args)
    if model.config.task == "speech":
        return _evaluate_speech(model, args)
    if args.src:
        sources, references = _read_line_pairs(args.src, args.ref)
        _warn_if_tabular(sources, args.src)
        hypotheses = [t.text for t in _translate_lines(model, sources, args, name=args.src)]
        reports = {"": {**evaluation_report(sources, hypotheses, references), "hypotheses": hypotheses,
                        "beam": args.beam or model.config.decoding.beam}}
    else:
        from attnmt.core.config import CorpusFiles

        sets = ({"": CorpusFiles(tsv=args.tsv, src_column=args.src_column, tgt_column=args.tgt_column)} if args.tsv
                else config_test_sets(model, args.trust_config))
        if not sets:
            raise AttnmtError(f"{args.model_dir}: its config has no test set (data.test); give --src and --ref, "
                              "or --tsv FILE")
        reports = test_set_reports(model, sets, beam=args.beam, batch_size=args.batch_size, max_tokens=args.max_tokens,
                                   log=_log, progress=True)
    _write_reports(reports, args, "hypotheses", format_report)


def _write_reports(reports: dict[str, dict], args, outputs: str, format_report):
    """Prints each test set's report; writes its ``outputs`` (a list of lines in the report) to
    --hypotheses (FILE, or FILE.NAME for several sets) and the reports to --json."""
    for name, report in reports.items():
        lines = report.pop(outputs)
        if args.hypotheses:
            _write_text(args.hypotheses if len(reports) == 1 else f"{args.hypotheses}.{name}",
                        "".join(line + "\n" for line in lines))
        beam = f" (beam {report['beam']})" if "beam" in report else ""
        print(f"== test set {name}{beam}\n" if name else "", end="")
        print(format_report(report) + ("\n" if len(reports) > 1 else ""))
    if args.json:
        _write_text(args.json, json.dumps(reports[""] if "" in reports else reports, indent=2) + "\n")


def _evaluate_pairs(model, args):
    """A sentence-pair model on --tsv FILE (its columns those of the training data) or on the test
    sets of its config: accuracy, per-class precision, recall and F1, confusion matrix."""
    from attnmt.evaluation import config_test_sets, format_classification_report

    sets = {"": model.files_like_training(args.tsv)} if args.tsv else config_test_sets(model, args.trust_config)
    if not sets:
        raise AttnmtError(f"{args.model_dir}: its config has no test set (data.test); give --tsv FILE")
    reports = {name: model.evaluate(files, args.batch_size or 64, args.max_tokens, log=_log)
               for name, files in sets.items()}
    _write_reports(reports, args, "predictions", format_classification_report)


def _evaluate_speech(model, args):
    """CER and WER (and by length) of a speech model on a TSV of audio files and transcripts (--tsv), or
    on the test sets of its config."""
    from attnmt.core.config import CorpusFiles
    from attnmt.evaluation import config_test_sets
    from attnmt.speech.error_rates import format_speech_report, speech_test_set_reports

    if args.src:
        raise AttnmtError(f"{args.model_dir} is a speech model: give --tsv FILE (audio path TAB transcript), or "
                          "nothing to score the test sets of its config")
    sets = {"": CorpusFiles(tsv=args.tsv)} if args.tsv else config_test_sets(model, args.trust_config)
    if not sets:
        raise AttnmtError(f"{args.model_dir}: its config has no test set (data.test); give --tsv FILE")
    reports = speech_test_set_reports(model, sets, beam=args.beam, batch_size=args.batch_size, log=_log,
                                      progress=True)
    _write_reports(reports, args, "hypotheses", format_speech_report)


def _warn_if_tabular(sources: list[str], path: str):
    """A TSV file given as --src is translated whole, columns and all: say so loudly."""
    tabbed = sum("\t" in line for line in sources)
    if tabbed > len(sources) / 2:
        _log(f"attnmt: WARNING: {tabbed:,} of the {len(sources):,} lines of {path} contain a tab: is it a TSV file? "
             "Its lines are translated whole, columns and all; to score one column against another, give it as "
             "--tsv FILE (--src-column, --tgt-column)")


def cmd_export(args):
    from attnmt.translation.export import export_ct2

    out = export_ct2(args.model_dir, args.ct2, quantization=args.quantization, force=args.force)
    _log(f"CTranslate2 model in {out}")


def cmd_quickstart(args):
    if args.pairs:
        from attnmt.pairs.quickstart import run_pair_quickstart

        folder = args.dir or "runs/quickstart-pairs"
        run_pair_quickstart(Path(folder), **({"steps": args.steps} if args.steps else {}), log=_log)
        return
    if args.speech:
        from attnmt.speech.quickstart import run_speech_quickstart

        run_speech_quickstart(Path(args.dir or "runs/quickstart-speech"), steps=args.steps or 800,
                              attention=args.attention or "location", log=_log)
        return
    from attnmt.translation.quickstart import run_quickstart

    run_quickstart(Path(args.dir or "runs/quickstart"), steps=args.steps or 500, attention=args.attention or "bahdanau",
                   log=_log)


def cmd_align(args):
    from attnmt.api import load
    from attnmt.translation.align import align, align_both_ways, format_pharaoh

    sources, targets = _read_line_pairs(args.src, args.tgt)
    model = load(args.model_dir, args.checkpoint, device=args.device)
    options = dict(batch_size=args.batch_size, method=args.method, threshold=args.threshold, shift=args.shift,
                   layer=args.layer, heads=args.heads)
    if args.backward:
        backward = load(args.backward, args.checkpoint, device=args.device)
        links = align_both_ways(model, backward, sources, targets, args.symmetrize, **options)
    else:
        links = align(model, sources, targets, **options)
    out = _open_output(args.output)
    try:
        for pair_links in links:
            out.write(format_pharaoh(pair_links) + "\n")
    finally:
        if out is not sys.stdout:
            out.close()


def cmd_compare(args):
    from attnmt.compare import compare

    try:
        join = tuple(int(k) for k in args.join.split(",")) if args.join else ()
    except ValueError:
        raise AttnmtError(f"--join {args.join}: expected whole numbers, e.g. 2,3,4") from None
    compare(args.config, args.out, varies=args.vary, variants=args.variant, steps=args.steps, minutes=args.minutes,
            seeds=args.seeds, resume=args.resume, join=join, beam=args.beam, align_pairs=args.align_pairs,
            align_gold=args.align_gold, one_based=args.one_based, both_directions=args.both_directions,
            threshold=args.align_threshold, example=args.example, log=_log, progress=not args.no_progress)


def cmd_align_score(args):
    from attnmt.translation.align import score_files

    scores = score_files(args.gold, args.hyp, one_based=args.one_based)
    if args.json == "-":
        print(json.dumps(scores, indent=2))
        return
    if args.json:
        _write_text(args.json, json.dumps(scores, indent=2) + "\n")
    print(f"AER        {scores['aer']:.4f}\nprecision  {scores['precision']:.4f}\n"
          f"recall     {scores['recall']:.4f}\nsentences  {scores['sentences']}")


def _head_list(text: str) -> list[int]:
    try:
        heads = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected head numbers separated by commas (e.g. 0,2), got {text!r}") \
            from None
    if any(h < 0 for h in heads):
        raise argparse.ArgumentTypeError(f"head numbers count from 0, got {text!r}")
    return heads


def _port(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be between 1 and 65535, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {text}")
    return value


def cmd_serve(args):
    from attnmt.serve import ServerLimits, create_app, is_loopback, run_server, url_of
    from attnmt.serve.models import model_entry

    limits = ServerLimits(max_body_bytes=args.max_body_bytes, max_sentences=args.max_sentences,
                          max_chars=args.max_chars, max_tokens=args.max_tokens, max_beam=args.max_beam,
                          max_work=args.max_work, max_answer_values=args.max_answer_values,
                          timeout=args.timeout, max_batch=1 if args.no_batching else args.max_batch,
                          batch_wait=args.max_batch_wait / 1000, max_audio_bytes=args.max_audio_bytes,
                          max_audio_seconds=args.max_audio_seconds)
    bound = [] if args.host in ("0.0.0.0", "::", "[::]", "") else [args.host]  # one address: its name is trusted
    app = create_app([model_entry(d) for d in args.model_dir], limits, device=args.device,
                     allowed_hosts=bound + args.allowed_host)
    if not is_loopback(args.host):
        _log(f"warning: listening on {args.host}, reachable from other machines; the server has no "
             "authentication and no TLS: expose it only behind a reverse proxy")
    url = url_of(args.host, args.port)
    print(f"attnmt: serving {', '.join(app.state.models)} at {url} (API documentation: {url}docs)", flush=True)
    run_server(app, host=args.host, port=args.port, log_level=args.log_level)


def cmd_info(args):
    from attnmt.info import format_info, model_info

    info = model_info(args.model_dir)
    print(json.dumps(info, indent=2) if args.json else format_info(info))


def cmd_plot(args):
    """Figures of one sentence (heatmap, encoder states, decoder steps, GIF) and/or training curves:
    the options as a FigureRequest; attnmt.viz.plan chooses, checks and builds the figures."""
    from attnmt.viz.plan import FigureRequest, plan_figures

    steps = []
    for number, path in args.step or []:
        try:
            steps.append((int(number), path))
        except ValueError:
            raise AttnmtError(f"--step {number} {path}: the step must be a whole number (counting from 0)") from None
    request = FigureRequest(args.model_dir, args.sentence, out=args.out, merge_words=args.merge_words,
                            beam=args.beam, checkpoint=args.checkpoint, states=args.states, dims=args.dims,
                            steps=steps, top_k=args.top_k, gif=args.gif, fps=args.fps, curves=args.curves,
                            head_view=args.head_view, grid=args.grid, kind=args.kind, layer=args.layer,
                            head=args.head, device=args.device, hypothesis=args.hypothesis,
                            direction=args.direction)
    for write in plan_figures(request):
        print(write(), flush=True)


def _log(message: str):
    print(message, file=sys.stderr, flush=True)


def build_parser() -> argparse.ArgumentParser:
    from attnmt import __version__

    parser = argparse.ArgumentParser(prog="attnmt", description="Neural machine translation with attention.")
    parser.add_argument("--version", action="version", version=f"attnmt {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("prepare", help="train the subword model(s) of an experiment")
    p.add_argument("config", help="experiment YAML file")
    p.add_argument("--force", action="store_true", help="retrain subwords even if present")
    p.set_defaults(func=cmd_prepare)

    p = sub.add_parser("train", help="train a model (prepares subwords first if needed)")
    p.add_argument("config", help="experiment YAML file")
    p.add_argument("--resume", action="store_true", help="continue from last.safetensors")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--device", choices=["cpu", "cuda"],
                   help="where to train (default: training.device of the config, cpu)")
    threads_option(p)
    p.set_defaults(func=cmd_train)

    def device_option(p):
        p.add_argument("--device", default="cpu", help="where the model runs: cpu (default), cuda or cuda:N "
                                                       "(GPU figures: docs/performance.md)")

    def decoding_options(p):
        p.add_argument("model_dir", help="folder of a trained model (its experiment_dir)")
        p.add_argument("--beam", type=_beam, default=None,
                       help=f"beam size, 1 (greedy) to {MAX_BEAM} (default: config)")
        p.add_argument("--batch-size", type=_positive, default=None, help="sentences per batch")
        p.add_argument("--checkpoint", choices=["best", "last"], default="best")
        p.add_argument("--max-tokens", type=_positive, default=MAX_TOKENS,
                       help=f"a line of more subword tokens is cut to this many, with a warning (default {MAX_TOKENS})")
        p.add_argument("--attention-window", type=window_argument, metavar="LEFT,RIGHT",
                       help="RNN attention: each step attends only within LEFT positions before and RIGHT after the "
                            "median of the previous step's weights (as in Chorowski et al. 2014; default: config, "
                            "decoding.attention_window)")
        p.add_argument("--shortlist", nargs="?", const="", metavar="FILE",
                       help="vocabulary shortlist: the output layer scores only the likely target pieces of each "
                            "batch (MODEL_DIR/shortlist.json, or FILE; build it with 'attnmt shortlist MODEL_DIR'; "
                            "default: config, decoding.shortlist)")
        device_option(p)
        reduced = p.add_mutually_exclusive_group()
        reduced.add_argument("--int8", action="store_true",
                             help="dynamic int8 quantization of the linear layers, for CPU translation; "
                                  "BLEU unchanged within a few tenths (docs/performance.md)")
        reduced.add_argument("--bf16", action="store_true",
                             help="the output layer's product in bfloat16 (faster beam search on CPUs "
                                  "with AVX512-BF16/AMX; a few translations change)")

    p = sub.add_parser("translate", help="translate lines from a file or stdin (speech models: lines of sound "
                                         "file paths, transcribed)")
    decoding_options(p)
    p.add_argument("-i", "--input", help="input file (plain or .gz); default stdin")
    p.add_argument("-o", "--output", help="output file; default stdout")
    p.add_argument("--n-best", type=_positive, default=1, help="write the N best ('i ||| text ||| score')")
    p.add_argument("--report-align", action="store_true",
                   help="write each output's word links after ' ||| ' (Pharaoh 'i-j': source word i, output word j, "
                        "0-based; '</s>' left out), as OpenNMT-py does")
    p.add_argument("--align-file", metavar="FILE",
                   help="write the word links to FILE, one line per output line (without --report-align: only there)")
    p.add_argument("--align-method", choices=["argmax", "threshold"], default="argmax",
                   help="argmax: each output word to its most attended source word; threshold: every link with "
                        "weight >= --align-threshold")
    p.add_argument("--align-threshold", type=float, default=0.5, help="for --align-method threshold")
    p.set_defaults(func=cmd_translate)

    p = sub.add_parser("evaluate", help="sacreBLEU and chrF against references, BLEU by source length (speech "
                                        "models: CER and WER, by length); by default on every test set of the "
                                        "model's config (data.test)")
    decoding_options(p)
    p.add_argument("--src", help="source file (with --ref)")
    p.add_argument("--ref", help="reference translations, line by line")
    p.add_argument("--tsv", help="a TSV test set: source and reference columns (instead of --src/--ref); of a "
                                 "sentence-pair model: premise, hypothesis and label columns as in its training data")
    p.add_argument("--src-column", type=int, default=0, help="of --tsv, counting from 0 (default 0)")
    p.add_argument("--tgt-column", type=int, default=1, help="of --tsv (default 1)")
    p.add_argument("--json", help="also write the report as JSON to this file (several test sets: {name: report})")
    p.add_argument("--hypotheses", help="also write the translations (or predicted labels) to this file (several test "
                                        "sets: FILE.NAME)")
    p.add_argument("--trust-config", action="store_true",
                   help="read the test sets that the folder's config names outside the folder (a folder you trained: "
                        "without it, a model folder cannot make attnmt read other files; see docs/security.md)")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("shortlist", help="the lexical table of a translation model for vocabulary shortlists "
                                         "(MODEL_DIR/shortlist.json), from eflomal's word links of its training corpus")
    p.add_argument("model_dir", help="folder of a trained translation model; its config names the training corpus")
    p.add_argument("--top", type=_positive, default=50, help="target pieces kept per source piece (default 50)")
    p.add_argument("--frequent", type=_positive, default=100,
                   help="most frequent target pieces, always in the shortlist (default 100)")
    p.set_defaults(func=cmd_shortlist)

    p = sub.add_parser("classify", help="sentence-pair model: premise<TAB>hypothesis lines -> label and "
                                        "probabilities, one output line per input line")
    p.add_argument("model_dir", help="folder of a trained sentence-pair model (task: pairs)")
    p.add_argument("--batch-size", type=_positive, default=None, help="pairs per batch")
    p.add_argument("--checkpoint", choices=["best", "last"], default="best")
    p.add_argument("--max-tokens", type=_positive, default=MAX_TOKENS,
                   help=f"a sentence of more subword tokens is cut to this many, with a warning (default {MAX_TOKENS})")
    device_option(p)
    p.add_argument("-i", "--input", help="input file (plain or .gz); default stdin")
    p.add_argument("-o", "--output", help="output file; default stdout")
    p.set_defaults(func=cmd_classify)

    p = sub.add_parser("export", help="export a Transformer to CTranslate2 (pip install 'attnmt[ct2]')")
    p.add_argument("model_dir", help="folder of a trained Transformer model")
    p.add_argument("--ct2", required=True, metavar="OUT_DIR", help="the CTranslate2 model folder to write")
    p.add_argument("--quantization", choices=["int8", "int8_float32", "int16", "float16", "bfloat16"],
                   help="store the weights quantized (default float32; CTranslate2 can also quantize "
                        "when loading, with compute_type)")
    p.add_argument("--force", action="store_true", help="replace OUT_DIR if it exists")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("quickstart", help="train a small attention model on dates (or, with --speech, on speech "
                                          "synthesized with espeak-ng) and show its attention")
    p.add_argument("--dir", help="where data, model and figures go (default runs/quickstart, runs/quickstart-pairs "
                                 "with --pairs, runs/quickstart-speech with --speech)")
    p.add_argument("--steps", type=_positive, help="training steps (default 500; --pairs 600; --speech 800)")
    p.add_argument("--attention", help="attention variant (default bahdanau; --speech location)")
    p.add_argument("--pairs", action="store_true", help="instead: the decomposable attention model on a synthetic "
                                                        "sentence-pair task (entailment, contradiction, neutral)")
    p.add_argument("--speech", action="store_true", help="instead: speech recognition with location-aware attention "
                                                          "on speech synthesized with espeak-ng (docs/speech.md)")
    threads_option(p)
    p.set_defaults(func=cmd_quickstart)

    p = sub.add_parser("align", help="word alignments from the attention of forced decoding (Pharaoh format)")
    p.add_argument("model_dir", help="folder of a trained model (its experiment_dir)")
    p.add_argument("--src", required=True, help="source sentences")
    p.add_argument("--tgt", required=True, help="their translations, line by line")
    p.add_argument("-o", "--output", help="output file; default stdout")
    p.add_argument("--batch-size", type=_positive, default=32, help="sentence pairs per batch")
    p.add_argument("--checkpoint", choices=["best", "last"], default="best")
    device_option(p)
    p.add_argument("--method", choices=["argmax", "threshold"], default="argmax",
                   help="argmax: each target word to its most attended source word; "
                        "threshold: every link with weight >= --threshold")
    p.add_argument("--threshold", type=float, default=0.5, help="for --method threshold")
    p.add_argument("--shift", action="store_true", help="read each target word's links from the step after it "
                                                        "(Shift-Att, Chen et al. 2020)")
    p.add_argument("--layer", type=int, help="Transformer: the decoder layer whose cross-attention is read "
                                             "(negative: from the last; default the last)")
    p.add_argument("--heads", type=_head_list, help="Transformer: those heads of it, averaged (e.g. 0,2; default all)")
    p.add_argument("--backward", metavar="MODEL_DIR", help="a target->source model: its links, turned around, are "
                                                             "symmetrized with the forward model's")
    p.add_argument("--symmetrize", choices=["intersection", "union", "grow-diag-final"], default="grow-diag-final",
                   help="with --backward (default grow-diag-final)")
    p.set_defaults(func=cmd_align)

    p = sub.add_parser("align-score", help="AER, precision and recall of word alignments against a gold file")
    p.add_argument("--gold", required=True, help="gold alignments: i-j sure, i?j or ipj possible links")
    p.add_argument("--hyp", required=True, help="hypothesis alignments (Pharaoh, 0-based)")
    p.add_argument("--one-based", action="store_true", help="the gold file counts words from 1")
    p.add_argument("--json", nargs="?", const="-",
                   help="print the scores as JSON (or, with a file name, also write them there)")
    p.set_defaults(func=cmd_align_score)

    p = sub.add_parser("compare", help="train variants of a config on the same data, subwords and budget; score them "
                                       "side by side (docs/experiments.md)")
    p.add_argument("config", help="experiment YAML file (its data.test: the test sets)")
    p.add_argument("--vary", action="append", default=[], metavar="FIELD=V1,V2",
                   help="a grid: every combination of the values of each --vary")
    p.add_argument("--variant", action="append", default=[], metavar="NAME:FIELD=V,... | NAME=OVERRIDES.yaml",
                   help="one variant: fields set inline, or a partial config merged over CONFIG")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--steps", type=_positive, help="training steps of every run (default: the config's limits)")
    budget.add_argument("--minutes", type=_positive_float, help="minutes of training of every run")
    p.add_argument("--seeds", type=_positive, default=1, help="runs per variant, seeds training.seed, +1, ...")
    p.add_argument("--out", required=True, help="folder of the runs and the results")
    p.add_argument("--resume", action="store_true", help="continue an unfinished run (finished ones are skipped)")
    p.add_argument("--join", default="", metavar="K,K", help="also score each test set with consecutive sentences "
                                                               "joined K at a time, e.g. 2,3,4")
    p.add_argument("--beam", type=_beam, help="beam of the test translations (default: config)")
    p.add_argument("--align-pairs", metavar="FILE", help="'source ||| target' lines of a word-alignment gold set: "
                                                         "their text is added to the training text")
    p.add_argument("--align-gold", metavar="FILE", help="their gold links (i-j sure, ipj possible): AER per variant")
    p.add_argument("--one-based", action="store_true", help="the gold links count words from 1")
    p.add_argument("--both-directions", action="store_true",
                   help="also train each run target->source, for symmetrized alignments")
    p.add_argument("--align-threshold", type=float, default=0.5, help="weight of a link for threshold alignments")
    p.add_argument("--example", type=_positive, default=1, help="line of the first test set drawn in attention.png")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_compare)

    from attnmt.serve.limits import ServerLimits  # without FastAPI: cheap to import

    limits = ServerLimits()  # the defaults of the limits are those of create_app
    p = sub.add_parser("serve", help="the explorer page (at /: translate, heatmaps, step through the decoding, beam "
                                     "tree, compare models) and the HTTP API (/docs); loopback by default",
                       description="Serves the explorer page at http://HOST:PORT/ (type a sentence, see its "
                                   "attention, step through the decoding, compare models: docs/explorer.md) and the "
                                   "HTTP API (POST /translate, /trace, /beam, ...; OpenAPI documentation at /docs: "
                                   "docs/http-api.md).")
    p.add_argument("model_dir", nargs="+", metavar="[NAME=]DIR",
                   help="trained model folder(s), named after the folder or NAME (letters, digits, . - _)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=_port, default=8000)
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="a Host header to answer besides localhost, 127.0.0.1 and [::1] (and --host): the name "
                        "clients use behind a proxy; may be repeated")
    device_option(p)
    p.add_argument("--max-body-bytes", type=_positive, default=limits.max_body_bytes,
                   help="larger request bodies get 413 (with a speech model, plus one sound file of "
                        "--max-audio-bytes in base64)")
    p.add_argument("--max-sentences", type=_positive, default=limits.max_sentences, help="texts per /translate request")
    p.add_argument("--max-chars", type=_positive, default=limits.max_chars, help="characters per text")
    p.add_argument("--max-tokens", type=_positive, default=limits.max_tokens,
                   help="subword tokens per text (after encoding)")
    p.add_argument("--max-beam", type=_positive, default=limits.max_beam,
                   help="largest beam (and n_best) a request may ask")
    p.add_argument("--max-work", type=_positive, default=limits.max_work,
                   help="beam x (subword tokens + 1), summed over the texts of a request (and of a batch)")
    p.add_argument("--max-answer-values", type=_positive, default=limits.max_answer_values,
                   help="numbers in one answer (attention weights, vectors); 422 beyond")
    p.add_argument("--timeout", type=_positive_float, default=limits.timeout,
                   help="seconds per request from its arrival; 503 beyond")
    p.add_argument("--max-batch", type=_positive, default=limits.max_batch,
                   help="sentences of concurrent /translate requests decoded together (dynamic batching)")
    p.add_argument("--max-batch-wait", type=_non_negative_float, default=limits.batch_wait * 1000, metavar="MS",
                   help="a batch is decoded once no request has come for this many milliseconds")
    p.add_argument("--no-batching", action="store_true",
                   help="decode one /translate request at a time (same as --max-batch 1)")
    p.add_argument("--max-audio-bytes", type=_positive, default=limits.max_audio_bytes,
                   help="speech models: bytes of one sound file (sent as base64, for which the body limit makes room)")
    p.add_argument("--max-audio-seconds", type=_positive_float, default=limits.max_audio_seconds,
                   help="speech models: seconds of one sound file")
    threads_option(p)
    p.add_argument("--log-level", choices=["critical", "error", "warning", "info", "debug"], default="info")
    p.set_defaults(func=cmd_serve)
    p = sub.add_parser("plot", help="draw attention (heatmap, encoder states, decoder steps, GIF animation, HTML "
                                    "heatmap) or training curves into PNG, SVG, GIF or HTML files",
                       description="Figures of one sentence and of training, each written to the file its option "
                                   "names: PNG or SVG (by the suffix), --gif FILE.gif (the decoding as an "
                                   "animation), --out FILE.html (the heatmap as a standalone HTML page). "
                                   "See docs/visualization.md.")
    p.add_argument("model_dir", help="folder of a trained model; for --curves alone also a metrics.jsonl file")
    p.add_argument("sentence", nargs="?", help="source sentence to translate and draw (speech models: a sound "
                                               "file, drawn with its spectrogram)")
    device_option(p)
    p.add_argument("--out", metavar="FILE", help="attention heatmap (.png, .svg or .html; default "
                                                 "attention.png when no other figure is asked for)")
    p.add_argument("--merge-words", action="store_true",
                   help="heatmap of words instead of subword pieces (source pieces summed, target averaged)")
    p.add_argument("--beam", type=_positive, default=None, help="beam size of the heatmap's translation "
                                                                 "(default: config); the other figures are greedy")
    p.add_argument("--checkpoint", choices=["best", "last"], default="best")
    p.add_argument("--states", metavar="FILE", help="encoder states and context vectors (.png or .svg)")
    p.add_argument("--dims", type=int, default=32,
                   help="dimensions drawn by --states: the N that vary most (0 = all; default 32)")
    p.add_argument("--step", nargs=2, action="append", metavar=("K", "FILE"),
                   help="decoder step K (counting from 0) in detail (.png or .svg); may be repeated")
    p.add_argument("--top-k", type=_positive, default=5, help="next-token candidates shown by --step")
    p.add_argument("--gif", metavar="FILE", help="animated GIF of the decoding, one frame per step (.gif)")
    p.add_argument("--fps", type=float, default=1.0, help="frames per second of --gif")
    p.add_argument("--curves", metavar="FILE",
                   help="training curves (loss, perplexity, BLEU) from MODEL_DIR/metrics.jsonl (.png or .svg)")
    p.add_argument("--head-view", metavar="FILE", help="Transformer: head view of --layer and --head, lines "
                                                       "from query to key tokens, opacity = weight (.png or .svg)")
    p.add_argument("--grid", metavar="FILE", help="Transformer: every layer x head of --kind as small heatmaps "
                                                  "(.png or .svg)")
    p.add_argument("--kind", choices=["encoder", "decoder", "cross"], default=None,
                   help="Transformer: which attention --head-view and --grid draw (default cross)")
    p.add_argument("--layer", type=int, default=None,
                   help="Transformer: layer of --head-view, counting from 0 (default: the last)")
    p.add_argument("--head", type=int, default=None,
                   help="Transformer: head of --head-view, counting from 0 (default: the average of the heads)")
    p.add_argument("--hypothesis", help="a sentence-pair model: the hypothesis (SENTENCE is the premise); --out draws "
                                        "attend, compare (--dims) and aggregate")
    p.add_argument("--direction", choices=["premise", "hypothesis"], default="premise",
                   help="a sentence-pair model: the softmax drawn, over the hypothesis for each premise word "
                        "(default) or over the premise for each hypothesis word")
    p.set_defaults(func=cmd_plot)

    p = sub.add_parser("info", help="what a trained model folder holds: task, model, parameters, vocabularies, "
                                    "data, training and scores")
    p.add_argument("model_dir", help="folder of a trained model (its experiment_dir)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_info)
    return parser


def threads_option(p):
    p.add_argument("--threads", type=_positive,
                   help="CPU threads (default: the usable cores that other work leaves free, at least one)")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        from attnmt.core import threads

        threads.choose(getattr(args, "threads", None), _log)  # --threads, or a fair share of the machine
        args.func(args)
    except AttnmtError as e:
        print(f"attnmt: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("attnmt: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `attnmt translate ... | head`
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
