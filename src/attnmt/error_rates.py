"""Speech recognition scores: character and word error rates (jiwer), overall and by the length
of the reference in words.

    WER = (substituted + deleted + inserted words) / words of the references
    CER = the same over characters (spaces included)

Both are corpus rates (total edits over total reference length), in percent; they can exceed
100 when a recogniser inserts much.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from attnmt.evaluation import _bucket_edges, _bucket_label, _check_parallel


def _measures(hypotheses: list[str], references: list[str]) -> dict:
    import jiwer

    words = jiwer.process_words(references, hypotheses)
    chars = jiwer.process_characters(references, hypotheses)
    return {"cer": 100 * chars.cer, "wer": 100 * words.wer}


def error_rates(hypotheses: list[str], references: list[str]) -> dict:
    """{"cer", "wer"} in percent; empty hypotheses count as all deletions."""
    _check_parallel(hypotheses=hypotheses, references=references)
    return _measures([" ".join(h.split()) for h in hypotheses], [" ".join(r.split()) for r in references])


def error_rates_by_length(hypotheses: list[str], references: list[str], width: int = 1,
                          max_low: int = 10) -> list[dict]:
    """CER and WER of the utterances whose reference has [low, high) words, for each bucket;
    empty buckets are left out."""
    _check_parallel(hypotheses=hypotheses, references=references)
    buckets = []
    for low, high in _bucket_edges(width, max_low):
        members = [i for i, r in enumerate(references)
                   if len(r.split()) >= low and (high is None or len(r.split()) < high)]
        if members:
            rates = error_rates([hypotheses[i] for i in members], [references[i] for i in members])
            buckets.append({"low": low, "high": high, "utterances": len(members), **rates})
    return buckets


def speech_report(hypotheses: list[str], references: list[str]) -> dict:
    return {**error_rates(hypotheses, references), "utterances": len(references),
            "by_length": error_rates_by_length(hypotheses, references)}


def format_speech_report(report: dict) -> str:
    lines = [f"CER {report['cer']:.2f}%  WER {report['wer']:.2f}%  ({report['utterances']} utterances)", "",
             "reference words | utterances |    CER |    WER", "----------------+------------+--------+-------"]
    for b in report["by_length"]:
        lines.append(f"{_bucket_label(b['low'], b['high']):<15} | {b['utterances']:>10} | {b['cer']:>6.2f} | "
                     f"{b['wer']:>6.2f}")
    return "\n".join(lines)


def speech_test_set_reports(recognizer, sets: dict, beam: int | None = None, batch_size: int | None = None,
                            log=print, cache: Path | None = None) -> dict[str, dict]:
    """Each test set of ``sets`` (name -> config.CorpusFiles with a TSV of audio and transcripts)
    transcribed by ``recognizer`` (attnmt.recognizer.Recognizer) and scored: name -> speech_report,
    with the beam and the hypotheses. ``cache``: a folder caching the features as test-NAME.safetensors."""
    reports = {}
    for name, files in sets.items():
        cached = cache / f"test-{quote(name, safe='')}.safetensors" if cache is not None else None
        corpus = recognizer.read_corpus(files.tsv, log=log, cache=cached)
        hypotheses = [t.text for t in recognizer.transcribe_features(corpus.features, beam=beam,
                                                                     batch_size=batch_size)]
        reports[name] = {**speech_report(hypotheses, corpus.texts), "beam": beam or recognizer.config.decoding.beam,
                         "skipped": len(corpus.skipped), "hypotheses": hypotheses}
    return reports
