"""The explorer's pair view (static/pairs.js) in headless Chromium, against the real server holding
a sentence-pair model, and the /classify endpoint it calls."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from attnmt.serve import create_app
from test_explorer import TIMEOUT_MS, attended, browser, running_server  # noqa: F401 (browser: a fixture)

PREMISE, HYPOTHESIS = "three red dogs are running in the park", "three old red dogs are running in the park"


@pytest.fixture(scope="module")
def pair_server(pair_model):
    with running_server(create_app([pair_model])) as url:
        yield url


def classify(url, premise=PREMISE, hypothesis=HYPOTHESIS):
    return httpx.post(url + "/classify", json={"premise": premise, "hypothesis": hypothesis}, timeout=30)


def test_classify_endpoint_is_bounded_and_answers_both_directions(pair_server):
    answer = classify(pair_server).json()
    assert set(answer["probabilities"]) == {"CONTRADICTION", "ENTAILMENT", "NEUTRAL"}
    rows, columns = len(answer["premise_tokens"]), len(answer["hypothesis_tokens"])
    assert np.allclose(np.sum(answer["premise_attention"], axis=1), 1, atol=1e-5)
    assert np.allclose(np.sum(answer["hypothesis_attention"], axis=0), 1, atol=1e-5)
    assert np.shape(answer["hypothesis_attention"]) == (rows, columns)
    assert classify(pair_server, premise=" ").status_code == 422
    assert classify(pair_server, hypothesis="x" * 100_000).status_code in (413, 422)
    refused = httpx.post(pair_server + "/translate", json={"text": "a dog"}, timeout=30)
    assert refused.status_code == 422 and "/classify" in refused.json()["detail"]
    [info] = httpx.get(pair_server + "/models", timeout=30).json()
    assert info["type"] == "decomposable" and info["labels"] == ["CONTRADICTION", "ENTAILMENT", "NEUTRAL"]


@pytest.fixture
def pair_page(browser, pair_server):  # noqa: F811
    context = browser.new_context(viewport={"width": 1320, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(pair_server + "/")
    page.wait_for_selector("body[data-state=ready]")
    yield page
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def test_pair_view_shows_label_probabilities_and_attention(pair_page, pair_server):
    page = pair_page
    assert page.locator("#pair-card").is_visible() and page.locator("#source").is_hidden()
    assert page.locator("#results-card").is_hidden() and page.locator("#score-card").is_hidden()
    page.fill("#premise", PREMISE)
    page.fill("#hypothesis", HYPOTHESIS)
    page.press("#hypothesis", "Enter")
    page.wait_for_selector("body[data-state=done]")
    answer = classify(pair_server).json()
    assert page.text_content("#pair-label") == answer["label"]
    shown = page.eval_on_selector_all(".class-bar", "bars => bars.map(b => [b.dataset.label, +b.dataset.probability])")
    assert [label for label, _ in shown] == list(answer["probabilities"])
    for label, p in shown:
        assert p == pytest.approx(answer["probabilities"][label], abs=1e-5)

    def cells():
        return page.eval_on_selector_all(
            "#pair-result td.cell", "cells => cells.map(c => [+c.dataset.row, +c.dataset.col, +c.dataset.weight])"
        )

    words = [t.replace("\u2581", "") for t in answer["premise_tokens"]]
    assert page.locator("#pair-result th.tgt-label").all_text_contents() == words  # rows: premise
    for i, j, w in cells():
        assert w == pytest.approx(answer["premise_attention"][i][j], abs=1e-5)

    # hover a premise word: the hypothesis words it attends to are highlighted
    page.hover("#pair-result th.tgt-label[data-row='1']")
    highlighted = {
        int(c)
        for c in page.eval_on_selector_all("#pair-result th.src-label.highlight", "els => els.map(e => e.dataset.col)")
    }
    assert highlighted == attended(answer["premise_attention"][1])
    assert "Premise" in page.text_content("#pair-result .focus-info")

    # the other direction: rows are the hypothesis words, each over the premise
    page.select_option("#pair-direction", "hypothesis")
    hypothesis_words = [t.replace("\u2581", "") for t in answer["hypothesis_tokens"]]
    assert page.locator("#pair-result th.tgt-label").all_text_contents() == hypothesis_words
    for j, i, w in cells():
        assert w == pytest.approx(answer["hypothesis_attention"][i][j], abs=1e-5)


def test_pair_view_shows_errors(pair_page):
    pair_page.fill("#premise", "   ")
    pair_page.fill("#hypothesis", "a dog")
    pair_page.click("#classify")
    pair_page.wait_for_selector("body[data-state=error]")
    assert "HTTP 422" in pair_page.text_content("#pair-error")


@pytest.mark.parametrize("width", [390, 1280, 1920])
def test_pair_view_fits_or_scrolls_with_its_labels(browser, pair_server, width):  # noqa: F811
    """The pair card at a phone's width and wider: its text boxes, menu and matrix within the card
    (issue 28, point 3), the matrix scrolling under its row labels where it is wider."""
    from test_explorer_layout import open_page, problems

    page = open_page(browser, pair_server, width)
    page.fill("#premise", PREMISE + " near the old river bank today")
    page.fill("#hypothesis", HYPOTHESIS)
    page.press("#hypothesis", "Enter")
    page.wait_for_selector("body[data-state=done]")
    assert problems(page) == []
    box = page.eval_on_selector("#premise", "t => [t.getBoundingClientRect().width, t.closest('.card').clientWidth]")
    assert box[0] >= 0.8 * box[1]  # a text box across the card, not a few words wide
    page.context.close()
    assert not page.errors, page.errors
