"""The explorer page (static/index.html) in a real browser: headless Chromium (Debian's, at
/usr/bin/chromium) driven by Playwright, against the real HTTP server (uvicorn in a thread) serving
the reverse-string model, a copy of it under another name, and a tiny Transformer (layers and heads)."""

import json
import re
import shutil
import socket
import threading
import time
from contextlib import contextmanager

import httpx
import numpy as np
import pytest
import uvicorn

from attnmt.serve import ServerLimits, create_app
from conftest import WAIT, launch_chromium, random_strings

TIMEOUT_MS = 20_000
HIGHLIGHT_RATIO = 0.5  # as in static/heatmap.js: a source token is highlighted at >= ratio * the row's maximum


@contextmanager
def running_server(app):
    """The base URL of ``app`` served by uvicorn in a thread on a free port, while in the block."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    uv = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT
    while not uv.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the HTTP server did not start within {WAIT} s")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        uv.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.fixture(scope="module")
def server(reverse_model, tiny_transformer, tmp_path_factory):
    """(base URL, name of the first model, name of its copy, name of the Transformer): the real app
    on a free port."""
    translator, _ = reverse_model
    copy = tmp_path_factory.mktemp("explorer") / "reverse-copy"
    shutil.copytree(translator.folder, copy)
    with running_server(create_app([translator.folder, copy, tiny_transformer.folder])) as url:
        yield url, translator.folder.resolve().name, copy.name, tiny_transformer.folder.name


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = launch_chromium(playwright)
        try:
            yield instance
        finally:
            instance.close()


@pytest.fixture
def page(browser, server):
    """A fresh page on the explorer, models loaded; fails the test on any JavaScript error."""
    context = browser.new_context(viewport={"width": 1320, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(server[0] + "/")
    page.wait_for_selector("body[data-state=ready]")
    yield page
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def post(server, path, body):
    return httpx.post(server[0] + path, json=body, timeout=30)


def translate_in_page(page, text, press_enter=True):
    page.fill("#source", text)
    if press_enter:
        page.press("#source", "Enter")
    else:
        page.click("#translate")
    page.wait_for_selector("body[data-state=done], body[data-state=error]")


def attended(row):
    top = max(row)
    return {j for j, w in enumerate(row) if w >= HIGHLIGHT_RATIO * top}


def api_translation(server, text, model=None):
    """What /translate answers for the request the page sends (the model's default beam)."""
    models = httpx.get(server[0] + "/models", timeout=10).json()
    info = next(m for m in models if m["name"] == (model or server[1]))
    response = post(server, "/translate", {"text": text, "model": info["name"], "beam": info["beam"]})
    assert response.status_code == 200, response.text
    return response.json()["translations"][0]


def test_translation_and_heatmap(page, server):
    translate_in_page(page, "abcdef")
    expected = api_translation(server, "abcdef")
    best = expected["candidates"][0]
    assert best["text"] == "fedcba"
    assert page.text_content("#panel-a .translation") == best["text"]
    assert page.locator("#error").is_hidden()

    source, target, attention = expected["source_tokens"], best["tokens"], best["attention"]
    table = page.locator("#panel-a table.heatmap")
    assert table.count() == 1
    assert page.locator("#panel-a td.cell").count() == len(source) * len(target)
    assert page.locator("#panel-a th.src-label").all_text_contents() == source
    assert page.locator("#panel-a th.tgt-label").all_text_contents() == target
    weights = page.eval_on_selector_all(
        "#panel-a td.cell", "cells => cells.map(c => [+c.dataset.row, +c.dataset.col, +c.dataset.weight])"
    )
    assert len(weights) == len(source) * len(target)
    for i, j, w in weights:
        assert w == pytest.approx(attention[i][j], abs=1e-5)


def test_heatmap_marks_the_word_links(page, server):
    from attnmt.seq2seq.links import output_links

    text = "abc de fghi"
    translate_in_page(page, text)
    expected = post(server, "/translate", {"text": text, "model": server[1], "align": True, "attention": False})
    translation = expected.json()["translations"][0]
    best = translation["candidates"][0]
    links = [tuple(link) for link in best["alignment"]]
    assert links and sorted(j for _, j in links) == list(range(len(best["text"].split())))

    def marked():
        cells = page.eval_on_selector_all(
            "#panel-a td.cell.link", "cs => cs.map(c => [+c.dataset.row, +c.dataset.col])"
        )
        return sorted(map(tuple, cells))

    shown = api_translation(server, text)  # the page's request: its attention
    pieces = output_links(
        np.array(shown["candidates"][0]["attention"]),
        shown["source_tokens"],
        shown["candidates"][0]["tokens"],
        words=False,
    )
    assert marked() == sorted((j, i) for i, j in pieces)  # pieces: each output piece's most attended piece
    assert "link: the source token each output token attends to most" in page.text_content("#panel-a .legend")
    page.check("#words")
    assert marked() == sorted((j, i) for i, j in links)  # words: one cell per word link of /translate
    assert "link: the source word each output word attends to most" in page.text_content("#panel-a .legend")


def test_target_and_source_highlighting(page, server):
    translate_in_page(page, "abcdef", press_enter=False)
    best = api_translation(server, "abcdef")["candidates"][0]
    attention = best["attention"]

    def highlighted(selector, key):
        return {int(v) for v in page.eval_on_selector_all(selector, f"els => els.map(e => e.dataset.{key})")}

    for i in (1, 3):
        page.click(f"#panel-a th.tgt-label[data-row='{i}']")
        row = attention[i]
        expected = attended(row)
        assert max(range(len(row)), key=row.__getitem__) in expected
        assert highlighted("#panel-a td.cell.highlight", "col") == expected
        assert highlighted("#panel-a td.cell.highlight", "row") == {i}
        assert highlighted("#panel-a th.src-label.highlight", "col") == expected
        # the weights are shown: in the row's cells and in the line below the heatmap
        j = max(expected, key=row.__getitem__)
        cell = page.locator(f"#panel-a td.cell[data-row='{i}'][data-col='{j}']")
        assert cell.text_content() in (f"{row[j]:.2f}".lstrip("0"), "1")
        assert f"{row[j]:.2f}" in page.text_content("#panel-a .focus-info")
        page.click(f"#panel-a th.tgt-label[data-row='{i}']")  # release; the mouse still hovers it
        assert highlighted("#panel-a td.cell.highlight", "col") == expected
        page.mouse.move(1, 1)
        assert page.locator("#panel-a .highlight").count() == 0

    j = 2  # a source column: the output tokens that attend to it
    page.click(f"#panel-a th.src-label[data-col='{j}']")
    expected_rows = {i for i, row in enumerate(attention) if j in attended(row)}
    assert expected_rows, "the reverse model attends to every source character"
    assert highlighted("#panel-a th.tgt-label.highlight", "row") == expected_rows
    assert highlighted("#panel-a td.cell.highlight", "col") == {j}


def test_step_through_decoding(page, server):
    translate_in_page(page, "abcdef")
    trace = post(server, "/trace", {"text": "abcdef", "model": server[1], "top_k": 5}).json()
    steps, n_source = trace["steps"], len(trace["source_tokens"])
    n = len(steps)

    def shown():
        return int(page.get_attribute("#step-index", "data-step")), page.text_content("#step-token")

    assert shown() == (1, steps[0]["token"])
    # the whole line, as a reader sees it (it read "writes ▁A p = 0.863null": a null appended as text)
    line = rf"writes {re.escape(steps[0]['token'])} p = [0-9]\.[0-9]{{3}}"
    assert re.fullmatch(line, page.text_content("#step-token-line"))
    assert page.is_disabled("#step-back")
    page.click("#step-next")
    page.click("#step-next")
    assert shown() == (3, steps[2]["token"])
    assert page.text_content("#step-index") == f"step 3 / {n}"
    # step 3: the scores and weights as bars, the context and state as cells, the top-k tokens
    assert page.locator("#step-view svg.bars rect.bar.score").count() == n_source
    assert page.locator("#step-view svg.bars rect.bar.weight").count() == n_source
    assert page.locator("#step-view .vrow.context .vcell").count() == len(steps[2]["context"])
    assert page.locator("#step-view .vrow.state .vcell").count() == len(steps[2]["state"])
    assert page.locator("#step-view table.topk tr").count() == len(steps[2]["top_k"])
    assert page.locator("#step-view table.topk td.tok").first.text_content() == steps[2]["top_k"][0][0]
    # heatmap of the trace: rows 1-3 drawn, the third current, the rest not decoded yet
    assert page.locator("#step-view table.heatmap tr.future").count() == n - 3
    assert page.get_attribute("#step-view table.heatmap tr.current", "data-row") == "2"

    page.click("#step-back")
    assert shown() == (2, steps[1]["token"])
    page.click("#steps-card h2")  # keyboard arrows work when no input has the focus
    page.keyboard.press("ArrowRight")
    assert shown() == (3, steps[2]["token"])
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("ArrowLeft")
    assert shown() == (1, steps[0]["token"])
    for _ in range(n + 2):
        page.keyboard.press("ArrowRight")
    assert shown() == (n, steps[-1]["token"])
    assert page.is_disabled("#step-next")


def test_a_prefix_starts_every_view_and_its_steps_are_marked(page, server):
    """ "Start the translation with" reaches /translate, /trace and /beam: the translation, the
    greedy steps (the prefix's marked, the model's own top-k beside them) and the beam's best path
    begin with it; without it, the views are as before."""
    page.fill("#prefix", "ji")  # not what the model writes for "abcdef" ("fedcba")
    translate_in_page(page, "abcdef")
    [translation] = post(server, "/translate", {"text": "abcdef", "model": server[1], "prefix": "ji"}).json()[
        "translations"
    ]
    assert translation["candidates"][0]["text"].startswith("ji")
    assert page.text_content("#panel-a .translation") == translation["candidates"][0]["text"]
    trace = post(server, "/trace", {"text": "abcdef", "model": server[1], "prefix": "ji"}).json()
    constrained = [s["constrained"] for s in trace["steps"]]
    assert constrained[:3] == [True, True, True] and not any(constrained[3:])  # "▁", "j", "i"
    assert page.locator("#step-token.constrained").count() == 1
    top = trace["steps"][0]["top_k"][0][0]
    assert page.text_content("#step-view table.topk td.tok") == top
    note = page.text_content("#step-constrained")
    assert "set by the prefix" in note and (top in note) == (top != trace["steps"][0]["token"])
    assert page.text_content("#step-token-line").endswith(note)  # the note, and nothing after it
    for _ in range(3):
        page.click("#step-next")
    assert page.locator("#step-token.constrained").count() == 0  # step 4: the model's own choice
    assert page.locator("#step-view .chip.constrained").count() == 3
    beam = post(server, "/beam", {"text": "abcdef", "model": server[1], "beam": 3, "prefix": "ji"}).json()
    assert beam["translation"]["candidates"][0]["text"].startswith("ji")
    finals = page.locator("#beam-view table.finals td.translation-cell").all_text_contents()
    assert finals and all(text.startswith("ji") for text in finals)

    page.fill("#prefix", "")
    translate_in_page(page, "abcdef")
    assert page.text_content("#panel-a .translation") == "fedcba"
    assert page.locator("#step-token.constrained").count() == 0


def test_must_contain_constrains_the_translation_and_the_beam_tree(page, server):
    """ "Must contain" (phrases separated by ";") reaches /translate and /beam: the translation holds
    them, the beam tree's nodes say how many constraint tokens they wrote, and the step view says
    that its greedy steps are the model's own; cleared, the views are as before."""
    sent = []
    page.on(
        "request",
        lambda r: sent.append((r.url.rsplit("/", 1)[1], json.loads(r.post_data))) if r.method == "POST" else None,
    )
    page.fill("#constraints", "hh; ; a")
    translate_in_page(page, "abcdef")
    bodies = {path: body for path, body in sent}
    assert bodies["translate"]["constraints"] == bodies["beam"]["constraints"] == ["hh", "a"]
    assert "constraints" not in bodies["trace"]
    expected = post(server, "/translate", {"text": "abcdef", "model": server[1], "constraints": ["hh", "a"]}).json()
    text = expected["translations"][0]["candidates"][0]["text"]
    assert "hh" in text and page.text_content("#panel-a .translation") == text
    assert page.is_visible("#steps-unconstrained")
    titles = page.locator("#beam-view g.node title").all_text_contents()
    assert titles and all("constraint tokens written" in t for t in titles if not t.startswith("step 0"))
    sent.clear()
    page.fill("#constraints", "")
    translate_in_page(page, "abcdef")
    assert {path: body for path, body in sent}["translate"]["constraints"] is None
    assert page.text_content("#panel-a .translation") == "fedcba" and not page.is_visible("#steps-unconstrained")
    assert not any("constraint tokens" in t for t in page.locator("#beam-view g.node title").all_text_contents())


def test_compare_two_models(page, server):
    _, first, second, _ = server
    page.check("#compare")
    page.select_option("#model-b", second)
    translate_in_page(page, "abcdef")
    heatmaps = page.locator("#panels table.heatmap")
    assert heatmaps.count() == 2
    assert [heatmaps.nth(k).get_attribute("data-model") for k in range(2)] == [first, second]
    assert page.text_content("#panel-b .model-name") == second
    assert page.text_content("#panel-b .translation") == "fedcba"

    # a model without attention answers attention null: shown as a notice instead of a heatmap
    def without_attention(route):
        response = route.fetch()
        data = response.json()
        if json.loads(route.request.post_data)["model"] == second:
            for translation in data["translations"]:
                for candidate in translation["candidates"]:
                    candidate["attention"] = None
        route.fulfill(response=response, json=data)

    page.route("**/translate", without_attention)
    translate_in_page(page, "abcdef")
    assert page.locator("#panel-a table.heatmap").count() == 1
    assert page.locator("#panel-b table.heatmap").count() == 0
    assert "no attention — fixed context" in page.text_content("#panel-b .no-attention")


def test_beam_tree(page, server, tmp_path):
    translate_in_page(page, "abcdef")
    models = httpx.get(server[0] + "/models", timeout=10).json()
    response = post(server, "/beam", {"text": "abcdef", "model": server[1], "beam": models[0]["beam"]})
    assert response.status_code == 200, response.text
    answer = response.json()
    nodes = answer["nodes"]
    assert page.locator("svg.beam-tree g.node").count() == len(nodes)
    for status in ("root", "kept", "finished", "pruned"):
        assert page.locator(f"svg.beam-tree g.node.{status}").count() == sum(n["status"] == status for n in nodes)
    shown = page.eval_on_selector_all(
        "svg.beam-tree g.node", "gs => gs.map(g => [+g.dataset.id, g.dataset.status, +g.dataset.step])"
    )
    assert sorted(shown) == sorted([n["id"], n["status"], n["step"]] for n in nodes)
    # the path of the best translation, marked from the root to a finished node
    by_id = {n["id"]: n for n in nodes}
    path = page.eval_on_selector_all("svg.beam-tree g.node.best", "gs => gs.map(g => +g.dataset.id)")
    path_tokens = [by_id[i]["token"] for i in sorted(path, key=lambda i: by_id[i]["step"])][1:]
    assert path_tokens == answer["translation"]["candidates"][0]["tokens"]
    assert page.locator("svg.beam-tree g.node.finished.best").count() == 1
    finals = page.locator("#beam-view table.finals td.translation-cell").all_text_contents()
    assert finals == [c["text"] for c in answer["translation"]["candidates"]]
    page.screenshot(path=str(tmp_path / "explorer.png"), full_page=True)
    assert (tmp_path / "explorer.png").stat().st_size > 10_000


def test_beam_layout_is_a_function_of_the_nodes(page, server):
    """static/beam.js lays the tree out without the page: a column per step, children in the order
    of their parents, the best path from the root to the finished node that spells the translation."""
    answer = post(server, "/beam", {"text": "abcdef", "model": server[1], "beam": 3}).json()
    nodes, tokens = answer["nodes"], answer["translation"]["candidates"][0]["tokens"]
    layout = page.evaluate(
        """async ([nodes, tokens]) => {
        const { BOX, bestPath, layoutBeam } = await import("/static/beam.js");
        const { columns, pos, width, height } = layoutBeam(nodes);
        return { box: BOX, width, height, best: [...bestPath(nodes, tokens)],
                 columns: columns.map((list) => list.map((n) => n.id)), pos: Object.fromEntries(pos) };
    }""",
        [nodes, tokens],
    )
    box, pos = layout["box"], {int(i): p for i, p in layout["pos"].items()}
    by_id = {n["id"]: n for n in nodes}
    assert sorted(pos) == sorted(by_id) and len({(p["x"], p["y"]) for p in pos.values()}) == len(nodes)
    for step, column in enumerate(layout["columns"]):
        assert {by_id[i]["step"] for i in column} == {step}
        assert all(pos[i]["x"] == box["pad"] + step * box["colW"] for i in column)
        ys = [pos[i]["y"] for i in column]
        assert ys == sorted(ys) and len(set(ys)) == len(ys)  # drawn top to bottom in column order
        if step > 1:
            previous = layout["columns"][step - 1]
            parents = [previous.index(by_id[i]["parent"]) for i in column]
            assert parents == sorted(parents)  # children in the order of their parents: no lines cross
    assert all(0 <= p["x"] < layout["width"] and 0 <= p["y"] < layout["height"] for p in pos.values())
    best = sorted((by_id[i] for i in layout["best"]), key=lambda n: n["step"])
    assert best[0]["status"] == "root" and [n["token"] for n in best[1:]] == tokens
    assert best[-1]["status"] == "finished"
    assert all(n["parent"] == p["id"] for p, n in zip(best, best[1:]))


def test_the_model_line_names_local_attention(page, server):
    """static/panels.js describeModel: a model with Luong's local attention says which, and its D."""
    [info] = [m for m in httpx.get(f"{server[0]}/models").json() if m["name"] == server[1]]
    lines = page.evaluate(
        """async (info) => {
        const { describeModel } = await import("/static/panels.js");
        return [describeModel(info), describeModel({ ...info, attention: "luong-general", input_feeding: false,
                                                     local_attention: "local-p", local_window: 10 })];
    }""",
        info,
    )
    assert "local" not in lines[0] and info["local_attention"] == "none"
    assert lines[1].startswith("luong-general local-p (D 10) attention") and "no input feeding" in lines[1]


def test_the_model_line_names_a_sparse_normalizer(page, server):
    [info] = [m for m in httpx.get(f"{server[0]}/models").json() if m["name"] == server[1]]
    lines = page.evaluate(
        """async (info) => {
        const { describeModel } = await import("/static/panels.js");
        return [describeModel(info), describeModel({ ...info, attention_normalizer: "entmax15" }),
                describeModel({ ...info, type: "transformer", d_model: 32, heads: 4, norm: "pre",
                                attention_normalizer: "sparsemax" }),
                describeModel({ ...info, attention_normalizer: "csparsemax", fertility_bound: 1.5 })];
    }""",
        info,
    )
    assert info["attention_normalizer"] == "softmax" and "softmax" not in lines[0]
    assert lines[1].startswith(f"{info['attention']} entmax15 attention")
    assert lines[2].startswith("Transformer · sparsemax attention · d_model 32")
    assert lines[3].startswith(f"{info['attention']} csparsemax (fertility 1.5) attention")


def test_the_model_line_names_coverage_attention_and_its_fertility(page, server):
    [info] = [m for m in httpx.get(f"{server[0]}/models").json() if m["name"] == server[1]]
    lines = page.evaluate(
        """async (info) => {
        const { describeModel } = await import("/static/panels.js");
        return [describeModel({ ...info, attention: "coverage", coverage_fertility: 0 }),
                describeModel({ ...info, attention: "coverage", coverage_fertility: 2 }),
                describeModel({ ...info, attention: "coverage", coverage_fertility: 0, coverage_dim: 10 })];
    }""",
        info,
    )
    assert info["coverage_fertility"] is None and info["coverage_dim"] is None
    assert lines[0].startswith("coverage attention") and "fertility" not in lines[0]
    assert lines[1].startswith("coverage (fertility N 2) attention")
    assert lines[2].startswith("coverage (NN-based, d 10) attention")


@pytest.mark.parametrize("normalizer, note", [("sparsemax", "sparsemax(e)"), ("csparsemax", "csparsemax(e, u)")])
def test_the_step_view_names_a_sparse_normalizer_and_counts_its_zeros(page, server, tmp_path, normalizer, note):
    """A /trace of a sparsemax (or constrained sparsemax) model (its answer rewritten here: one weight
    1, the others 0): the axis notes say which map (of the bounds u too) and how many weights are 0;
    merged into words, weights only (a word has no score whose sparsemax gives its weight)."""

    def sparse(route):
        response = route.fetch()
        body = response.json()
        body["normalizer"] = normalizer
        for step in body["steps"]:
            top = max(range(len(step["weights"])), key=step["weights"].__getitem__)
            step["weights"] = [float(j == top) for j in range(len(step["weights"]))]
        route.fulfill(response=response, json=body)

    page.route("**/trace", sparse)
    translate_in_page(page, "abc de")
    page.wait_for_selector("#step-view svg.bars")
    n = page.locator("#step-view svg.bars rect.bar.weight").count()
    notes = page.locator("#step-view svg.bars-axis text.axis-note").all_text_contents()
    assert notes == ["before the", normalizer, note, f"{n - 1} of {n} are 0"]
    values = page.locator("#step-view svg.bars text.val").all_text_contents()[-n:]  # over the weights
    assert sorted(values) == ["0"] * (n - 1) + ["1"]
    assert page.locator("#step-view svg.bars rect.bar.score").count() == n
    page.check("#words")
    assert page.locator("#step-view svg.bars rect.bar.score").count() == 0
    assert page.locator("#step-view svg.bars rect.bar.weight").count() == 3  # abc, de and </s>
    notes = page.locator("#step-view svg.bars-axis text.axis-note").all_text_contents()
    assert notes == [note, "2 of 3 are 0"]
    page.uncheck("#words")
    page.locator("#step-view").screenshot(path=str(tmp_path / f"step-view-{normalizer}.png"))


def test_score_card_colours_each_token_by_its_probability(page, server):
    """After a translation, the model's own output is scored token by token (/score); a wrong
    translation typed in scores lower, beside the model's own, and its least probable token is
    outlined; a blank one is the server's error, in the card."""
    translate_in_page(page, "abcdef")
    page.wait_for_selector("#score-summary")
    own = page.input_value("#score-translation")
    assert own == api_translation(server, "abcdef")["candidates"][0]["text"]

    def shown():
        return page.eval_on_selector_all(
            ".score-token",
            "cells => cells.map(c => [c.querySelector('.tok')"
            ".textContent, +c.dataset.p, c.classList.contains('least')])",
        )

    def expected(translation):
        answer = post(server, "/score", {"text": "abcdef", "translation": translation, "model": server[1]})
        assert answer.status_code == 200, answer.text
        return answer.json()["scores"][0]

    first = expected(own)
    assert [token for token, _, _ in shown()] == first["tokens"]
    assert [p for _, p, _ in shown()] == pytest.approx(np.exp(first["log_probs"]).tolist(), abs=1e-4)
    assert page.locator("#score-own").count() == 0  # nothing to compare with yet

    page.fill("#score-translation", "abcdef")  # not reversed: a translation the model finds improbable
    page.click("#score")
    page.wait_for_selector("#score-own")
    wrong = expected("abcdef")
    assert [token for token, _, _ in shown()] == wrong["tokens"]
    assert [least for _, _, least in shown()].index(True) == int(np.argmin(wrong["log_probs"]))
    assert f"per token {wrong['per_token']:.3f}".replace("-", "−") in page.text_content("#score-summary")
    assert wrong["per_token"] < first["per_token"]
    assert f"{first['per_token']:.3f}".replace("-", "−") in page.text_content("#score-own")

    page.fill("#score-translation", "  ")
    page.press("#score-translation", "Enter")
    page.wait_for_selector("#score-error:not([hidden])")
    assert "HTTP 422" in page.text_content("#score-error")


def test_api_errors_are_shown(page, server):
    translate_in_page(page, "   ")
    detail = post(server, "/translate", {"text": "   "}).json()["detail"]
    assert page.get_attribute("body", "data-state") == "error"
    assert page.locator("#error").is_visible()
    assert detail in page.text_content("#error")
    assert "422" in page.text_content("#error")

    page.fill("#beam", "999")
    translate_in_page(page, "abc")
    response = post(server, "/translate", {"text": "abc", "beam": 999})
    assert response.status_code == 422
    assert response.json()["detail"] in page.text_content("#error")

    page.fill("#beam", "2")  # a good request clears the errors
    translate_in_page(page, "abc")
    assert page.locator("#error").is_hidden()
    assert page.text_content("#panel-a .translation") == "cba"


def test_tokens_are_text_not_html(page, server):
    translate_in_page(page, "a<b>c")
    source = api_translation(server, "a<b>c")["source_tokens"]
    assert "<unk>" in source  # the character model does not know "<" and ">"
    assert page.locator("#panel-a th.src-label").all_text_contents() == source
    assert page.locator("unk, b").count() == 0  # no element made from a token


# --- Transformer: layers and heads ---------------------------------------------------------------


def head_view_lines(page):
    """[query, key, stroke-opacity] of every line of the head view."""
    return page.eval_on_selector_all(
        "#layers-view svg.head-view line.att-line",
        "ls => ls.map(l => [+l.dataset.query, +l.dataset.key, +l.getAttribute('stroke-opacity')])",
    )


def assert_head_view(page, matrix, queries, keys):
    lines = head_view_lines(page)
    assert len(lines) == sum(w > 0 for row in matrix for w in row)  # exact zeros (masked) draw nothing
    for i, j, opacity in lines:
        assert opacity == pytest.approx(matrix[i][j], abs=1e-4), (i, j)
    assert page.locator("svg.head-view text.tok.query").all_text_contents() == queries
    assert page.locator("svg.head-view text.tok.key").all_text_contents() == keys


def selected_cells(page):
    return page.eval_on_selector_all(
        ".head-grid canvas.grid-cell.selected", "cs => cs.map(c => [+c.dataset.layer, +c.dataset.head])"
    )


def test_transformer_layers_and_heads(page, server):
    transformer = server[3]
    page.select_option("#model", transformer)
    assert "Transformer · d_model 32 · 4 heads · 3 encoder + 2 decoder layers" in page.text_content("#model-info")
    translate_in_page(page, "abcdef")
    assert page.get_attribute("body", "data-state") == "done", page.text_content("#error")
    assert page.locator("#layers-card").is_visible()
    shown = page.text_content("#panel-a .translation")
    answer = post(server, "/attention", {"text": "abcdef", "model": transformer, "translation": shown}).json()

    # encoder self-attention, layer 2, head 3: the lines' opacities are the API's weights
    page.select_option("#att-kind", "encoder")
    page.select_option("#att-layer", "2")
    page.select_option("#att-head", "3")
    assert_head_view(page, answer["encoder"][2][3], answer["source_tokens"], answer["source_tokens"])
    assert page.locator(".head-grid canvas.grid-cell").count() == 3 * 4  # layers x heads
    assert selected_cells(page) == [[2, 3]]
    cells = page.eval_on_selector_all(
        "#layers-view td.cell", "cs => cs.map(c => [+c.dataset.row, +c.dataset.col, +c.dataset.weight])"
    )
    assert len(cells) == len(answer["source_tokens"]) ** 2
    for i, j, w in cells:
        assert w == pytest.approx(answer["encoder"][2][3][i][j], abs=1e-5)

    # cross-attention has 2 layers: the layer falls back to the last; a grid cell click selects
    page.select_option("#att-kind", "cross")
    assert page.input_value("#att-layer") == "1" and page.input_value("#att-head") == "3"
    assert page.locator(".head-grid canvas.grid-cell").count() == 2 * 4
    page.click(".head-grid canvas.grid-cell[data-layer='0'][data-head='1']")
    assert page.input_value("#att-layer") == "0" and page.input_value("#att-head") == "1"
    assert selected_cells(page) == [[0, 1]]
    assert_head_view(page, answer["cross"][0][1], answer["tokens"], answer["source_tokens"])

    # all heads averaged; the decoder's lines never go to a later position
    page.select_option("#att-head", "mean")
    assert_head_view(page, np.mean(answer["cross"][0], axis=0).tolist(), answer["tokens"], answer["source_tokens"])
    assert selected_cells(page) == []
    page.select_option("#att-kind", "decoder")  # layer 0 exists in the decoder too: kept
    assert page.input_value("#att-layer") == "0" and page.input_value("#att-head") == "mean"
    assert_head_view(page, np.mean(answer["decoder"][0], axis=0).tolist(), answer["tokens"], answer["decoder_tokens"])
    assert all(j <= i for i, j, _ in head_view_lines(page))

    # hovering a token keeps only its lines (by display: a horizontal line has an empty bounding
    # box, which Playwright's :visible would count as hidden)
    def shown_lines():
        return sorted(
            page.eval_on_selector_all(
                "svg.head-view line.att-line",
                "ls => ls.filter(l => getComputedStyle(l).display !== 'none')"
                "        .map(l => [+l.dataset.query, +l.dataset.key])",
            )
        )

    page.hover("svg.head-view text.tok.query[data-query='1']")
    assert shown_lines() == [[1, 0], [1, 1]]  # decoder position 1 sees positions 0 and 1
    page.hover("svg.head-view text.tok.key[data-key='0']")
    assert shown_lines() == [[i, 0] for i in range(len(answer["tokens"]))]  # every position sees <s>
    page.mouse.move(1, 1)
    assert len(shown_lines()) == len(head_view_lines(page))

    # an RNN model has no layers and heads: the card is hidden
    page.select_option("#model", server[1])
    translate_in_page(page, "abcdef")
    assert page.locator("#layers-card").is_hidden()


def test_heads_switched_off_translate_the_sentence_without_them(page, server):
    """ "Switch this head off" sends the first model's request again with mask_heads; the answer is
    shown beside the translation with every head; chips switch heads on again, one or all."""
    from playwright.sync_api import expect

    transformer, sent = server[3], []
    page.on(
        "request",
        lambda r: sent.append(json.loads(r.post_data)) if r.method == "POST" and r.url.endswith("/translate") else None,
    )
    page.select_option("#model", transformer)
    translate_in_page(page, "abcdef")
    shown = page.text_content("#panel-a .translation")
    assert page.is_hidden("#heads-off") and page.is_disabled("#head-off")  # all heads averaged: none chosen

    def switch_off(kind, layer, head, expected_heads):
        page.select_option("#att-kind", kind)
        page.select_option("#att-layer", layer)
        page.select_option("#att-head", head)
        page.click("#head-off")
        body = {"text": "abcdef", "model": transformer, "beam": sent[0]["beam"], "mask_heads": expected_heads}
        without = post(server, "/translate", body).json()["translations"][0]["candidates"][0]["text"]
        expect(page.locator("#heads-off-translation")).to_have_text(without)
        assert sent[-1]["mask_heads"] == expected_heads and sent[-1]["text"] == "abcdef"
        assert page.is_disabled("#head-off")  # (this one is off already)

    switch_off("cross", "1", "2", "cross.1.2")
    assert page.text_content("#heads-off-result .with-all") == shown
    assert page.eval_on_selector_all(
        ".head-grid canvas.grid-cell.off", "cs => cs.map(c => [+c.dataset.layer, +c.dataset.head])"
    ) == [[1, 2]]
    switch_off("encoder", "0", "1", "cross.1.2,encoder.0.1")
    assert page.locator("#heads-off-list .head-chip").all_text_contents() == ["cross.1.2 ×", "encoder.0.1 ×"]
    page.click("#heads-off-list .head-chip[data-head='cross.1.2']")  # on again
    page.wait_for_function("() => document.querySelectorAll('#heads-off-list .head-chip').length === 1")
    assert sent[-1]["mask_heads"] == "encoder.0.1"
    requests = len(sent)
    page.click("#heads-on")
    assert page.is_hidden("#heads-off") and len(sent) == requests  # (all on: nothing to ask)


def test_saliency_beside_attention(page, server):
    """ "Compare with saliency" asks /saliency for the translation shown: two heatmaps, the attention
    and the gradients, each the API's weights, and how often their rows agree on the top piece."""
    translate_in_page(page, "abcdef")
    shown = page.text_content("#panel-a .translation")
    assert page.is_visible("#saliency-card") and page.locator("#saliency-result table").count() == 0
    page.click("#saliency-run")
    page.wait_for_selector("#saliency-agreement")
    answer = post(
        server, "/saliency", {"text": "abcdef", "model": server[1], "translation": shown if shown.strip() else None}
    ).json()
    for index, key in ((0, "attention"), (1, "saliency")):
        cells = page.eval_on_selector_all(
            f"#saliency-result table.heatmap >> nth={index} >> td.cell",
            "cs => cs.map(c => [+c.dataset.row, +c.dataset.col, +c.dataset.weight])",
        )
        assert len(cells) == len(answer["tokens"]) * len(answer["source_tokens"])
        for i, j, w in cells:
            assert w == pytest.approx(answer[key][i][j], abs=1e-3), (key, i, j)
    same = sum(np.argmax(a) == np.argmax(b) for a, b in zip(answer["attention"], answer["saliency"]))
    assert page.text_content("#saliency-agreement").startswith(f"{same} of {len(answer['tokens'])}")


# --- words or subword pieces; readable labels ---------------------------------------------------


MERGE_CASES = [
    (["▁Ein", "▁Sch", "iff", "</s>"], ["▁A", "▁sh", "ip", ".", "</s>"]),
    (["▁", "a", "b", "c", "▁", "d", "e", "</s>"], ["▁", "e", "d", "▁", "c", "b", "a", "</s>"]),
    (["a", "▁b", "<unk>", "c", "</s>"], ["<s>", "x", "</s>", "y", "▁"]),
    (["▁", "</s>"], ["▁"]),
    (["▁日本", "語", "▁😀", "x", "</s>"], ["</s>"]),
]


def test_words_module_merges_as_the_figures_do(page):
    """static/words.js against attnmt.viz.words.merge_pieces (the figures' --merge-words), same matrices."""
    from attnmt.viz.words import merge_pieces, word_spans

    rng = np.random.default_rng(0)
    for source, target in MERGE_CASES:
        scores = rng.normal(size=(len(target), len(source))) * 3
        matrix = np.exp(scores) / np.exp(scores).sum(axis=1, keepdims=True)
        words = page.evaluate(
            """async ([source, target, matrix, scores]) => {
            const w = await import("/static/words.js");
            const spans = w.wordSpans(source);
            return { merged: w.mergePieces(source, target, matrix), spans,
                     lse: scores.map((row) => w.logSumExpColumns(row, spans)),
                     sums: matrix.map((row) => w.sumColumns(row, spans)) };
        }""",
            [source, target, matrix.tolist(), scores.tolist()],
        )
        source_words, target_words, expected = merge_pieces(source, target, matrix)
        assert words["merged"]["source"] == source_words and words["merged"]["target"] == target_words
        np.testing.assert_allclose(words["merged"]["matrix"], expected, rtol=0, atol=1e-12)
        np.testing.assert_allclose(np.sum(words["merged"]["matrix"], axis=1), 1.0, atol=1e-12)  # rows still sum to 1
        assert [tuple(s) for s in words["spans"]] == word_spans(source)
        # the step view's word scores: their softmax is the word weights (the sums of the pieces')
        lse = np.array(words["lse"])
        np.testing.assert_allclose(np.exp(lse) / np.exp(lse).sum(axis=1, keepdims=True), words["sums"], atol=1e-12)
        np.testing.assert_allclose(
            words["sums"], [[row[a:b].sum() for a, b in word_spans(source)] for row in matrix], atol=1e-12
        )


def step_number(page) -> int:
    return int(page.get_attribute("#step-index", "data-step"))


def test_words_toggle_merges_the_heatmaps_and_the_step_bars(page, server):
    from attnmt.viz.words import merge_pieces, word_spans

    text = "abc de fghi"
    translate_in_page(page, text)
    expected = api_translation(server, text)
    best, source = expected["candidates"][0], expected["source_tokens"]
    assert page.get_attribute("#panel-a table.heatmap", "data-unit") == "token"
    page.click("#steps-card h2")
    page.keyboard.press("ArrowRight")  # step 2
    trace = post(server, "/trace", {"text": text, "model": server[1], "top_k": 5}).json()

    page.check("#words")  # no new request: the answers shown are redrawn
    source_words, target_words, matrix = merge_pieces(source, best["tokens"], best["attention"])
    assert len(source_words) == 4 and page.get_attribute("#panel-a table.heatmap", "data-unit") == "word"
    assert page.locator("#panel-a th.src-label").all_text_contents() == source_words
    assert page.locator("#panel-a th.tgt-label").all_text_contents() == target_words
    cells = page.eval_on_selector_all(
        "#panel-a td.cell", "cs => cs.map(c => [+c.dataset.row, +c.dataset.col, +c.dataset.weight])"
    )
    assert len(cells) == len(source_words) * len(target_words)
    for i, j, w in cells:
        assert w == pytest.approx(matrix[i][j], abs=1e-6)

    # the step view stays at step 2, its bars over the source words
    assert step_number(page) == 2
    spans = word_spans(trace["source_tokens"])
    weights = trace["steps"][1]["weights"]
    labels = page.eval_on_selector_all("#step-view svg.bars text.tok-label", "ts => ts.map(t => t.dataset.token)")
    assert labels == merge_pieces(trace["source_tokens"], trace["tokens"], [s["weights"] for s in trace["steps"]])[0]
    bars = page.locator("#step-view svg.bars rect.bar.weight title").all_text_contents()
    assert [float(b.removeprefix("a = ")) for b in bars] == pytest.approx(
        [sum(weights[a:b]) for a, b in spans], abs=1e-4
    )
    assert page.locator("#step-view svg.bars rect.bar.score").count() == len(spans)
    # its heatmap: the rows of the words begun, the current one the mean of its pieces so far
    steps_so_far = [s["weights"] for s in trace["steps"][:2]]
    _, begun, so_far = merge_pieces(trace["source_tokens"], trace["tokens"][:2], steps_so_far)
    assert page.get_attribute("#step-view table.heatmap", "data-unit") == "word"
    assert page.get_attribute("#step-view table.heatmap tr.current", "data-row") == str(len(begun) - 1)
    current = page.eval_on_selector_all(
        f"#step-view td.cell[data-row='{len(begun) - 1}']", "cs => cs.map(c => +c.dataset.weight)"
    )
    assert current == pytest.approx(list(so_far[-1]), abs=1e-6)

    page.uncheck("#words")  # back to pieces, same step
    assert step_number(page) == 2
    assert page.locator("#panel-a th.src-label").all_text_contents() == source
    assert page.locator("#step-view svg.bars rect.bar.weight").count() == len(trace["source_tokens"])


def overlapping_labels(page) -> list:
    """Pairs of source labels under the step bars whose bounding boxes overlap."""
    boxes = page.eval_on_selector_all(
        "#step-view svg.bars text.tok-label",
        """ts => ts.map((t) => {
        const r = t.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; })""",
    )
    assert boxes and all(right > left and bottom > top for left, top, right, bottom in boxes)
    bars = page.eval_on_selector_all(
        "#step-view svg.bars rect.bar, #step-view svg.bars text.val",
        "es => es.map((e) => e.getBoundingClientRect().bottom)",
    )
    svg_box = page.eval_on_selector("#step-view svg.bars", "s => s.getBoundingClientRect().bottom")
    assert all(max(bars) <= top and bottom <= svg_box for _, top, _, bottom in boxes)  # under the bars, not cut off
    return [
        (i, j)
        for i, a in enumerate(boxes)
        for j, b in enumerate(boxes[:i])
        if a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
    ]


def test_step_labels_stay_readable_up_to_the_token_limit(page, server, reverse_model):
    translator, _ = reverse_model
    limit = ServerLimits().max_tokens  # the server of this module has the default limits
    sixteen = " ".join(random_strings(16, 3, 9, seed=7))
    longest = ""
    for word in random_strings(200, 3, 9, seed=8):  # words until the token limit
        longer = f"{longest} {word}".strip()
        if len(translator.src_subwords.encode([longer])[0]) > limit:
            break
        longest = longer
    while len(translator.src_subwords.encode([longest + "a"])[0]) <= limit:
        longest += "a"
    assert len(translator.src_subwords.encode([longest])[0]) == limit
    for text in (sixteen, longest):
        translate_in_page(page, text)
        assert page.get_attribute("body", "data-state") == "done", page.text_content("#error")
        pieces = len(translator.src_subwords.encode([text])[0]) + 1  # and </s>
        for words, labels in ((False, pieces), (True, len(text.split()) + 1)):
            page.set_checked("#words", words)
            assert page.locator("#step-view svg.bars text.tok-label").count() == labels
            assert overlapping_labels(page) == [], (len(text), words)
    assert pieces == limit + 1  # the last sentence was at the limit: every piece labelled, none overlapping


@pytest.fixture(scope="module")
def tagged_server(browser, tmp_path_factory):
    """(base URL, a toy model trained with extra pairs tagged <BT>, a toy model without tags)."""
    from attnmt.training import Trainer
    from conftest import toy_config
    from test_extra_corpora import MAIN, QUIET, extra_config

    folder = tmp_path_factory.mktemp("explorer-tags")
    tagged, plain = extra_config(folder / "tagged", training={"max_steps": 3}), toy_config(folder / "plain", MAIN)
    for config, name in ((tagged, "tagged"), (plain, "plain")):
        config.experiment_dir = folder / name
        Trainer(config, **QUIET).train()
    with running_server(create_app([tagged.experiment_dir, plain.experiment_dir])) as url:
        yield url, "tagged", "plain"


def test_a_tag_reaches_every_view_of_the_models_trained_with_it(browser, tagged_server):
    """The Tag menu lists the first model's tags (hidden for a model without); the tag chosen goes
    with /translate, /trace, /beam and /score of that model, not to a compared model without it."""
    url, tagged, plain = tagged_server
    page = browser.new_page(viewport={"width": 1320, "height": 900})
    errors, sent = [], []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on(
        "request",
        lambda r: sent.append((r.url.rsplit("/", 1)[1], json.loads(r.post_data))) if r.method == "POST" else None,
    )
    try:
        page.goto(url + "/")
        page.wait_for_selector("body[data-state=ready]")
        assert page.is_visible("#tag-field")
        assert page.locator("#tag option").all_text_contents() == ["none", "<BT>"]
        assert "tags <BT>" in page.text_content("#model-info")
        page.select_option("#tag", "<BT>")
        page.check("#compare")
        page.select_option("#model-b", plain)
        translate_in_page(page, "abc")
        page.fill("#score-translation", "cba")  # (a toy model's own output may be empty: nothing scored)
        page.click("#score")
        page.wait_for_selector("#score-summary")
        bodies = {(path, body["model"]): body for path, body in sent}
        for path in ("translate", "trace", "beam", "score"):
            assert bodies[(path, tagged)]["tag"] == "<BT>", path
        assert bodies[("translate", plain)]["tag"] is None
        labels = page.locator("#panel-a table.heatmap th.src-label").all_text_contents()
        assert labels[0] == "<BT>"  # the tag's column: how much each step looks at it
        page.select_option("#model", plain)
        assert not page.is_visible("#tag-field")
    finally:
        page.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


@pytest.mark.parametrize(
    "rewrite, notes",
    [
        (
            {"attention_normalizer": "csparsemax", "fertility_bound": 1.5},
            ["Σ a before", "+ this step", "bound f = 1.5"],
        ),
        (
            {"attention": "coverage", "coverage_fertility": 2},
            ["Σ a before", "+ this step", "÷ fertility Φⱼ", "in the score"],
        ),
        (
            {"attention": "coverage", "coverage_fertility": 0, "coverage_dim": 10},
            ["Σ a before", "+ this step", "score: a GRU's", "Cⱼ (d 10) of it"],
        ),
    ],
)
def test_the_step_view_shows_the_coverage_a_models_attention_reads(page, server, rewrite, notes):
    """A model with coverage attention or csparsemax (its /models entry rewritten here): under the
    attention bars, each source token's coverage before the step (the sum of the earlier steps'
    weights of /trace) with the step's weight on top; for csparsemax the bound, the last token the
    sink. Not in words mode, nor for a model whose attention reads no coverage."""
    text = "abc de"
    translate_in_page(page, text)
    page.wait_for_selector("#step-view svg.bars")
    assert page.locator("#step-view svg.bars.coverage").count() == 0  # the model as it is: bahdanau, softmax

    def rewritten(route):
        response = route.fetch()
        body = response.json()
        body[0].update(rewrite)
        route.fulfill(response=response, json=body)

    page.route("**/models", rewritten)
    page.reload()
    page.wait_for_selector("body[data-state=ready]")
    translate_in_page(page, text)
    page.click("#step-next")
    page.click("#step-next")
    trace = post(server, "/trace", {"text": text, "top_k": 5}).json()
    expected = [sum(step["weights"][j] for step in trace["steps"][:2]) for j in range(len(trace["source_tokens"]))]
    covered = page.locator("#step-view svg.bars.coverage rect.bar.covered")
    assert [float(v) for v in covered.evaluate_all("rs => rs.map((r) => r.dataset.value)")] == pytest.approx(
        expected, abs=1e-5
    )
    assert page.locator("#step-view svg.bars.coverage rect.bar.current").count() == len(expected)
    assert page.locator("#step-view .bars-wrap:has(svg.coverage) text.axis-note").all_text_contents() == notes
    bounded = "fertility_bound" in rewrite
    assert page.locator("#step-view svg.bars.coverage line.bound").count() == int(bounded)
    assert page.locator("#step-view svg.bars.coverage rect.bar.covered.sink").count() == int(bounded)
    page.check("#words")
    assert page.locator("#step-view svg.bars.coverage").count() == 0
