"""Lexically constrained decoding (dynamic beam allocation, Post & Vilar 2018): every output holds its
sentence's phrases, the banks share the beam, sentences without constraints are searched as before,
and the Python API and the command line take them."""

import pytest
import torch

from attnmt.cli import main
from attnmt.core.config import DecodingConfig, RNNConfig
from attnmt.core.errors import AttnmtError
from attnmt.data.batching import make_batch
from attnmt.data.subwords import EOS, PAD
from attnmt.seq2seq import build_model
from attnmt.seq2seq.constraints import ConstrainedBeamSearch, constrained_beam_search
from attnmt.seq2seq.decoding import beam_search, max_output_lengths
from attnmt.seq2seq.search import decode
from attnmt.serve import ServerLimits, create_app
from attnmt.serve.schemas import request_models
from conftest import local_client, reverse
from textbook_beams import Progress, _by_banks


def test_progress_counts_whole_phrases_and_the_tokens_of_the_one_being_written():
    phrases = [(7, 8, 9), (5,)]
    p = Progress()
    assert p.next_tokens(phrases) == [5, 7] and p.count(phrases) == 0
    p = p.after(7, phrases).after(8, phrases)
    assert p.inside == (0, 2) and p.count(phrases) == 2 and p.next_tokens(phrases) == [5, 7, 9]
    left = p.after(6, phrases)  # leaving the phrase midway: its tokens count no more
    assert left == Progress() and left.count(phrases) == 0
    restarted = p.after(7, phrases)  # a token that starts it again
    assert restarted.inside == (0, 1)
    done = p.after(9, phrases).after(5, phrases)
    assert done.complete(phrases) and done.count(phrases) == 4 and done.next_tokens(phrases) == []
    assert done.after(7, phrases) == done  # a phrase already done is not started again


def test_the_tensor_progress_of_every_candidate_is_the_textbook_progress():
    """ConstrainedBeamSearch._after, the progress of every row's candidate tokens at once, is
    textbook_beams.Progress.after for each (phrases that share first tokens and tokens, a phrase
    left midway, one started again, a sentence with fewer phrases than the table's P), along
    random outputs."""
    constraints = [[(7, 8, 9), (5,), (7, 6)], [(4, 4)]]
    from types import SimpleNamespace

    memory = SimpleNamespace(mask=torch.ones(2, 3, dtype=torch.bool))
    search = ConstrainedBeamSearch(memory, [12, 12], constraints, beam=2, n_best=1, alpha=1.0)
    search.phrase_tokens, search.phrase_lengths = search.all_phrase_tokens, search.all_phrase_lengths
    g = torch.Generator().manual_seed(0)
    candidates = torch.arange(3, 11).expand(2, 1, -1)  # (B, w=1, C): every token that matters, and others
    for _ in range(20):
        progress = [Progress(), Progress()]
        for _ in range(8):
            done = torch.tensor([[c in p.done for c in range(3)] for p in progress])
            done[1, 1:] = True  # (missing phrases count as done)
            inside = torch.tensor([[p.inside[0] if p.inside else -1] for p in progress])
            written = torch.tensor([[p.inside[1] if p.inside else 0] for p in progress])
            next_in = search._next_inside(inside, written)
            after_done, after_inside, after_written, met = search._after(
                candidates, done.unsqueeze(1), inside, written, next_in
            )
            for b, phrases in enumerate(constraints):
                for j, token in enumerate(candidates[b, 0].tolist()):
                    expected = progress[b].after(token, phrases)
                    assert after_done[b, 0, j, : len(phrases)].tolist() == [
                        c in expected.done for c in range(len(phrases))
                    ]
                    assert int(after_inside[b, 0, j]) == (expected.inside[0] if expected.inside else -1)
                    assert int(after_written[b, 0, j]) == (expected.inside[1] if expected.inside else 0)
                    assert int(met[b, 0, j]) == expected.count(phrases)
            chosen = torch.randint(0, candidates.size(2), (2,), generator=g).tolist()  # (one random output each)
            progress = [p.after(int(candidates[b, 0, chosen[b]]), constraints[b]) for b, p in enumerate(progress)]


def test_the_banks_share_the_beam_most_progress_first_and_lend_what_they_cannot_fill():
    def candidate(score, bank):
        return (0, bank * 10 + int(-score), score, bank)

    banks = {
        0: [candidate(-1, 0), candidate(-2, 0), candidate(-3, 0)],
        1: [candidate(-9, 1)],
        2: [candidate(-20, 2), candidate(-5, 2)],
    }
    chosen = _by_banks(banks, 4, first_row=0)
    assert [c[2] for c in chosen] == [-5, -9, -1, -20]  # round 1: each bank's best, most progress first
    assert [c[2] for c in _by_banks(banks, 6, 0)] == [-5, -9, -1, -20, -2, -3]  # then the banks with more
    padded = _by_banks({0: [candidate(-1, 0)]}, 3, first_row=6)
    assert [c[2] for c in padded] == [-1, float("-inf"), float("-inf")] and padded[1][0] == 0
    assert _by_banks({}, 2, first_row=4)[0][:3] == (4, PAD, float("-inf"))


def untrained(attention="bahdanau", seed=0):
    torch.manual_seed(seed)
    config = RNNConfig(
        attention=attention, embedding_size=16, encoder_hidden=8, decoder_hidden=16, attention_size=8, dropout=0.0
    )
    return build_model(config, 20, 20).eval()


def batch_of(n=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return make_batch(
        [torch.randint(4, 20, (int(torch.randint(3, 9, (1,), generator=g)),), generator=g).tolist() for _ in range(n)]
    )


def contains(tokens, phrase):
    return any(tuple(tokens[i : i + len(phrase)]) == phrase for i in range(len(tokens)))


@pytest.mark.parametrize("attention", ["bahdanau", "location"])
@pytest.mark.parametrize("beam", [2, 5])
def test_every_output_holds_its_phrases_and_scores_as_the_model_does(attention, beam):
    model, batch = untrained(attention), batch_of()
    constraints = [[(7,)], [(9, 10, 11)], [], [(12,), (5, 6)]]
    limits = max_output_lengths(batch.src_lengths, 1.5, 10)
    results = constrained_beam_search(
        model, batch.src, batch.src_lengths, limits, constraints, beam=beam, n_best=beam, alpha=0.0
    )
    for phrases, hypotheses in zip(constraints, results):
        assert len(hypotheses) == beam
        met = [all(contains(h.tokens, phrase) for phrase in phrases) for h in hypotheses]
        assert met[0] and met == sorted(met, reverse=True), (phrases, [h.tokens for h in hypotheses])
        for h in hypotheses:
            assert EOS not in h.tokens[:-1]  # (an untrained model may reach the length limit first)
        scores = [h.score for h, ok in zip(hypotheses, met) if ok]
        assert scores == sorted(scores, reverse=True)
    for i, hypotheses in enumerate(results):  # the score is the model's log-probability of the output
        for h in hypotheses:
            tgt = torch.tensor([h.tokens])
            tgt_in = torch.cat([torch.full((1, 1), 2), tgt[:, :-1]], dim=1)
            with torch.no_grad():
                forced = model.target_log_probs(
                    batch.src[i : i + 1, : int(batch.src_lengths[i])], batch.src_lengths[i : i + 1], tgt_in, tgt
                )
            assert h.log_prob == pytest.approx(float(forced.sum()), abs=1e-4)


@pytest.mark.parametrize("beam", [1, 3, 5])
def test_sentences_without_constraints_are_searched_as_by_beam_search(beam):
    model, batch = untrained(seed=3), batch_of(6, seed=4)
    limits = max_output_lengths(batch.src_lengths, 1.5, 10)
    ours = constrained_beam_search(model, batch.src, batch.src_lengths, limits, [[]] * 6, beam=beam, n_best=beam)
    theirs = beam_search(model, batch.src, batch.src_lengths, limits, beam=beam, n_best=beam)
    for a, b in zip(ours, theirs):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-5)


def test_outputs_that_could_not_meet_every_constraint_come_after_those_that_did():
    model, batch = untrained(seed=1), batch_of(1, seed=2)
    phrases = [(5, 6, 7, 8, 9, 10)]  # six tokens within a limit of 7: few hypotheses find room for them
    results = constrained_beam_search(model, batch.src, batch.src_lengths, [7], [phrases], beam=4, n_best=4)
    met = [contains(h.tokens, phrases[0]) for h in results[0]]
    assert met[0] and met == sorted(met, reverse=True)


def test_an_ensemble_and_a_coverage_penalty_search_with_constraints_too():
    from attnmt.seq2seq.decoding import coverage_penalty, length_penalty
    from attnmt.seq2seq.ensemble import Ensemble

    ensemble, batch = Ensemble([untrained(seed=7), untrained("location", seed=8)]).eval(), batch_of(3, seed=9)
    settings = DecodingConfig(beam=4, coverage_penalty=0.5, length_penalty=0.6)
    phrases = [[(6, 7)], [], [(10,), (11,)]]
    for wanted, hypotheses in zip(
        phrases, decode(ensemble, batch.src, batch.src_lengths, settings, n_best=2, constraints=phrases)
    ):
        assert all(contains(hypotheses[0].tokens, phrase) for phrase in wanted)
        for h in hypotheses:  # the members' mean attention, penalized
            expected = h.log_prob / length_penalty(len(h.tokens), 0.6) + coverage_penalty(h.attention, 0.5)
            assert h.score == pytest.approx(expected, abs=1e-5)


def test_decode_takes_constraints_with_prefixes_and_refuses_them_with_sampling():
    from attnmt.core.config import Sampling
    from attnmt.seq2seq.prefix import Prefixes

    model, batch = untrained(seed=5), batch_of(2, seed=6)
    settings = DecodingConfig(beam=3, max_length_offset=4)
    [first, second] = decode(
        model,
        batch.src,
        batch.src_lengths,
        settings,
        constraints=[[(11,)], [(13, 14)]],
        prefixes=Prefixes([[9, 9], []]),
    )
    assert first[0].tokens[:2] == [9, 9] and contains(first[0].tokens, (11,))
    assert contains(second[0].tokens, (13, 14))
    with pytest.raises(ValueError, match="no constraints"):
        decode(model, batch.src, batch.src_lengths, settings, beam=1, constraints=[[(11,)], []], sampling=Sampling())
    with pytest.raises(ValueError, match="none of them padding or EOS"):
        decode(model, batch.src, batch.src_lengths, settings, constraints=[[(11, EOS)], []])


def test_translate_writes_each_texts_phrases(reverse_model):
    translator, dev = reverse_model
    texts = dev[:4]
    wanted = [["j"], [], ["hg", "a"], ["ii"]]
    for t, phrases in zip(translator.translate(texts, beam=5, constraints=wanted), wanted):
        assert all(p in t.text for p in phrases), (t.text, phrases)
    plain = translator.translate(texts, beam=5)
    assert translator.translate(texts, beam=5, constraints=[[]] * 4)[1].text == plain[1].text == reverse(texts[1])
    with pytest.raises(AttnmtError, match="a list of phrases for each of the 4 texts"):
        translator.translate(texts, constraints=[["j"]])
    with pytest.raises(AttnmtError, match="text 2 .*not a string"):
        translator.translate(texts[:2], constraints=[[], "j"])
    with pytest.raises(AttnmtError, match="constraint ' ' of text 1 .* is empty"):
        translator.translate(texts[:1], constraints=[[" "]])
    with pytest.raises(AttnmtError, match="'xa' of text 1 .*cannot write"):
        translator.translate(texts[:1], constraints=[["xa"]])  # (the strings to reverse are of a-j)


def test_the_command_line_reads_tab_separated_phrases_line_by_line(reverse_model, tmp_path, capsys):
    translator, dev = reverse_model
    src = tmp_path / "src.txt"
    src.write_text("\n".join(dev[:3]) + "\n")
    phrases = tmp_path / "phrases.txt"
    phrases.write_text("j\n\nhg\ta\n")
    assert (
        main(["translate", str(translator.folder), "-i", str(src), "--constraints", str(phrases), "--beam", "4"]) == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert "j" in out[0] and out[1] == reverse(dev[1]) and "hg" in out[2] and "a" in out[2]
    phrases.write_text("j\n")
    assert main(["translate", str(translator.folder), "-i", str(src), "--constraints", str(phrases)]) == 2
    assert "line counts differ" in capsys.readouterr().err
    phrases.write_text("j\t\ti\n\n\n")
    assert main(["translate", str(translator.folder), "-i", str(src), "--constraints", str(phrases)]) == 2
    assert "line 1: an empty phrase between tabs" in capsys.readouterr().err
    phrases.write_text("j\n\n\n")
    assert main(["translate", str(translator.folder), "-i", str(src), "--constraints", str(phrases), "--sample"]) == 2
    assert "no --constraints" in capsys.readouterr().err


def test_a_translate_request_has_a_list_of_phrases_for_each_text():
    request = request_models(ServerLimits(max_sentences=4, max_chars=10)).translate
    assert request.model_validate({"text": "ab", "constraints": ["b", "cd"]}).constraints == ["b", "cd"]
    assert request.model_validate({"text": ["ab", "c"], "constraints": [["b"], []]}).constraints == [["b"], []]
    for body, message in (
        ({"text": ["ab", "cd"], "constraints": [["b"]]}, "a list of phrases for each text"),
        ({"text": "ab", "constraints": [["b"]]}, "a string and a list of phrases"),
        ({"text": ["ab"], "constraints": ["b"]}, "a string and a list of phrases"),
        ({"audio": "AAAA", "constraints": ["b"]}, "constraints go with text"),
        ({"text": "ab", "constraints": ["b"], "sampling": {}}, "takes no constraints"),
        ({"text": "ab", "constraints": [" "]}, "blank"),
        ({"text": "ab", "constraints": ["b" * 11]}, "at most 10 characters"),
        ({"text": "ab", "constraints": ["b"] * 17}, "at most 16 items"),
    ):
        with pytest.raises(ValueError, match=message):
            request.model_validate(body)


def test_post_translate_with_constraints(reverse_model):
    translator, dev = reverse_model
    limits = ServerLimits(max_sentences=8, max_chars=40, max_tokens=12, max_work=400, timeout=30.0)
    wanted = [["j"], [], ["hg", "a"]]
    with local_client(create_app([translator.folder], limits)) as client:
        answer = client.post("/translate", json={"text": dev[:3], "constraints": wanted, "beam": 4, "attention": False})
        assert answer.status_code == 200, answer.text
        texts = [t["candidates"][0]["text"] for t in answer.json()["translations"]]
        assert texts == [t.text for t in translator.translate(dev[:3], beam=4, constraints=wanted)]
        [one] = client.post("/translate", json={"text": dev[0], "constraints": ["ii"], "beam": 3}).json()[
            "translations"
        ]
        assert "ii" in one["candidates"][0]["text"]
        refused = client.post("/translate", json={"text": "ab", "constraints": ["xa"]})
        assert refused.status_code == 422 and "cannot write" in refused.json()["detail"]
        refused = client.post("/translate", json={"text": "ab", "constraints": ["a" * 7, "b" * 7]})
        assert refused.status_code == 422 and "constraints has" in refused.json()["detail"]
    bounded = ServerLimits(max_chars=100, max_tokens=100, max_answer_values=300, timeout=30.0)
    with local_client(create_app([translator.folder], bounded)) as client:  # the matrices' bound counts them
        assert client.post("/translate", json={"text": "ab", "beam": 1}).status_code == 200
        refused = client.post("/translate", json={"text": "ab", "beam": 1, "constraints": ["ab" * 40]})
        assert refused.status_code == 422 and "could hold up to" in refused.json()["detail"]


def path_to(tree, node):
    """The tokens from the root to ``node`` (root left out)."""
    tokens = []
    while node.parent is not None:
        tokens.append(node.token)
        node = tree[node.parent]
    return tokens[::-1]


@pytest.mark.parametrize("beam", [2, 4])
def test_the_constrained_search_tree_records_each_step_with_its_bank(beam):
    from attnmt.seq2seq.decoding import BeamRecorder

    model, batch = untrained(seed=2), batch_of(2, seed=5)
    constraints = [[(7,), (9, 10)], [(12, 13, 14)]]
    limits = max_output_lengths(batch.src_lengths, 1.5, 10)
    recorder = BeamRecorder(2, beam)
    recorded = constrained_beam_search(
        model, batch.src, batch.src_lengths, limits, constraints, beam=beam, n_best=beam, record=recorder
    )
    plain = constrained_beam_search(model, batch.src, batch.src_lengths, limits, constraints, beam=beam, n_best=beam)
    assert [[h.tokens for h in s] for s in recorded] == [[h.tokens for h in s] for s in plain]  # (the same search)
    for tree, phrases, hypotheses, limit in zip(recorder.trees, constraints, recorded, limits):
        assert tree[0].status == "root" and tree[0].met is None
        full = sum(map(len, phrases))
        for node in tree[1:]:
            tokens = path_to(tree, node)
            assert len(tokens) == node.step
            assert tree[node.parent].status in ("root", "kept")  # only live hypotheses are extended
            progress = Progress()
            for token in tokens[:-1] if node.status == "finished" else tokens:
                progress = progress.after(token, phrases)
            assert node.met == progress.count(phrases), (tokens, node)
            if node.status == "finished":  # by EOS, with every constraint met, or else at the length limit
                assert node.token == EOS and (node.met == full) == progress.complete(phrases)
                assert progress.complete(phrases) or node.step == limit
        kept = [n for n in tree if n.status == "kept"]
        assert all(sum(n.step == s for n in kept) <= beam for s in range(1, max(limits) + 1))
        assert all(n.step < limit for n in kept)  # at the limit every live hypothesis ends
        # each output is a path of the tree, ended by EOS
        paths = {tuple(path_to(tree, n)) for n in tree[1:] if n.status == "finished"}
        assert all(tuple(h.tokens) in paths and h.tokens[-1] == EOS for h in hypotheses)


def test_beam_tree_and_post_beam_take_constraints(reverse_model):
    translator, dev = reverse_model
    text, wanted = dev[0], ["hg", "a"]
    translation, nodes = translator.beam_tree(text, beam=4, constraints=wanted)
    [expected] = translator.translate([text], beam=4, n_best=4, constraints=[wanted])
    assert [c.text for c in translation.candidates] == [c.text for c in expected.candidates]
    assert all(p in translation.text for p in wanted)
    full = len(translator.tgt_subwords.encode(["hg"])[0]) + len(translator.tgt_subwords.encode(["a"])[0])
    assert max(n["met"] for n in nodes[1:]) == full and nodes[0]["met"] is None
    # every hypothesis that ends by EOS has met the constraints; only at the length limit, the tree's
    # last step, where every live hypothesis ends, may one end with some unmet
    last = max(n["step"] for n in nodes)
    assert not any(n["status"] == "kept" and n["step"] == last for n in nodes)
    assert all(n["met"] == full or n["step"] == last for n in nodes if n["status"] == "finished")
    _, plain = translator.beam_tree(text, beam=4)
    assert all(n["met"] is None for n in plain)
    limits = ServerLimits(max_sentences=8, max_chars=40, max_tokens=12, max_work=400, timeout=30.0)
    with local_client(create_app([translator.folder], limits)) as client:
        answer = client.post("/beam", json={"text": text, "beam": 4, "constraints": wanted})
        assert answer.status_code == 200, answer.text
        served = answer.json()["nodes"]
        # the same tree: each node's fields equal, its log-probability to float rounding
        assert [{**n, "log_prob": None} for n in served] == [{**n, "log_prob": None} for n in nodes]
        assert [n["log_prob"] for n in served] == pytest.approx([n["log_prob"] for n in nodes])
        refused = client.post("/beam", json={"text": text, "constraints": ["xa"]})
        assert refused.status_code == 422 and "cannot write" in refused.json()["detail"]
