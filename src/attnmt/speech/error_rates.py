"""Speech recognition scores: character and word error rates (jiwer), overall and by the length
of the reference in words.

    WER = (substituted + deleted + inserted words) / words of the references
    CER = the same over characters (spaces included)

Both are corpus rates (total edits over total reference length), in percent; they can exceed
100 when a recogniser inserts much.

And, for utterances joined from known pieces (attnmt.speech.corpora.read_pieces), whether the
attention keeps its place: the share of characters whose attention, while the model is forced to
write the reference, peaks in the piece of audio that says them (``place_kept``).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import numpy as np

from attnmt.core.scoring import bucket_label, check_parallel, length_buckets


def _measures(hypotheses: list[str], references: list[str]) -> dict:
    import jiwer

    words = jiwer.process_words(references, hypotheses)
    chars = jiwer.process_characters(references, hypotheses)
    return {"cer": 100 * chars.cer, "wer": 100 * words.wer}


def error_rates(hypotheses: list[str], references: list[str]) -> dict:
    """{"cer", "wer"} in percent; empty hypotheses count as all deletions."""
    check_parallel(hypotheses=hypotheses, references=references)
    return _measures([" ".join(h.split()) for h in hypotheses], [" ".join(r.split()) for r in references])


def error_rates_by_length(
    hypotheses: list[str], references: list[str], width: int = 1, max_low: int = 10
) -> list[dict]:
    """CER and WER of the utterances whose reference has [low, high) words, for each bucket;
    empty buckets are left out."""
    check_parallel(hypotheses=hypotheses, references=references)
    buckets = []
    for low, high in length_buckets(width, max_low):
        members = [
            i for i, r in enumerate(references) if len(r.split()) >= low and (high is None or len(r.split()) < high)
        ]
        if members:
            rates = error_rates([hypotheses[i] for i in members], [references[i] for i in members])
            buckets.append({"low": low, "high": high, "utterances": len(members), **rates})
    return buckets


def speech_report(hypotheses: list[str], references: list[str]) -> dict:
    return {
        **error_rates(hypotheses, references),
        "utterances": len(references),
        "by_length": error_rates_by_length(hypotheses, references),
    }


def format_speech_report(report: dict) -> str:
    lines = [
        f"CER {report['cer']:.2f}%  WER {report['wer']:.2f}%  ({report['utterances']} utterances)",
        "",
        "reference words | utterances |    CER |    WER",
        "----------------+------------+--------+-------",
    ]
    for b in report["by_length"]:
        lines.append(
            f"{bucket_label(b['low'], b['high']):<15} | {b['utterances']:>10} | {b['cer']:>6.2f} | {b['wer']:>6.2f}"
        )
    return "\n".join(lines)


def speech_test_set_reports(
    recognizer,
    sets: dict,
    beam: int | None = None,
    batch_size: int | None = None,
    log=print,
    cache: Path | None = None,
    progress: bool = False,
) -> dict[str, dict]:
    """Each test set of ``sets`` (name -> config.CorpusFiles with a TSV of audio and transcripts)
    transcribed by ``recognizer`` (attnmt.speech.recognizer.Recognizer) and scored: name -> speech_report,
    with the beam and the hypotheses. ``cache``: a folder caching the features as test-NAME.safetensors."""
    reports = {}
    for name, files in sets.items():
        cached = cache / f"test-{quote(name, safe='')}.safetensors" if cache is not None else None
        corpus = recognizer.read_corpus(files.tsv, log=log, cache=cached)
        hypotheses = [
            t.text
            for t in recognizer.transcribe_features(
                corpus.features, beam=beam, batch_size=batch_size, progress=f"test set {name}" if progress else None
            )
        ]
        reports[name] = {
            **speech_report(hypotheses, corpus.texts),
            "beam": beam or recognizer.config.decoding.beam,
            "skipped": len(corpus.skipped),
            "hypotheses": hypotheses,
        }
    return reports


def _words_of_pieces(pieces: list[str]) -> list[int | None]:
    """The word index of each target piece ("▁" starts a word; a lone "▁", a space, gets None)."""
    word, words = -1, []
    for piece in pieces:
        if piece.startswith("▁") or word < 0:
            word += 1
        words.append(None if piece == "▁" else word)
    return words


def nearest_piece(times: np.ndarray, spans: list[tuple[float, float]]) -> np.ndarray:
    """For each time (seconds), the index of the span nearest to it (0 inside a span)."""
    distances = np.stack([np.maximum(np.maximum(start - times, times - end), 0.0) for start, end in spans])
    return distances.argmin(0)


def place_kept(
    attention: list[np.ndarray], target_pieces: list[list[str]], pieces: list[list], seconds_per_state: float
) -> dict:
    """Of the characters of joined utterances, the share (%) whose attention row peaks on an encoder
    state nearer to their own piece of audio than to any other: overall, for each piece but the last
    by its position (1st, 2nd, ...), and for the last piece of each utterance (which the end of the
    audio gives away).

    ``attention``: per utterance (target pieces + EOS, states), as Recognizer.force_attention gives;
    ``target_pieces``: the pieces of each reference; ``pieces``: where each joined recording lies and
    how many words it says (attnmt.speech.corpora.Piece). Spaces and EOS are not counted.
    """
    kept: dict[int, list[int]] = {}  # position (0-based) -> hits; -1: the last piece
    for matrix, tokens, parts in zip(attention, target_pieces, pieces):
        owner = np.repeat(np.arange(len(parts)), [p.words for p in parts])  # word -> piece
        peaks = (matrix[: len(tokens)].argmax(1) + 0.5) * seconds_per_state  # the peak state's centre
        nearest = nearest_piece(peaks, [(p.start, p.end) for p in parts])
        for row, word in enumerate(_words_of_pieces(tokens)):
            if word is not None and word < len(owner):
                piece = int(owner[word])
                kept.setdefault(-1 if piece == len(parts) - 1 else piece, []).append(int(nearest[row] == piece))
    rate = lambda hits: 100 * sum(hits) / max(len(hits), 1)  # noqa: E731
    every = [hit for hits in kept.values() for hit in hits]
    last = kept.get(-1, [])
    return {
        "characters": len(every),
        "in_place": rate(every),
        "by_piece": [
            {"piece": k + 1, "characters": len(kept[k]), "in_place": rate(kept[k])} for k in sorted(kept) if k >= 0
        ],
        "last": {"characters": len(last), "in_place": rate(last)},
    }


def place_report(recognizer, tsv: Path, log=print) -> dict:
    """place_kept of ``recognizer`` on a joined corpus (a TSV with a pieces column)."""
    from attnmt.speech.audio import read_speech_tsv
    from attnmt.speech.corpora import read_pieces

    paths, _ = read_speech_tsv(tsv)
    by_path = dict(zip(paths, read_pieces(tsv)))
    corpus = recognizer.read_corpus(tsv, log=log)
    attention = recognizer.force_attention(corpus.features, corpus.texts)
    tokens = [recognizer.tgt_subwords.pieces(ids) for ids in recognizer.tgt_subwords.encode(corpus.texts)]
    return place_kept(
        attention,
        tokens,
        [by_path[p] for p in corpus.paths],
        recognizer.frames_per_state * recognizer.config.speech.hop_ms / 1000,
    )
