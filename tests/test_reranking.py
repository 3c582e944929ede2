"""Reranking a beam's candidates with a backward model: the order is that of
log p_f(y|x)/|y| + weight log p_b(x|y)/|x|, and `attnmt translate --rerank` writes it. The reverse-string
model is its own backward model (reversing is its own inverse)."""

import pytest

from attnmt.cli import main
from attnmt.core.errors import AttnmtError
from attnmt.translation.reranking import rerank


@pytest.mark.parametrize("weight", [0.0, 0.25, 10.0])
def test_candidates_are_ordered_by_the_combined_score(reverse_model, weight):
    translator, dev = reverse_model
    texts = dev[:6] + [""]
    translations = translator.translate(texts, beam=4, n_best=4)
    reranked = rerank(translator, translator, translations, weight)
    for before, after in zip(translations[:-1], reranked[:-1]):
        outputs = [c.text for c in before.candidates]
        forward = translator.score([before.source] * len(outputs), outputs)
        backward = translator.score(outputs, [before.source] * len(outputs))
        expected = {y: f.per_token + weight * b.per_token for y, f, b in zip(outputs, forward, backward)}
        assert sorted(c.text for c in after.candidates) == sorted(outputs)  # the same candidates, reordered
        assert [c.score for c in after.candidates] == pytest.approx(sorted(expected.values(), reverse=True), abs=1e-5)
        assert all(c.score == pytest.approx(expected[c.text], abs=1e-5) for c in after.candidates)
    assert reranked[-1] == translations[-1]  # an empty source: nothing to rerank


def test_a_classifier_cannot_rerank(reverse_model, pair_model):
    from attnmt.api import load

    translator, dev = reverse_model
    with pytest.raises(AttnmtError, match="the backward model of a reranking is a sentence-pair classifier"):
        rerank(translator, load(pair_model), translator.translate(dev[:2], beam=2, n_best=2))


def test_translate_rerank_writes_the_reranked_n_best(reverse_model, tmp_path, capsys):
    translator, dev = reverse_model
    src = tmp_path / "src.txt"
    src.write_text("\n".join(dev[:4]) + "\n", encoding="utf-8")
    folder = str(translator.folder)
    assert (
        main(
            [
                "translate",
                folder,
                "-i",
                str(src),
                "--beam",
                "3",
                "--n-best",
                "2",
                "--rerank",
                folder,
                "--rerank-weight",
                "0.5",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    expected = rerank(translator, translator, translator.translate(dev[:4], beam=3, n_best=3), 0.5)
    assert lines == [f"{i} ||| {c.text} ||| {c.score:.4f}" for i, t in enumerate(expected) for c in t.candidates[:2]]
    assert main(["translate", folder, "-i", str(src), "--beam", "3", "--rerank", folder]) == 0
    assert capsys.readouterr().out.splitlines() == [
        t.candidates[0].text for t in rerank(translator, translator, translator.translate(dev[:4], beam=3, n_best=3))
    ]
    for argv, message in (
        (["--beam", "1", "--rerank", folder], "a --beam of 2 or more"),
        (["--rerank-weight", "1"], "give --rerank DIR too"),
    ):
        assert main(["translate", folder, "-i", str(src), *argv]) == 2
        assert message in capsys.readouterr().err


def test_evaluate_rerank_scores_the_reranked_best(reverse_model, tmp_path, capsys):
    """--rerank in evaluate: on --src/--ref and on the config's test sets, the hypotheses are the
    reranked best of the beam."""
    import json

    translator, dev = reverse_model
    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text("\n".join(dev[:5]) + "\n", encoding="utf-8")
    ref.write_text("\n".join(s[::-1] for s in dev[:5]) + "\n", encoding="utf-8")
    folder = str(translator.folder)
    # a weight against the backward model: the reranked best differs from the beam's (so the test can fail)
    expected = [
        t.candidates[0].text
        for t in rerank(translator, translator, translator.translate(dev[:5], beam=3, n_best=3), -5.0)
    ]
    assert expected != [t.text for t in translator.translate(dev[:5], beam=3)]
    assert (
        main(
            [
                "evaluate",
                folder,
                "--src",
                str(src),
                "--ref",
                str(ref),
                "--beam",
                "3",
                "--rerank",
                folder,
                "--rerank-weight",
                "-5",
                "--hypotheses",
                str(tmp_path / "hyp.txt"),
            ]
        )
        == 0
    ), capsys.readouterr().err
    assert (tmp_path / "hyp.txt").read_text(encoding="utf-8").splitlines() == expected
    tsv = tmp_path / "test.tsv"
    tsv.write_text("".join(f"{s}\t{s[::-1]}\n" for s in dev[:5]), encoding="utf-8")
    assert (
        main(
            [
                "evaluate",
                folder,
                "--tsv",
                str(tsv),
                "--beam",
                "3",
                "--rerank",
                folder,
                "--rerank-weight",
                "-5",
                "--json",
                str(tmp_path / "report.json"),
                "--hypotheses",
                str(tmp_path / "tsv-hyp.txt"),
            ]
        )
        == 0
    ), capsys.readouterr().err
    assert (tmp_path / "tsv-hyp.txt").read_text(encoding="utf-8").splitlines() == expected  # (the test-set path)
    assert json.loads((tmp_path / "report.json").read_text())["beam"] == 3
    assert main(["evaluate", folder, "--tsv", str(tsv), "--rerank-weight", "2"]) == 2
    assert "give --rerank DIR too" in capsys.readouterr().err
