"""The layout of docs/architecture.md, checked on the source: the import graph has no cycle and
no arrow from a lower layer to a higher one, tasks do not import one another, nothing outside the
task registry and config validation chooses by a task's name. Every import counts: at the top of
a module, inside a function or under TYPE_CHECKING. (No line counts: a module is cut where its
meaning changes, and ruff format keeps the layout.)"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import attnmt
from attnmt.core.task import TASKS

SOURCE = Path(attnmt.__file__).parent

# The layers, lowest first (docs/architecture.md): a module may import its own layer's modules or
# a lower layer's. A module's layer is that of the longest entry its name starts with.
LAYERS = {
    "attnmt.core": 0,  # config, checkpoints, files, devices, distributed, the task registry
    "attnmt.data": 1,  # corpora, subwords, batches, held-out splits
    "attnmt.seq2seq": 2,  # what translation and speech share: models, decoding, inference
    "attnmt.training": 2,  # the training loop every task uses
    "attnmt.viz": 2,  # the figures every task draws with
    "attnmt.translation": 3,
    "attnmt.speech": 3,
    "attnmt.pairs": 3,
    "attnmt": 4,  # the interfaces: attnmt.load, the CLI, the server, compare, info
    "attnmt.viz!": 4,  # attnmt.viz itself (its __init__): the public names of every task's figures
}
TASK_PACKAGES = {f"attnmt.{name}" for name in TASKS}
# Where a task's name may be compared: the registry, and config validation (which sections a task has)
NAMES_ALLOWED_IN = {"attnmt.core.task", "attnmt.core.config", "attnmt.core.task_sections"}


def modules() -> dict[str, Path]:
    found = {}
    for path in SOURCE.rglob("*.py"):
        parts = path.relative_to(SOURCE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The attnmt modules ``name`` imports (``from a.b import c`` is a.b.c if that is a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "attnmt":
            for alias in node.names:
                found.add(f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in known else node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == "attnmt"}
    return {target for target in found if target in known and target != name}


def layer(name: str) -> int:
    if f"{name}!" in LAYERS:
        return LAYERS[f"{name}!"]
    prefix = max((p for p in LAYERS if name == p or name.startswith(p + ".")), key=len)
    return LAYERS[prefix]


def package(name: str) -> str:
    return ".".join(name.split(".")[:2])


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports(name, path, set(found)) for name, path in found.items()}


def test_the_import_graph_has_no_cycle(graph):
    state: dict[str, str] = {}
    cycles = []

    def visit(node, path):
        state[node] = "open"
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                cycles.append(path[path.index(target) :] + [target])
            elif target not in state:
                visit(target, path + [target])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_module_imports_a_higher_layer_or_another_task(graph):
    wrong = []
    for source, targets in graph.items():
        for target in targets:
            if layer(target) > layer(source):
                wrong.append(f"{source} (layer {layer(source)}) imports {target} (layer {layer(target)})")
            elif package(source) in TASK_PACKAGES and package(target) in TASK_PACKAGES - {package(source)}:
                wrong.append(f"{source} imports another task's {target}")
    assert not wrong, "\n".join(sorted(wrong))


def test_the_registry_names_a_package_per_task_with_its_task():
    for name, module in TASKS.items():
        assert module == f"attnmt.{name}.task" and (SOURCE / name / "task.py").is_file()
        task = __import__(module, fromlist=["TASK"]).TASK
        assert task.name == name
        for member in (
            "what",
            "inputs",
            "prepare",
            "training_loop",
            "test_scores",
            "load",
            "architecture",
            "figure_writers",
        ):
            assert hasattr(task, member), f"{module}.TASK has no {member}"


def switches_on_a_task_name(tree: ast.AST) -> list[int]:
    """Lines comparing something with a task's name by ==, in or match (a choice of what to do),
    or by != other than to refuse (an ``if`` whose body raises: a guard against a wrong folder)."""
    guards = {
        id(node.test)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and node.body and isinstance(node.body[0], ast.Raise)
    }
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            constants = {c.value for c in [node.left, *node.comparators] if isinstance(c, ast.Constant)}
            constants |= {
                e.value
                for c in node.comparators
                if isinstance(c, (ast.Tuple, ast.Set, ast.List))
                for e in c.elts
                if isinstance(e, ast.Constant)
            }
            if not constants & set(TASKS):
                continue
            mentions_task = any(
                isinstance(n, ast.Attribute) and n.attr == "task" or isinstance(n, ast.Name) and n.id == "task"
                for n in ast.walk(node)
            )
            refused = all(isinstance(op, ast.NotEq) for op in node.ops) and id(node) in guards
            if mentions_task and not refused:
                lines.append(node.lineno)
        elif isinstance(node, ast.Match) and any(
            isinstance(n, ast.Attribute) and n.attr == "task" for n in ast.walk(node.subject)
        ):
            lines.append(node.lineno)
    return sorted(lines)


def test_nothing_outside_the_registry_and_the_config_switches_on_a_task_name():
    found = [
        f"{name}:{line}"
        for name, path in modules().items()
        if name not in NAMES_ALLOWED_IN
        for line in switches_on_a_task_name(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert not found, "choices by a task's name (ask the task, attnmt.core.task, instead):\n" + "\n".join(found)


def test_the_switch_finder_finds_switches_and_lets_guards_be():
    code = """
if config.task == "speech":
    pass
model = x if task in ("pairs", "speech") else y
if self.config.task != "translation":
    raise AttnmtError("not a translation model")
if model.config.task != "pairs":
    do_something()
"""
    assert switches_on_a_task_name(ast.parse(code)) == [2, 4, 7]


@pytest.mark.slow
@pytest.mark.parametrize("task", ["translation", "pairs"])
def test_a_training_run_loads_only_its_own_task(tmp_path, task):
    """Training and scoring one task's model imports no module of another task."""
    import subprocess
    import sys

    from conftest import pair_config, random_strings, reverse, toy_config

    if task == "pairs":
        raw = pair_config(tmp_path, training={"max_steps": 2})
        raw["data"]["test"] = {"test": {"tsv": raw["data"]["train"]["tsv"]}}
    else:
        pairs = [(s, reverse(s)) for s in random_strings(60, 3, 8, seed=1)]
        raw = toy_config(tmp_path, pairs, training={"max_steps": 2}, data={"test": {"test": {"split": 10}}})
        raw = raw if isinstance(raw, dict) else raw.model_dump(mode="json")
    script = (
        f"import sys, attnmt.core.config as c, attnmt.training as t\n"
        f"t.train(c.config_from_dict({raw!r}, c.Path('.')), log=lambda m: None, progress=False)\n"
        "print(' '.join(m for m in sys.modules if m.startswith('attnmt.')))"
    )
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    others = [m for m in loaded if package(m) in TASK_PACKAGES - {f"attnmt.{task}"}]
    assert f"attnmt.{task}.task" in loaded and not others, others


def test_what_other_modules_import_is_public():
    """A name another module imports is part of its module's interface: no leading underscore.
    (cli/options.py's argument types keep theirs: argparse prints a type's name in its errors.)"""
    found = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("attnmt"):
                private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
                if private and node.module != "attnmt.cli.options":
                    found.append(f"{name} imports {', '.join(private)} from {node.module}")
    assert not found, "\n".join(found)


@pytest.mark.slow  # (starts a process or a server and waits on it)
def test_translating_from_the_command_line_loads_no_matplotlib_nor_dynamo(tmp_path):
    """`attnmt translate` imports only what translating needs: figures are drawn on request only
    (matplotlib's import: 0.15 s; attnmt.viz reads its names lazily), the model's shapes are
    checked on the meta device without a random initialisation there (a meta normal_ imports
    torch._dynamo: 1-2 s of every model load), and decoding calls nothing that imports sympy
    (torch.broadcast_shapes does: 0.5 s)."""
    import subprocess
    import sys

    import torch

    from conftest import reverse, toy_config
    from attnmt.training import train

    pairs = [(s, reverse(s)) for s in ["a b c", "d e f", "b c a"] * 10]
    config = toy_config(tmp_path, pairs, training={"max_steps": 1, "threads": 1})
    torch.manual_seed(0)
    train(config, log=lambda m: None, progress=False)
    (tmp_path / "in.txt").write_text("a b c\n")
    script = (
        "import sys\nfrom attnmt.cli import main\n"
        f"main(['translate', {str(config.experiment_dir)!r}, '-i', {str(tmp_path / 'in.txt')!r}, "
        f"'-o', {str(tmp_path / 'out.txt')!r}])\n"
        "print('matplotlib' in sys.modules, 'torch._dynamo' in sys.modules, 'sympy' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert (tmp_path / "out.txt").read_text() and done.stdout.split()[-3:] == ["False"] * 3, done.stdout
