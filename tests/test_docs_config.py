"""docs/config.md against the code: every section of the config (the pydantic models of
attnmt.core.config and attnmt.core.task_sections, and those their fields hold) has its table in
docs/config.md, every field of a section a row, no row a field the code lacks, every default the
code's and every value a field can take named in its row (a field that a section inherits as it is
from another section may be in that one's table only). The models are read when the test runs,
so a field added, removed or given another default fails here until the page says so.

The page's form: a section is a heading that ends with the model's name in parentheses,
``## `model` (ModelConfig)``; its table has the header ``| field | default | what it does |`` and a
row per field, ``| `name` | `DEFAULT` | ... |``, the default written as YAML (read as a config is
read, and compared with the code's exactly: same types, same values) or ``required``. A default
that is a section is written as the fields it sets away from that section's own defaults (``{}``:
none)."""

from __future__ import annotations

import inspect
import re
import typing
from pathlib import Path

import pytest
from pydantic import Field
from pydantic_core import to_jsonable_python

from attnmt.core import config, task_sections
from attnmt.core.sections import Section

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "config.md"

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$")
SECTION = re.compile(r"\(`?([A-Z][A-Za-z0-9_]*)`?\)$")  # the model's name at the end of a heading
CELL = re.compile(r"(?<!\\)\|")  # a table's cell border (not an escaped \|)
NAME = re.compile(r"^`([A-Za-z_][A-Za-z0-9_]*)`$")
REQUIRED = "required"


def types_in(annotation):
    """The annotation and every type inside it (unions, Optional, Annotated, list[...], dict[...])."""
    yield annotation
    for argument in typing.get_args(annotation):
        yield from types_in(argument)


def sections() -> dict[str, type[Section]]:
    """Every section model: those of attnmt.core.config and attnmt.core.task_sections (imported there
    or defined), and every model one of their fields holds, by class name."""
    found: dict[str, type[Section]] = {}

    def visit(model: type[Section]):
        if model.__name__ in found:
            return
        found[model.__name__] = model
        for field in model.model_fields.values():
            for inner in types_in(field.annotation):
                if isinstance(inner, type) and issubclass(inner, Section):
                    visit(inner)

    for module in (config, task_sections):
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Section) and value is not Section:
                visit(value)
    return found


def code_default(field):
    """A field's default as the page writes it: plain YAML values (a tuple a list, a path a string),
    a section as the fields it sets away from its own defaults; REQUIRED without a default."""
    if field.is_required():
        return REQUIRED
    value = field.get_default(call_default_factory=True)
    if isinstance(value, Section):
        return value.model_dump(mode="json", exclude_defaults=True)
    return to_jsonable_python(value)


def choices(field) -> list:
    """The values of the Literal types in a field's annotation (its choices), in order."""
    values = []
    for inner in types_in(field.annotation):
        if typing.get_origin(inner) is typing.Literal:
            values.extend(typing.get_args(inner))
    return values


def same(a, b) -> bool:
    """a and b equal, and of the same types throughout (1 is not 1.0, nor True)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[key], b[key]) for key in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def documented(text: str) -> dict[str, dict[str, tuple[int, list[str]]]]:
    """The page's sections: {model name: {field: (line number, the row's cells)}}. A section runs
    from its heading to the next heading of its level or above; its rows are those of tables whose
    first column is "field". A field listed twice in a section is kept under the name "field (twice)"."""
    result: dict[str, dict[str, tuple[int, list[str]]]] = {}
    current, level, fenced, table_of_fields, previous_was_row = None, 0, False, False, False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        heading = HEADING.match(line)
        if heading:
            depth = len(heading.group(1))
            named = SECTION.search(heading.group(2))
            if named:
                current, level = named.group(1), depth
                result.setdefault(current, {})
            elif current is not None and depth <= level:
                current = None
            previous_was_row = False
            continue
        is_row = line.lstrip().startswith("|")
        if not is_row:
            previous_was_row = False
            continue
        cells = [cell.strip() for cell in CELL.split(line.strip())[1:-1]]
        if not previous_was_row:  # a table's header
            table_of_fields = bool(cells) and cells[0].lower() == "field"
        previous_was_row = True
        name = NAME.match(cells[0]) if cells else None
        if current is None or not table_of_fields or name is None:
            continue
        fields = result[current]
        key = name.group(1) if name.group(1) not in fields else f"{name.group(1)} (twice)"
        fields[key] = (number, cells)
    return result


def own_fields(model: type[Section], models: dict[str, type[Section]]) -> dict:
    """The fields a section's table must have: all but those it inherits as they are from another
    section, whose table has them (RNNConfig's from ModelConfig's; its table may list them too)."""
    inherited = {
        name
        for base in model.__mro__[1:]
        if isinstance(base, type) and issubclass(base, Section) and base.__name__ in models
        for name in base.model_fields
    }
    declared = inspect.get_annotations(model)
    return {name: field for name, field in model.model_fields.items() if name not in inherited or name in declared}


def problems(text: str, models: dict[str, type[Section]]) -> list[str]:
    """What the page says that the code does not, and what the code has that the page lacks."""
    found = []
    page = documented(text)
    for name in sorted(set(models) - set(page)):
        found.append(f"section {name} is not in docs/config.md (a heading ending in '({name})')")
    for name in sorted(set(page) - set(models)):
        found.append(f"docs/config.md documents a section {name} that the code does not have")
    for name in sorted(set(models) & set(page)):
        fields, rows = models[name].model_fields, page[name]
        for field in own_fields(models[name], models):
            if field not in rows:
                found.append(f"{name}.{field} is not in docs/config.md")
        for field, (number, cells) in rows.items():
            where = f"docs/config.md:{number}: {name}.{field}"
            if field not in fields:
                found.append(f"{where} is not a field of the code's {name}")
                continue
            default = cells[1] if len(cells) > 1 else ""
            wanted = code_default(fields[field])
            if wanted == REQUIRED or default == REQUIRED:
                if default != wanted:
                    found.append(f"{where}: the default is written {default!r}; the code's is {wanted!r}")
            elif not (default.startswith("`") and default.endswith("`") and len(default) > 2):
                found.append(f"{where}: the default {default!r} is not one `value` (the code's is {wanted!r})")
            else:
                try:
                    written = config.parse_yaml(default[1:-1], "docs/config.md")
                except Exception as e:  # (any YAML error: the page's value cannot be read)
                    found.append(f"{where}: the default {default} is not YAML: {e}")
                else:
                    if not same(written, wanted):
                        written = f"{default} ({written!r})"
                        found.append(f"{where}: the default is written {written}; the code's is {wanted!r}")
            row = " | ".join(cells[1:])
            for choice in choices(fields[field]):
                if f"`{choice}`" not in row:
                    found.append(f"{where}: its row does not name the value `{choice}`")
    return found


def test_docs_config_matches_the_code():
    assert problems(DOC.read_text(encoding="utf-8"), sections()) == []


def test_every_section_is_found():
    """The models are found by walking the config's modules (not a list kept here): the sections of
    every task are among them."""
    names = set(sections())
    assert {"Config", "DataConfig", "CorpusFiles", "SubwordConfig", "ModelConfig", "TrainingConfig"} <= names
    assert {"DecodingConfig", "Sampling", "SpeechConfig", "GuidedAlignment"} <= names
    assert {"RNNConfig", "TransformerConfig"} <= names
    assert {"PairDataConfig", "PairFiles", "PairModelConfig", "EmbeddingsConfig"} <= names


class Example(Section):
    size: int = Field(8, gt=0)
    rate: float = 0.5
    kind: typing.Literal["a", "b"] = "a"
    path: config.ConfigPath
    pair: typing.Annotated[tuple[float, float], config.AsTuple] = (0.9, 0.98)
    inner: config.SubwordConfig = config.SubwordConfig(vocab_size=100)


PAGE = """
## `example` (Example)

| field | default | what it does |
|---|---|---|
| `size` | `8` | a size |
| `rate` | `0.5` | a rate |
| `kind` | `a` | `a` or `b` |
| `path` | required | a path |
| `pair` | `[0.9, 0.98]` | two numbers |
| `inner` | `{vocab_size: 100}` | a section |

```yaml
| `not` | `a row` | (in a code block) |
```
"""


def test_a_page_that_matches():
    assert problems(PAGE, {"Example": Example}) == []


def test_each_kind_of_drift_is_found():
    drifted = (
        PAGE.replace("| `size` | `8` |", "| `size` | `8.0` |")  # another type
        .replace("| `rate` | `0.5` | a rate |\n", "")  # a field left out
        .replace("`a` or `b`", "`a` only")  # a value not named
        .replace("| `path` | required |", "| `path` | `x` |")  # a required field with a default
        .replace("| `pair` | `[0.9, 0.98]` |", "| `pair` | `[0.9, 0.999]` |")  # another value
        .replace("| `inner` |", "| `gone` | `1` | a field the code lacks |\n| `inner` |")
    )
    assert problems(drifted + "\n## The other (Other)\n", {"Example": Example, "Missing": Example}) == [
        "section Missing is not in docs/config.md (a heading ending in '(Missing)')",
        "docs/config.md documents a section Other that the code does not have",
        "Example.rate is not in docs/config.md",
        "docs/config.md:6: Example.size: the default is written `8.0` (8.0); the code's is 8",
        "docs/config.md:7: Example.kind: its row does not name the value `b`",
        "docs/config.md:8: Example.path: the default is written '`x`'; the code's is 'required'",
        "docs/config.md:9: Example.pair: the default is written `[0.9, 0.999]` ([0.9, 0.999]); "
        "the code's is [0.9, 0.98]",
        "docs/config.md:10: Example.gone is not a field of the code's Example",
    ]


@pytest.mark.parametrize("value, other", [(1, 1.0), (True, 1), (0, False), ([1], (1,)), ({"a": 1}, {"a": 1.0})])
def test_same_compares_types(value, other):
    assert not same(value, other)
    assert same(value, value)
