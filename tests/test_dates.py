"""Tests for the synthetic date-normalisation task (attnmt.translation.dates)."""

import datetime
import random

import pytest

from attnmt.translation import dates
from attnmt.translation.dates import format_date

SUNDAY = datetime.date(2026, 11, 22)

# Dates chosen to hit edge cases: first of month (1er / 1º), 8 and 11 (Italian
# elision), 11-13 (English "th"), a leap day, and both ends of the range.
SAMPLE_DATES = [
    dates.MIN_DATE,
    dates.MAX_DATE,
    SUNDAY,
    datetime.date(2000, 2, 29),
    datetime.date(1987, 1, 1),
    datetime.date(1955, 8, 8),
    datetime.date(2012, 12, 11),
    datetime.date(2043, 5, 13),
    datetime.date(1999, 3, 2),
]


def _parse(text: str, style: str) -> datetime.date:
    """Independent reader for the numeric styles, used to check round trips."""
    import re

    numbers = [int(x) for x in re.split(r"[./-]", text)]
    if style == "ymd_slash":
        y, m, d = numbers
    elif style == "mdy_slash":
        m, d, y = numbers
    else:
        d, m, y = numbers
    if style == "dmy_dot_short":
        y += 1900 if y >= 50 else 2000
    return datetime.date(y, m, d)


def test_same_seed_same_pairs_and_different_seed_different():
    assert dates.generate_pairs(200, seed=3) == dates.generate_pairs(200, seed=3)
    assert dates.generate_pairs(200, seed=3) != dates.generate_pairs(200, seed=4)


def test_random_pair_uses_only_the_given_rng():
    a = [dates.random_pair(random.Random(11)) for _ in range(5)]
    random.seed(0)
    b = [dates.random_pair(random.Random(11)) for _ in range(5)]
    assert a == b


@pytest.mark.parametrize("language", dates.LANGUAGES)
def test_every_style_of_every_language_formats(language):
    styles = dates.STYLES_BY_LANGUAGE[language]
    assert styles, language
    for style in styles:
        assert style in dates.STYLES
        for d in SAMPLE_DATES:
            for casing in dates.CASINGS:
                text = format_date(d, style, language, casing=casing)
                assert text and text == text.strip(), (d, style, language, casing)
                assert "\t" not in text and "\n" not in text
            if style in dates.NUMERIC_STYLES and dates.is_unambiguous(d, style):
                assert _parse(text, style) == d, (text, style)
            elif style in dates.WORD_STYLES:
                assert str(d.year) in text, (text, style, language)


def test_every_style_is_used_by_some_language():
    used = {s for styles in dates.STYLES_BY_LANGUAGE.values() for s in styles}
    assert used == set(dates.STYLES)
    assert set(dates.STYLES_BY_LANGUAGE) == set(dates.LANGUAGES)
    assert len(dates.LANGUAGES) >= 5


def test_unsupported_combinations_are_rejected():
    with pytest.raises(ValueError):
        format_date(SUNDAY, "mdy_slash", "de")  # US order is English only
    with pytest.raises(ValueError):
        format_date(SUNDAY, "long", "xx")
    with pytest.raises(ValueError):
        format_date(SUNDAY, "no-such-style", "en")
    with pytest.raises(ValueError):
        format_date(SUNDAY, "long", "en", casing="wavy")


@pytest.mark.parametrize(
    "style, language, expected",
    [
        ("long", "en", "22 November 2026"),
        ("long_us", "en", "November 22, 2026"),
        ("weekday_long", "en", "Sunday, 22 November 2026"),
        ("weekday_us", "en", "Sunday, November 22, 2026"),
        ("abbrev", "en", "22 Nov 2026"),
        ("abbrev_us", "en", "Nov 22, 2026"),
        ("ordinal", "en", "November 22nd, 2026"),
        ("article", "en", "the 22nd of November 2026"),
        ("long", "de", "22. November 2026"),
        ("weekday_long", "de", "Sonntag, 22. November 2026"),
        ("abbrev", "de", "22. Nov. 2026"),
        ("long", "fr", "22 novembre 2026"),
        ("article", "fr", "le 22 novembre 2026"),
        ("weekday_long", "fr", "dimanche 22 novembre 2026"),
        ("long", "es", "22 de noviembre de 2026"),
        ("weekday_long", "es", "domingo, 22 de noviembre de 2026"),
        ("long", "pt", "22 de novembro de 2026"),
        ("long", "it", "22 novembre 2026"),
        ("weekday_long", "it", "domenica 22 novembre 2026"),
        ("long", "nl", "22 november 2026"),
        ("weekday_long", "nl", "zondag 22 november 2026"),
        ("dmy_dot", "de", "22.11.2026"),
        ("dmy_slash", "fr", "22/11/2026"),
        ("mdy_slash", "en", "11/22/2026"),
        ("dmy_dot_short", "de", "22.11.26"),
        ("ymd_slash", "nl", "2026/11/22"),
        ("dmy_dash", "nl", "22-11-2026"),
    ],
)
def test_spot_checks_for_22_november_2026(style, language, expected):
    assert format_date(SUNDAY, style, language) == expected


@pytest.mark.parametrize(
    "d, style, language, expected",
    [
        (datetime.date(2024, 3, 1), "long", "fr", "1er mars 2024"),
        (datetime.date(2024, 3, 1), "long", "it", "1º marzo 2024"),
        (datetime.date(2024, 3, 8), "article", "it", "l'8 marzo 2024"),
        (datetime.date(2024, 3, 11), "ordinal", "en", "March 11th, 2024"),
        (datetime.date(2024, 3, 23), "ordinal", "en", "March 23rd, 2024"),
        (datetime.date(2024, 3, 5), "dmy_dot_nopad", "de", "5.3.2024"),
        (datetime.date(2024, 3, 5), "abbrev", "nl", "5 mrt 2024"),
        (datetime.date(2024, 8, 14), "abbrev", "pt", "14 ago 2024"),
        (datetime.date(2024, 2, 14), "weekday_long", "pt", "quarta-feira, 14 de fevereiro de 2024"),
        (datetime.date(2024, 2, 14), "weekday_long", "es", "miércoles, 14 de febrero de 2024"),
        (datetime.date(2024, 2, 16), "weekday_long", "it", "venerdì 16 febbraio 2024"),
        (datetime.date(2024, 3, 23), "weekday_long", "de", "Samstag, 23. März 2024"),
        (datetime.date(2024, 12, 19), "weekday_long", "nl", "donderdag 19 december 2024"),
    ],
)
def test_more_spot_checks(d, style, language, expected):
    assert format_date(d, style, language) == expected


def test_weekday_tables_match_the_calendar():
    monday = datetime.date(2024, 1, 1)  # a Monday
    assert monday.weekday() == 0
    for language, names in dates.WEEKDAYS.items():
        assert len(names) == 7 and len(set(names)) == 7, language
        text = format_date(monday, "weekday_long", language)
        assert text.startswith(names[0]), (language, text)
    assert dates.WEEKDAYS["de"][SUNDAY.weekday()] == "Sonntag"
    for table in (dates.MONTHS, dates.MONTHS_ABBREV):
        for language, names in table.items():
            assert len(names) == 12 and len(set(names)) == 12, language


def test_casings():
    d = datetime.date(2026, 8, 1)
    assert format_date(d, "long", "fr", casing="lower") == "1er août 2026"
    assert format_date(d, "long", "fr", casing="upper") == "1ER AOÛT 2026"
    assert format_date(d, "weekday_long", "fr", casing="sentence") == "Samedi 1er août 2026"
    assert format_date(d, "weekday_long", "es", casing="names") == "Sábado, 1 de Agosto de 2026"
    assert format_date(d, "long", "en", casing="lower") == "1 august 2026"
    assert format_date(d, "dmy_dot", "en", casing="upper") == "01.08.2026"


def test_generated_pairs_are_valid_and_varied():
    pairs = dates.generate_pairs(3000, seed=0)
    languages_seen = set()
    for text, iso in pairs:
        assert text and "\t" not in text and "\n" not in text and "\r" not in text
        d = datetime.date.fromisoformat(iso)
        assert d.isoformat() == iso
        assert dates.MIN_DATE <= d <= dates.MAX_DATE
        for language, names in dates.MONTHS.items():
            if any(name.lower() in text.lower() for name in names):
                languages_seen.add(language)
    assert languages_seen == set(dates.LANGUAGES)
    sources = [t for t, _ in pairs]
    assert len(set(sources)) > 0.95 * len(sources)
    assert any(t.islower() and t[0].isalpha() for t in sources)  # lower-cased variants
    assert any(t.isupper() for t in sources)  # upper-cased variants
    assert any(t[0].isdigit() and "/" in t for t in sources)  # numeric styles


def test_numeric_sources_have_a_single_reading():
    """Ambiguous numeric forms are never generated: one source, one target.

    "a/b/yyyy" is day-first unless b > 12 (then it must be US order), and a
    two-digit year always lies in SHORT_YEAR_RANGE.
    """
    import re

    low, high = dates.SHORT_YEAR_RANGE
    slashed = short = 0
    for text, iso in dates.generate_pairs(20000, seed=1):
        d = datetime.date.fromisoformat(iso)
        if m := re.fullmatch(r"(\d\d)/(\d\d)/(\d{4})", text):
            a, b, y = map(int, m.groups())
            day_first = b <= 12
            assert d == (datetime.date(y, b, a) if day_first else datetime.date(y, a, b)), text
            slashed += 1
        elif re.fullmatch(r"\d\d\.\d\d\.\d\d", text):
            assert low <= d.year <= high and text.endswith(f"{d.year % 100:02d}"), text
            short += 1
    assert slashed > 100 and short > 100
    assert not dates.is_unambiguous(datetime.date(2026, 5, 6), "mdy_slash")
    assert dates.is_unambiguous(datetime.date(2026, 5, 5), "mdy_slash")
    assert not dates.is_unambiguous(datetime.date(1926, 5, 6), "dmy_dot_short")


def test_target_is_the_true_date_of_the_source():
    """Re-derive the date from the text for every generated pair."""
    rng = random.Random(5)
    for _ in range(2000):
        language = rng.choice(dates.LANGUAGES)
        style = rng.choice(dates.STYLES_BY_LANGUAGE[language])
        d = datetime.date.fromordinal(rng.randint(dates.MIN_DATE.toordinal(), dates.MAX_DATE.toordinal()))
        text = format_date(d, style, language)
        if style in dates.NUMERIC_STYLES:
            if dates.is_unambiguous(d, style):
                assert _parse(text, style) == d
        else:
            month_names = dates.MONTHS_ABBREV if "abbrev" in style else dates.MONTHS
            assert month_names[language][d.month - 1] in text, (text, d)
            assert str(d.year) in text


def test_write_corpus(tmp_path):
    out = tmp_path / "new" / "dates"
    # Large enough that dev/test would share sources with train by chance
    # (dozens expected) if write_corpus did not remove them.
    sizes = dict(n_train=10000, n_dev=1000, n_test=1000, seed=7)
    paths = dates.write_corpus(out, **sizes)
    assert set(paths) == {"train", "dev", "test"}
    assert paths["train"] == out / "train.tsv"
    split = {}
    for name, path in paths.items():
        raw = path.read_bytes()
        assert b"\r" not in raw and raw.endswith(b"\n")
        lines = raw.decode("utf-8").split("\n")[:-1]
        rows = [line.split("\t") for line in lines]
        assert all(len(row) == 2 for row in rows), name
        for _source, target in rows:
            assert datetime.date.fromisoformat(target).isoformat() == target
        split[name] = rows
    assert len(split["train"]) == 10000
    assert len(split["dev"]) == 1000
    assert len(split["test"]) == 1000
    train_sources = {s for s, _ in split["train"]}
    dev_sources = {s for s, _ in split["dev"]}
    test_sources = {s for s, _ in split["test"]}
    assert not train_sources & test_sources
    assert not train_sources & dev_sources
    assert not dev_sources & test_sources


def test_write_corpus_is_deterministic(tmp_path):
    sizes = dict(n_train=300, n_dev=40, n_test=30, seed=2)
    first = dates.write_corpus(tmp_path / "a", **sizes)
    second = dates.write_corpus(tmp_path / "b", **sizes)
    for name in first:
        assert first[name].read_bytes() == second[name].read_bytes()
    lines = first["train"].read_text(encoding="utf-8").splitlines()
    assert [tuple(line.split("\t")) for line in lines] == dates.generate_pairs(300, seed=2)
    other = dates.write_corpus(tmp_path / "c", **{**sizes, "seed": 3})
    assert other["dev"].read_bytes() != first["dev"].read_bytes()


def test_examples():
    assert 5 <= len(dates.EXAMPLES) <= 8
    assert len(set(dates.EXAMPLES)) == len(dates.EXAMPLES)
    assert "Sonntag, 22. November 2026" in dates.EXAMPLES
    assert "le 14 juillet 1989" in dates.EXAMPLES
    languages = {lang for _, _, lang in dates._EXAMPLE_SPECS}
    assert len(languages) >= 5
    for example in dates.EXAMPLES:
        assert "\t" not in example and "\n" not in example
