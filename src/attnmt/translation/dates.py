"""Synthetic date-normalisation task: human-written dates -> ISO dates.

The quick start needs a translation task that ships with the project (no
downloads), trains in about a minute on a CPU and has attention alignments
that are easy to read.  This module writes dates in many formats and in
several languages and pairs each with its ISO form (``YYYY-MM-DD``)::

    >>> import datetime
    >>> format_date(datetime.date(2026, 11, 22), "weekday_long", "de")
    'Sonntag, 22. November 2026'
    >>> format_date(datetime.date(2026, 11, 22), "article", "fr")
    'le 22 novembre 2026'

The month and weekday tables are written out by hand (no ``locale``), so the
output is identical on every machine.  Everything here uses only the standard
library and is deterministic given a seed.

Every source string has exactly one correct target.  Two numeric styles could
be read two ways, so :func:`random_pair` only uses them for dates that cannot
be misread:

* ``mdy_slash`` (US ``11/22/2026``) has the same shape as ``dmy_slash``
  (``22/11/2026``).  It is only generated when the day is above 12 or equals
  the month, so ``05/06/2026`` always means 5 June.
* ``dmy_dot_short`` (``22.11.26``) has a two-digit year.  It is only generated
  for the years in ``SHORT_YEAR_RANGE`` (1950-2049): ``50``-``99`` mean
  19xx and ``00``-``49`` mean 20xx.
"""

from __future__ import annotations

import datetime
import pathlib
import random

__all__ = [
    "CASINGS",
    "EXAMPLES",
    "LANGUAGES",
    "MAX_DATE",
    "MIN_DATE",
    "NUMERIC_STYLES",
    "SHORT_YEAR_RANGE",
    "STYLES",
    "STYLES_BY_LANGUAGE",
    "WORD_STYLES",
    "format_date",
    "generate_pairs",
    "is_unambiguous",
    "random_pair",
    "write_corpus",
]

LANGUAGES: tuple[str, ...] = ("en", "de", "fr", "es", "it", "nl", "pt")

MIN_DATE = datetime.date(1900, 1, 1)
MAX_DATE = datetime.date(2099, 12, 31)
SHORT_YEAR_RANGE = (1950, 2049)  # years that a two-digit year can stand for

# --- Name tables (index 0 = January / Monday, as in date.weekday()) -------

MONTHS: dict[str, tuple[str, ...]] = {
    "en": (
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ),
    "de": (
        "Januar",
        "Februar",
        "März",
        "April",
        "Mai",
        "Juni",
        "Juli",
        "August",
        "September",
        "Oktober",
        "November",
        "Dezember",
    ),
    "fr": (
        "janvier",
        "février",
        "mars",
        "avril",
        "mai",
        "juin",
        "juillet",
        "août",
        "septembre",
        "octobre",
        "novembre",
        "décembre",
    ),
    "es": (
        "enero",
        "febrero",
        "marzo",
        "abril",
        "mayo",
        "junio",
        "julio",
        "agosto",
        "septiembre",
        "octubre",
        "noviembre",
        "diciembre",
    ),
    "it": (
        "gennaio",
        "febbraio",
        "marzo",
        "aprile",
        "maggio",
        "giugno",
        "luglio",
        "agosto",
        "settembre",
        "ottobre",
        "novembre",
        "dicembre",
    ),
    "nl": (
        "januari",
        "februari",
        "maart",
        "april",
        "mei",
        "juni",
        "juli",
        "augustus",
        "september",
        "oktober",
        "november",
        "december",
    ),
    "pt": (
        "janeiro",
        "fevereiro",
        "março",
        "abril",
        "maio",
        "junho",
        "julho",
        "agosto",
        "setembro",
        "outubro",
        "novembro",
        "dezembro",
    ),
}

# Abbreviations as usually printed in each language (with a full stop where
# the word is cut short, as in German and French).
MONTHS_ABBREV: dict[str, tuple[str, ...]] = {
    "en": ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"),
    "de": ("Jan.", "Feb.", "März", "Apr.", "Mai", "Juni", "Juli", "Aug.", "Sept.", "Okt.", "Nov.", "Dez."),
    "fr": ("janv.", "févr.", "mars", "avr.", "mai", "juin", "juil.", "août", "sept.", "oct.", "nov.", "déc."),
    "es": ("ene", "feb", "mar", "abr", "may", "jun", "jul", "ago", "sep", "oct", "nov", "dic"),
    "it": ("gen", "feb", "mar", "apr", "mag", "giu", "lug", "ago", "set", "ott", "nov", "dic"),
    "nl": ("jan", "feb", "mrt", "apr", "mei", "jun", "jul", "aug", "sep", "okt", "nov", "dec"),
    "pt": ("jan", "fev", "mar", "abr", "mai", "jun", "jul", "ago", "set", "out", "nov", "dez"),
}

WEEKDAYS: dict[str, tuple[str, ...]] = {
    "en": ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"),
    "de": ("Montag", "Dienstag", "Mittwoch", "Donnerstag", "Freitag", "Samstag", "Sonntag"),
    "fr": ("lundi", "mardi", "mercredi", "jeudi", "vendredi", "samedi", "dimanche"),
    "es": ("lunes", "martes", "miércoles", "jueves", "viernes", "sábado", "domingo"),
    "it": ("lunedì", "martedì", "mercoledì", "giovedì", "venerdì", "sabato", "domenica"),
    "nl": ("maandag", "dinsdag", "woensdag", "donderdag", "vrijdag", "zaterdag", "zondag"),
    "pt": ("segunda-feira", "terça-feira", "quarta-feira", "quinta-feira", "sexta-feira", "sábado", "domingo"),
}

# --- Styles ---------------------------------------------------------------

# Styles with words; each language supports the ones listed for it below.
WORD_STYLES: tuple[str, ...] = (
    "long",  # 22 November 2026 / 22. November 2026 / 22 de noviembre de 2026
    "long_us",  # November 22, 2026                      (en)
    "weekday_long",  # Sunday, 22 November 2026 / dimanche 22 novembre 2026
    "weekday_us",  # Sunday, November 22, 2026              (en)
    "abbrev",  # 22 Nov 2026 / 22. Nov. 2026 / 22 nov. 2026
    "abbrev_us",  # Nov 22, 2026                           (en)
    "ordinal",  # November 22nd, 2026                    (en)
    "article",  # the 22nd of November 2026 / le 22 novembre 2026 / el 22 de ...
)

# Numeric styles; the style alone fixes the order of day, month and year.
NUMERIC_STYLES: tuple[str, ...] = (
    "dmy_dot",  # 22.11.2026
    "dmy_dot_nopad",  # 5.6.2026
    "dmy_slash",  # 22/11/2026
    "dmy_dash",  # 22-11-2026
    "dmy_dot_short",  # 22.11.26   (two-digit year, see SHORT_YEAR_RANGE)
    "ymd_slash",  # 2026/11/22
    "mdy_slash",  # 11/22/2026 (en, US order)
)

STYLES: tuple[str, ...] = WORD_STYLES + NUMERIC_STYLES

_COMMON_NUMERIC = tuple(s for s in NUMERIC_STYLES if s != "mdy_slash")

STYLES_BY_LANGUAGE: dict[str, tuple[str, ...]] = {
    "en": WORD_STYLES + NUMERIC_STYLES,
    "de": ("long", "weekday_long", "abbrev", "article") + _COMMON_NUMERIC,
    "fr": ("long", "weekday_long", "abbrev", "article") + _COMMON_NUMERIC,
    "es": ("long", "weekday_long", "abbrev", "article") + _COMMON_NUMERIC,
    "it": ("long", "weekday_long", "abbrev", "article") + _COMMON_NUMERIC,
    "nl": ("long", "weekday_long", "abbrev") + _COMMON_NUMERIC,
    "pt": ("long", "weekday_long", "abbrev", "article") + _COMMON_NUMERIC,
}

# Ways of capitalising the word styles (numeric styles have no letters that
# matter).  "natural" is each language's usual spelling; "names" capitalises
# month and weekday names (English habit carried into other languages);
# "sentence" capitalises the first character, as at the start of a sentence.
CASINGS: tuple[str, ...] = ("natural", "lower", "upper", "sentence", "names")
_CASING_WEIGHTS = (0.70, 0.10, 0.06, 0.07, 0.07)
_NUMERIC_PROBABILITY = 0.25  # share of numeric styles in random_pair


# --- Formatting -----------------------------------------------------------


def _english_ordinal(day: int) -> str:
    if day in (11, 12, 13):
        return f"{day}th"
    suffix = {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{day}{suffix}"


def _day(day: int, language: str) -> str:
    """Day of the month in a written-out date (French and Italian say '1st')."""
    if day == 1 and language == "fr":
        return "1er"
    if day == 1 and language == "it":
        return "1º"
    return str(day)


def _day_month_year(day: str, month: str, year: int, language: str, *, particles: bool = True) -> str:
    """'22 November 2026' in the word order of ``language``.

    Spanish and Portuguese join the parts with "de" ("22 de noviembre de
    2026") unless ``particles`` is false, as with abbreviated months.
    """
    if language == "de":
        return f"{day}. {month} {year}"
    if language in ("es", "pt") and particles:
        return f"{day} de {month} de {year}"
    return f"{day} {month} {year}"


def _format_numeric(d: datetime.date, style: str) -> str:
    y = f"{d.year:04d}"
    if style == "dmy_dot":
        return f"{d.day:02d}.{d.month:02d}.{y}"
    if style == "dmy_dot_nopad":
        return f"{d.day}.{d.month}.{y}"
    if style == "dmy_slash":
        return f"{d.day:02d}/{d.month:02d}/{y}"
    if style == "dmy_dash":
        return f"{d.day:02d}-{d.month:02d}-{y}"
    if style == "dmy_dot_short":
        return f"{d.day:02d}.{d.month:02d}.{d.year % 100:02d}"
    if style == "ymd_slash":
        return f"{y}/{d.month:02d}/{d.day:02d}"
    if style == "mdy_slash":
        return f"{d.month:02d}/{d.day:02d}/{y}"
    raise ValueError(f"unknown numeric style {style!r}")


def _format_words(d: datetime.date, style: str, language: str, names_upper: bool) -> str:
    def cap(word: str) -> str:
        return word[:1].upper() + word[1:] if names_upper else word

    month = cap(MONTHS[language][d.month - 1])
    month_abbrev = cap(MONTHS_ABBREV[language][d.month - 1])
    weekday = cap(WEEKDAYS[language][d.weekday()])
    day = _day(d.day, language)
    long = _day_month_year(day, month, d.year, language)

    if style == "long":
        return long
    if style == "abbrev":
        return _day_month_year(day, month_abbrev, d.year, language, particles=False)
    if style == "weekday_long":
        # A comma after the weekday is usual in en/de/es/pt, not in fr/it/nl.
        sep = " " if language in ("fr", "it", "nl") else ", "
        return f"{weekday}{sep}{long}"
    if style == "article":
        if language == "en":
            return f"the {_english_ordinal(d.day)} of {month} {d.year}"
        if language == "it":
            # Italian elides the article before 8 (otto) and 11 (undici).
            article = "l'" if d.day in (8, 11) else "il "
            return f"{article}{long}"
        article = {"de": "den", "fr": "le", "es": "el", "pt": "dia"}[language]
        return f"{article} {long}"
    # The remaining styles are English only.
    if style == "long_us":
        return f"{month} {d.day}, {d.year}"
    if style == "weekday_us":
        return f"{weekday}, {month} {d.day}, {d.year}"
    if style == "abbrev_us":
        return f"{month_abbrev} {d.day}, {d.year}"
    if style == "ordinal":
        return f"{month} {_english_ordinal(d.day)}, {d.year}"
    raise ValueError(f"unknown style {style!r}")


def format_date(d: datetime.date, style: str, language: str, *, casing: str = "natural") -> str:
    """Write ``d`` the way a person might, in ``style`` and ``language``.

    ``style`` must be one of ``STYLES_BY_LANGUAGE[language]`` and ``casing``
    one of ``CASINGS`` (it has no effect on numeric styles).  Raises
    ``ValueError`` for unknown or unsupported combinations.
    """
    if language not in STYLES_BY_LANGUAGE:
        raise ValueError(f"unknown language {language!r}; expected one of {LANGUAGES}")
    if style not in STYLES_BY_LANGUAGE[language]:
        raise ValueError(f"style {style!r} is not available for language {language!r}")
    if casing not in CASINGS:
        raise ValueError(f"unknown casing {casing!r}; expected one of {CASINGS}")

    if style in NUMERIC_STYLES:
        return _format_numeric(d, style)
    text = _format_words(d, style, language, names_upper=(casing == "names"))
    if casing == "lower":
        return text.lower()
    if casing == "upper":
        return text.upper()
    if casing == "sentence":
        return text[:1].upper() + text[1:]
    return text


def is_unambiguous(d: datetime.date, style: str) -> bool:
    """Whether ``format_date(d, style, ...)`` can only be read as ``d``.

    Word styles and most numeric styles always are; see the module docstring
    for the two exceptions.
    """
    if style == "mdy_slash":
        return d.day > 12 or d.day == d.month
    if style == "dmy_dot_short":
        return SHORT_YEAR_RANGE[0] <= d.year <= SHORT_YEAR_RANGE[1]
    return True


# --- Random pairs and corpora ---------------------------------------------


def _random_date(rng: random.Random) -> datetime.date:
    return datetime.date.fromordinal(rng.randint(MIN_DATE.toordinal(), MAX_DATE.toordinal()))


def random_pair(rng: random.Random) -> tuple[str, str]:
    """A random ``(text, iso)`` pair drawn with ``rng``.

    The date is uniform between ``MIN_DATE`` and ``MAX_DATE``, the language
    uniform over ``LANGUAGES``; a numeric style is chosen a quarter of the
    time, otherwise a word style with a random casing.  Dates that a style
    would make ambiguous are redrawn.
    """
    language = rng.choice(LANGUAGES)
    styles = STYLES_BY_LANGUAGE[language]
    numeric = rng.random() < _NUMERIC_PROBABILITY
    style = rng.choice([s for s in styles if (s in NUMERIC_STYLES) == numeric])
    casing = "natural" if numeric else rng.choices(CASINGS, weights=_CASING_WEIGHTS)[0]
    d = _random_date(rng)
    while not is_unambiguous(d, style):
        d = _random_date(rng)
    return format_date(d, style, language, casing=casing), d.isoformat()


def generate_pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` pairs from ``random.Random(seed)``; the same seed gives the same list."""
    rng = random.Random(seed)
    return [random_pair(rng) for _ in range(n)]


def _fresh_pairs(n: int, rng: random.Random, exclude: set[str]) -> list[tuple[str, str]]:
    """``n`` pairs whose sources are not in ``exclude`` nor repeated (``exclude`` is updated)."""
    pairs: list[tuple[str, str]] = []
    attempts = 0
    while len(pairs) < n:
        attempts += 1
        if attempts > 100 * n + 10_000:
            raise ValueError(f"could not draw {n} new date strings; the training set is too large")
        source, target = random_pair(rng)
        if source not in exclude:
            exclude.add(source)
            pairs.append((source, target))
    return pairs


def _write_tsv(path: pathlib.Path, pairs: list[tuple[str, str]]) -> None:
    with path.open("w", encoding="utf-8", newline="\n") as f:
        for source, target in pairs:
            f.write(f"{source}\t{target}\n")


def write_corpus(
    folder: str | pathlib.Path,
    n_train: int = 20000,
    n_dev: int = 500,
    n_test: int = 500,
    seed: int = 0,
) -> dict[str, pathlib.Path]:
    """Write ``train.tsv``, ``dev.tsv`` and ``test.tsv`` (``source<TAB>target``) to ``folder``.

    The training set is ``generate_pairs(n_train, seed)``.  Dev and test use
    their own random streams and skip any source string already in train (or,
    for test, in dev) and any repeat, so they have exactly ``n_dev`` and
    ``n_test`` lines and share no source with train or with each other.
    Returns ``{"train": path, "dev": path, "test": path}``.
    """
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)

    train = generate_pairs(n_train, seed)
    seen = {source for source, _ in train}
    # String seeds give streams distinct from any integer seed of train (they hold the module's
    # first name, attnmt.dates: changing them would change the corpus).
    dev = _fresh_pairs(n_dev, random.Random(f"attnmt.dates:{seed}:dev"), seen)
    test = _fresh_pairs(n_test, random.Random(f"attnmt.dates:{seed}:test"), seen)

    paths = {}
    for name, pairs in (("train", train), ("dev", dev), ("test", test)):
        paths[name] = folder / f"{name}.tsv"
        _write_tsv(paths[name], pairs)
    return paths


# --- Fixed examples for the quick start ------------------------------------

_EXAMPLE_SPECS = (
    (datetime.date(2026, 11, 22), "weekday_long", "de"),  # Sonntag, 22. November 2026
    (datetime.date(1989, 7, 14), "article", "fr"),  # le 14 juillet 1989
    (datetime.date(1969, 7, 20), "long_us", "en"),  # July 20, 1969
    (datetime.date(2004, 2, 29), "long", "es"),  # 29 de febrero de 2004
    (datetime.date(1999, 12, 31), "abbrev", "it"),  # 31 dic 1999
    (datetime.date(2031, 3, 5), "weekday_long", "nl"),  # woensdag 5 maart 2031
    (datetime.date(1974, 4, 25), "dmy_dot", "pt"),  # 25.04.1974
)

EXAMPLES: list[str] = [format_date(d, style, lang) for d, style, lang in _EXAMPLE_SPECS]
