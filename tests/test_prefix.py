"""Prefix-constrained decoding: outputs begin with the given tokens and go on as the model would after
them (forced, then searched), with the model's log-probability as their score, for greedy and beam
search, sampling, shortlists and ensembles; translate(prefix=...), `attnmt translate --prefix` and
the "prefix" of POST /translate."""

import pytest
import torch

from attnmt.cli import main
from attnmt.core.config import DecodingConfig, model_config_of, Sampling
from attnmt.core.errors import AttnmtError
from attnmt.data.batching import make_batch
from attnmt.data.subwords import BOS, EOS
from attnmt.seq2seq import build_model
from attnmt.seq2seq.decoding import length_penalty
from attnmt.seq2seq.ensemble import Ensemble
from attnmt.seq2seq.prefix import FITS_CACHED, Prefixes, Spelling, split_last_word
from attnmt.seq2seq.search import columns_of, decode, with_prefix_tokens
from attnmt.seq2seq.shortlist import Shortlist
from attnmt.serve import ServerLimits, create_app
from attnmt.serve.schemas import request_models
from conftest import local_client, reverse

TRANSFORMER = {
    "type": "transformer",
    "d_model": 32,
    "heads": 4,
    "feed_forward": 64,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "dropout": 0.0,
    "attention_dropout": 0.0,
}
SETTINGS = DecodingConfig(beam=3, length_penalty=0.0, max_length_ratio=1.0, max_length_offset=4)


RNN_SIZES = {"embedding_size": 16, "encoder_hidden": 8, "decoder_hidden": 16, "attention_size": 8}


def untrained(**config):
    return build_model(
        model_config_of(
            **({} if config.get("type") == "transformer" else RNN_SIZES),
            **{"dropout": 0.0, **config},
        ),
        20,
        20,
    ).eval()


SOURCES = [[5, 6, 7], [8, 9], [10, 11, 12, 13], [4]]
PREFIXES = [[7, 7], [], [12, 5, 9, 4, 6, 8, 11, 13, 15], [19]]  # none, and one longer than its length limit


def forced_then_greedy(model, source: list[int], prefix: list[int], limit: int) -> tuple[list[int], float]:
    """The reference: the prefix fed to the decoder step by step, its log-probabilities summed, then
    the most probable token each step until EOS, which is the only token at the limit."""
    batch = make_batch([source])
    memory = model.encode(batch.src, batch.src_lengths)
    state, prev, tokens, total = model.init_state(memory), torch.tensor([BOS]), [], 0.0
    while len(tokens) < limit and (not tokens or tokens[-1] != EOS):
        step = model.decode_step(prev, state, memory)
        if len(tokens) + 1 == limit:
            token = EOS
        else:
            token = prefix[len(tokens)] if len(tokens) < len(prefix) else int(step.log_probs[0].argmax())
        total += float(step.log_probs[0, token])
        tokens.append(token)
        state, prev = step.state, torch.tensor([token])
    return tokens, total


@pytest.mark.parametrize("config", [{"attention": "bahdanau"}, TRANSFORMER], ids=["rnn", "transformer"])
def test_greedy_search_forces_each_prefix_then_goes_on_as_the_model_would(config):
    model = untrained(**config)
    batch = make_batch(SOURCES)
    with torch.inference_mode():
        found = decode(model, batch.src, batch.src_lengths, SETTINGS, beam=1, prefixes=Prefixes(PREFIXES))
        for source, prefix, [hypothesis] in zip(SOURCES, PREFIXES, found):
            limit = max(len(source) + 1 + 4, len(prefix) + 4)  # ratio 1, offset 4; at least prefix + offset
            tokens, log_prob = forced_then_greedy(model, source, prefix, limit)
            assert hypothesis.tokens == tokens and hypothesis.tokens[: len(prefix)] == prefix
            assert hypothesis.log_prob == pytest.approx(log_prob, abs=1e-4)


@pytest.mark.parametrize("config", [{"attention": "bahdanau"}, TRANSFORMER], ids=["rnn", "transformer"])
def test_every_beam_hypothesis_begins_with_its_prefix_and_scores_as_the_model_does(config):
    model = untrained(**config)
    batch = make_batch(SOURCES)
    with torch.inference_mode():
        found = decode(model, batch.src, batch.src_lengths, SETTINGS, beam=3, n_best=3, prefixes=Prefixes(PREFIXES))
        free = decode(model, batch.src[1:2], batch.src_lengths[1:2], SETTINGS, beam=3, n_best=3)
        for source, prefix, hypotheses in zip(SOURCES, PREFIXES, found):
            assert len(hypotheses) == 3 and all(h.tokens[: len(prefix)] == prefix for h in hypotheses)
            batch = make_batch([source])
            for h in hypotheses:  # its tokens' score, teacher-forced (ended by EOS or by the length limit)
                tgt_in, tgt_out = torch.tensor([[BOS] + h.tokens[:-1]]), torch.tensor([h.tokens])
                forced = model.target_log_probs(batch.src, batch.src_lengths, tgt_in, tgt_out)
                assert h.log_prob == pytest.approx(float(forced.sum()), abs=1e-4)
    assert [h.tokens for h in found[1]] == [h.tokens for h in free[0]]  # no prefix: the search as it was


def test_sampling_and_an_ensemble_keep_to_the_prefix():
    members = [untrained(attention="bahdanau"), untrained(**TRANSFORMER)]
    batch = make_batch(SOURCES)
    with torch.inference_mode():
        drawn = decode(
            members[0],
            batch.src,
            batch.src_lengths,
            SETTINGS,
            sampling=Sampling(seed=1),
            generator=torch.Generator().manual_seed(1),
            prefixes=Prefixes(PREFIXES),
        )
        together = decode(
            Ensemble(members), batch.src, batch.src_lengths, SETTINGS, beam=2, prefixes=Prefixes(PREFIXES)
        )
    for prefix, [a], [b] in zip(PREFIXES, drawn, together):
        assert a.tokens[: len(prefix)] == prefix and b.tokens[: len(prefix)] == prefix


def test_a_shortlist_gets_the_prefixs_tokens_and_their_columns():
    vocabulary = torch.tensor([0, 1, 2, 3, 7, 9])
    widened = with_prefix_tokens(vocabulary, Prefixes([[5, 9], [], [7]]))
    assert widened.tolist() == [0, 1, 2, 3, 5, 7, 9]
    assert columns_of(widened, [5, 9]) == [4, 6] and columns_of(widened, []) == []
    assert with_prefix_tokens(None, Prefixes([[5]])) is None
    spelled = with_prefix_tokens(vocabulary, Prefixes([[5], []], ["", "▁do"], Spelling(PIECES)))
    assert spelled.tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 9, 10]  # "▁d", "▁do", "▁dog", "▁"; "d" and "o" after them


def test_a_prefix_is_cut_before_the_word_it_ends_inside():
    assert split_last_word("The do") == ("The ", "do")
    assert split_last_word("The ") == ("The ", "") and split_last_word("") == ("", "")
    assert split_last_word("do") == ("", "do") and split_last_word("a\tb c\nde") == ("a\tb c\n", "de")


# ids 4-12 of a 20-piece vocabulary as text; 0-3 (PAD, UNK, BOS, EOS) and 13-19 spell nothing
PIECES = ["", "", "", "", "▁d", "▁do", "▁dog", "o", "g", "▁", "d", "s", "▁cat"] + [""] * 7


def test_a_piece_fits_a_word_if_it_starts_it_or_goes_beyond_it():
    spelling = Spelling(PIECES)
    fits = [i for i, ok in enumerate(spelling.fits("▁do").tolist()) if ok]
    assert fits == [4, 5, 6, 9]  # "▁d", "▁do", "▁dog", "▁"; not "o", "d", "▁cat", nor EOS
    assert spelling.after("▁do", 4) == "o" and spelling.after("▁do", 6) == "" and spelling.after("o", 7) == ""
    assert spelling.after("▁do", 9) == "do"


def test_the_pieces_that_fit_are_those_of_the_definition():
    """Spelling.fits finds the pieces by their text's prefixes and a sorted range (not a pass over
    the vocabulary): the same as "a piece fits if it starts what is left or goes beyond it", on
    pieces with repeated and nested texts; Spelling.starts, those that ``left`` starts with."""
    import random

    rng = random.Random(3)
    pieces = ["", "", "", ""] + ["".join(rng.choice("▁ab") for _ in range(rng.randint(1, 4))) for _ in range(300)]
    spelling = Spelling(pieces)
    for left in ["▁", "a", "▁ab", "ba▁a", "bbbbbb", "c", "▁a▁b"]:
        expected = [bool(p) and (p.startswith(left) or left.startswith(p)) for p in pieces]
        assert spelling.fits(left).tolist() == expected
        assert sorted(spelling.starts(left)) == [i for i, p in enumerate(pieces) if p and left.startswith(p)]


def test_the_spelling_cache_keeps_a_bounded_number_of_words():
    """Every request may bring new words to spell: the answers kept are at most FITS_CACHED, however
    many words were asked for, and an answer asked for again after it was dropped is the same."""
    spelling = Spelling(PIECES)
    first = spelling.fits("▁do").clone()
    for n in range(10 * FITS_CACHED):  # as many words, each its own: n in binary, 0 and 1 written d and g
        spelling.fits("▁d" + format(n, "b").replace("0", "d").replace("1", "g") + "o")
    assert spelling.fits.cache_info().currsize == FITS_CACHED
    assert torch.equal(spelling.fits("▁do"), first)


@pytest.mark.parametrize("config", [{"attention": "bahdanau"}, TRANSFORMER], ids=["rnn", "transformer"])
def test_every_search_spells_the_word_a_prefix_ends_inside(config):
    """After its whole tokens, each output's next pieces spell its word: their text starts with it,
    or it with theirs, up to the piece that reaches its end."""
    model, batch = untrained(**config), make_batch(SOURCES)
    prefixes = Prefixes([[7, 7], [], [12], []], ["▁do", "▁d", "", ""], Spelling(PIECES))
    searches = {"greedy": {"beam": 1}, "beam": {"beam": 3, "n_best": 3}, "sampling": {"sampling": Sampling(seed=2)}}
    for name, options in searches.items():
        with torch.inference_mode():
            found = decode(model, batch.src, batch.src_lengths, SETTINGS, prefixes=prefixes, **options)
        for tokens, word, hypotheses in zip(prefixes.tokens, prefixes.words, found):
            for h in hypotheses:
                assert h.tokens[: len(tokens)] == tokens, name
                text = "".join(PIECES[t] for t in h.tokens[len(tokens) : len(tokens) + len(word)])
                assert text.startswith(word) or (word.startswith(text) and len(h.tokens) == len(tokens) + len(word)), (
                    name,
                    word,
                    h.tokens,
                )
    assert found[2][0].tokens[0] == 12 and found[3][0].tokens != []  # no word: the model's own next pieces


def test_under_a_shortlist_the_prefix_and_its_word_are_written_all_the_same():
    """The shortlist allows 4, 9 and 11 only: the prefix's 7 and the word's pieces are added to it."""
    model, batch = untrained(attention="bahdanau"), make_batch(SOURCES)
    table = Shortlist([[] for _ in range(20)], [9, 11])
    prefixes = Prefixes([[7], [12, 7], [], []], ["▁dog", "", "▁c", ""], Spelling(PIECES))
    for options in ({"beam": 1}, {"beam": 3, "n_best": 2}):
        with torch.inference_mode():
            found = decode(model, batch.src, batch.src_lengths, SETTINGS, shortlist=table, prefixes=prefixes, **options)
        for tokens, word, hypotheses in zip(prefixes.tokens, prefixes.words, found):
            for h in hypotheses:
                assert h.tokens[: len(tokens)] == tokens
                assert "".join(PIECES[t] for t in h.tokens[len(tokens) :]).startswith(word)
                assert set(h.tokens[len(tokens) :]) <= {1, 2, 3, 4, 5, 6, 9, 11, 12}  # the table's, the word's


def test_a_translate_request_has_a_prefix_for_each_text():
    request = request_models(ServerLimits(max_sentences=4)).translate
    assert request.model_validate({"text": ["ab", "cd"], "prefix": ["b", ""]}).prefix == ["b", ""]
    for body, message in (
        ({"text": ["ab", "cd"], "prefix": ["b"]}, "one prefix for each text"),
        ({"text": "ab", "prefix": ["b"]}, "two strings, or two lists"),
        ({"audio": "AAAA", "prefix": "b"}, "prefix goes with text"),
        ({"text": "ab", "prefix": 3}, "string"),
    ):
        with pytest.raises(ValueError, match=message):
            request.model_validate(body)


# --- a trained model (slow) ---------------------------------------------------------------------------


def test_translate_continues_a_prefix(reverse_model):
    translator, dev = reverse_model
    texts = dev[:6]
    starts = [reverse(t)[:2] for t in texts[:3]] + ["jj", "", reverse(texts[5])]
    translations = translator.translate(texts, beam=3, prefix=starts)
    for text, start, t in zip(texts, starts, translations):
        assert t.text.startswith(start)
        if start in ("", reverse(text)[:2], reverse(text)):  # a right start: the model finishes the reversal
            assert t.text == reverse(text)
    scored = translator.score(texts, [t.text for t in translations])
    alpha = translator.config.decoding.length_penalty
    for t, s in zip(translations, scored):  # the score of a prefixed output is the model's, as unforced
        assert s.tokens == t.tokens and s.log_prob == pytest.approx(
            t.score * length_penalty(len(t.tokens), alpha), abs=1e-4
        )
    unforced = [t.text for t in translator.translate(texts)]
    assert [t.text for t in translator.translate(texts, prefix=[""] * 6)] == unforced
    with pytest.raises(AttnmtError, match="a prefix for each of the 6 texts"):
        translator.translate(texts, prefix=starts[:2])


def test_a_prefix_ending_inside_a_word_is_spelled_and_an_unwritable_one_refused(reverse_model):
    """Character pieces spell any word of the toy alphabet; "zz" has none (unknown): no output can
    begin with it, and it is an error naming it (it was forced as <unk>, the output beginning " ⁇ ")."""
    translator, dev = reverse_model
    right = reverse(dev[0])
    [t] = translator.translate([dev[0]], prefix=[right[:3]])
    assert t.text == right  # the word's start spelled, the rest the model's
    with pytest.raises(AttnmtError, match="prefix 'a zz' \\(of text 2, counting from 1\\) has a character that"):
        translator.translate([dev[0], dev[0]], prefix=[right[:3], "a zz"])
    spellings = translator.tgt_subwords.spellings()
    assert spellings[:4] == ["", "", "", ""] and "a" in spellings and "▁" in spellings


def test_trace_and_beam_tree_begin_with_the_prefix_as_translate_does(reverse_model):
    translator, dev = reverse_model
    text, start = dev[0], "ji"
    trace = translator.trace(text, prefix=start)
    [greedy] = translator.translate([text], beam=1, prefix=[start])
    assert trace.text == greedy.text and trace.text.startswith(start)
    n = len(translator.tgt_subwords.encode([start])[0])  # "▁", "j", "i"
    assert [s.constrained for s in trace.steps[: n + 1]] == [True] * n + [False]
    unforced = translator.trace(text)
    assert trace.steps[0].top_k == unforced.steps[0].top_k  # the model's own distribution, shown as it is
    translation, nodes = translator.beam_tree(text, beam=3, prefix=start)
    [searched] = translator.translate([text], beam=3, prefix=[start])
    assert translation.text == searched.text and all(c.text.startswith(start) for c in translation.candidates)
    assert [n["token"] for n in nodes if n["step"] == 1 and n["status"] != "pruned"] == ["▁"]


def test_post_trace_and_beam_take_a_prefix(reverse_model):
    translator, dev = reverse_model
    limits = ServerLimits(max_sentences=8, max_chars=40, max_tokens=12, max_work=400, timeout=30.0)
    with local_client(create_app([translator.folder], limits)) as client:
        trace = client.post("/trace", json={"text": dev[0], "prefix": "ji"}).json()
        assert trace["text"] == translator.trace(dev[0], prefix="ji").text and trace["steps"][0]["constrained"]
        beam = client.post("/beam", json={"text": dev[0], "prefix": "ji", "beam": 2}).json()
        assert beam["translation"]["candidates"][0]["text"] == translator.beam_tree(dev[0], 2, prefix="ji")[0].text
        for path in ("/trace", "/beam"):
            refused = client.post(path, json={"text": "ab", "prefix": "a" * 13})
            assert refused.status_code == 422 and "prefix has 14 subword tokens" in refused.json()["detail"]
        plain = client.post("/trace", json={"text": dev[0]}).json()
        assert not any(step["constrained"] for step in plain["steps"])


def test_translate_command_reads_a_prefix_per_line(reverse_model, tmp_path, capsys):
    translator, dev = reverse_model
    src, prefixes = tmp_path / "src.txt", tmp_path / "prefix.txt"
    src.write_text("\n".join(dev[:3]) + "\n", encoding="utf-8")
    prefixes.write_text("jj\n\nih\n", encoding="utf-8")
    assert main(["translate", str(translator.folder), "-i", str(src), "--prefix", str(prefixes), "--beam", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("jj") and lines[1] == reverse(dev[1]) and lines[2].startswith("ih")
    prefixes.write_text("jj\n", encoding="utf-8")  # (read as streams: the first line is translated, then the error)
    assert main(["translate", str(translator.folder), "-i", str(src), "--prefix", str(prefixes)]) == 2
    out, err = capsys.readouterr()
    assert f"line counts differ: {prefixes} has 1 lines, {src} has more" in err
    assert out.splitlines() == [lines[0]] or out.startswith("jj")
    prefixes.write_text("jj\nzz\nih\n", encoding="utf-8")  # "z" is no piece of the toy alphabet
    assert main(["translate", str(translator.folder), "-i", str(src), "--prefix", str(prefixes)]) == 2
    out, err = capsys.readouterr()
    assert f"{prefixes}, line 2: 'zz' has a character that the model's target pieces cannot write" in err
    assert len(out.splitlines()) == 1  # the line before it


def test_post_translate_with_a_prefix(reverse_model):
    translator, dev = reverse_model
    limits = ServerLimits(max_sentences=8, max_chars=40, max_tokens=12, max_work=400, timeout=30.0)
    with local_client(create_app([translator.folder], limits)) as client:
        answer = client.post(
            "/translate",
            json={"text": dev[:3], "prefix": ["jj", "", reverse(dev[2])[:3]], "beam": 2, "attention": False},
        )
        assert answer.status_code == 200, answer.text
        texts = [t["candidates"][0]["text"] for t in answer.json()["translations"]]
        expected = translator.translate(dev[:3], beam=2, prefix=["jj", "", reverse(dev[2])[:3]])
        assert texts == [t.text for t in expected] and texts[0].startswith("jj") and texts[2] == reverse(dev[2])
        [one] = client.post("/translate", json={"text": dev[0], "prefix": "e", "beam": 1}).json()["translations"]
        assert one["candidates"][0]["text"].startswith("e")
        refused = client.post("/translate", json={"text": "ab", "prefix": "a" * 13})
        assert refused.status_code == 422 and "prefix has 14 subword tokens" in refused.json()["detail"]
    bounded = ServerLimits(max_chars=100, max_tokens=100, max_answer_values=300, timeout=30.0)
    with local_client(create_app([translator.folder], bounded)) as client:  # the matrices' bound counts the prefix
        assert client.post("/translate", json={"text": "ab", "beam": 1}).status_code == 200
        refused = client.post("/translate", json={"text": "ab", "beam": 1, "prefix": "ab" * 40})
        assert refused.status_code == 422 and "could hold up to" in refused.json()["detail"]
        assert (
            client.post(
                "/translate", json={"text": "ab", "beam": 1, "prefix": "ab" * 40, "attention": False}
            ).status_code
            == 200
        )
