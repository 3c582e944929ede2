"""Hostile model folders: loading one never runs code from it, reads no file outside it, and
refuses pickles, damaged weights, unknown classes and YAML object tags with a clear error."""

import ast
import os
import pickle
import re
import shutil
import warnings
from pathlib import Path

import pytest
import torch
import yaml

from attnmt.api import load
from attnmt.cli import main
from attnmt.core.config import load_config
from attnmt.core.errors import AttnmtError
from attnmt.core.folders import inside_folder
from attnmt.training import Trainer, train
from conftest import REPO, random_strings, reverse, toy_config

PAIRS = [(s, reverse(s)) for s in random_strings(100, 3, 6, seed=3)]


class RunsCode:
    """Unpickling this runs a shell command that creates ``marker``."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch '{self.marker}'",)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile")
    config = toy_config(
        folder,
        PAIRS,
        model={"embedding_size": 8, "encoder_hidden": 8, "decoder_hidden": 16, "attention_size": 8},
        training={"max_steps": 2, "threads": 1},
    )
    train(config, log=lambda m: None, progress=False)
    return config.experiment_dir


@pytest.fixture
def model_folder(trained, tmp_path):
    return Path(shutil.copytree(trained, tmp_path / "model"))


@pytest.fixture
def marker(tmp_path):
    return tmp_path / "code-ran"


def pickles(marker: Path, tmp_path: Path) -> dict[str, bytes]:
    """A plain pickle (protocol 0 is ASCII text, 5 is binary) and a torch.save file, each of which
    runs code when loaded the unsafe way."""
    torch_file = tmp_path / "evil.pt"
    torch.save({"weights": RunsCode(marker)}, torch_file)
    return {
        "pickle-0": pickle.dumps(RunsCode(marker), protocol=0),
        "pickle-5": pickle.dumps(RunsCode(marker), protocol=5),
        "torch.save": torch_file.read_bytes(),
    }


def test_the_payloads_do_run_code_when_unpickled(tmp_path):
    # Proof that the files below are live: the unsafe loaders do create the marker.
    marker = tmp_path / "unpickled"
    payloads = pickles(marker, tmp_path)
    pickle.loads(payloads["pickle-0"])
    assert marker.exists()
    marker.unlink()
    torch.load(tmp_path / "evil.pt", weights_only=False)
    assert marker.exists()


@pytest.mark.parametrize("place", ["best.safetensors", "spm/joint.model", "config.yaml"])
@pytest.mark.parametrize("kind", ["pickle-0", "pickle-5", "torch.save"])
def test_a_pickle_where_a_model_file_belongs_is_refused_without_running(model_folder, marker, tmp_path, place, kind):
    (model_folder / place).write_bytes(pickles(marker, tmp_path)[kind])
    with pytest.raises(AttnmtError, match=re.escape(str(model_folder / place))):
        load(model_folder)
    assert not marker.exists()


@pytest.mark.parametrize("kind", ["pickle-0", "pickle-5", "torch.save"])
def test_a_pickle_as_last_checkpoint_is_refused_when_translating_and_resuming(model_folder, marker, tmp_path, kind):
    (model_folder / "last.safetensors").write_bytes(pickles(marker, tmp_path)[kind])
    with pytest.raises(AttnmtError, match=re.escape(str(model_folder / "last.safetensors"))):
        load(model_folder, checkpoint="last")
    config = load_config(model_folder / "config.yaml")
    config.experiment_dir = model_folder
    with pytest.raises(AttnmtError, match=re.escape(str(model_folder / "last.safetensors"))):
        Trainer(config, log=lambda m: None, progress=False).train(resume=True)
    assert not marker.exists()


@pytest.mark.parametrize(
    "tag",
    [
        "!!python/object/apply:os.system",
        "!!python/object/new:os.system",
        "!!python/name:os.system",
        "!!python/module:os",
    ],
)
def test_yaml_python_tags_in_the_config_are_refused(model_folder, marker, tag):
    config = model_folder / "config.yaml"
    config.write_text(config.read_text() + f"evil: {tag} [\"touch '{marker}'\"]\n")
    with pytest.raises(AttnmtError, match=re.escape(f"{config}: not valid YAML") + ".*python/"):
        load(model_folder)
    assert not marker.exists()


@pytest.mark.parametrize(
    "field, value",
    [
        ("attention", "os.system"),
        ("attention", "torch.nn.Module"),
        ("rnn_type", "subprocess.Popen"),
        ("type", "evil.Model"),
    ],
)
def test_a_config_naming_an_unknown_class_is_refused(model_folder, field, value):
    config = model_folder / "config.yaml"
    raw = yaml.safe_load(config.read_text())
    raw["model"][field] = value
    config.write_text(yaml.safe_dump(raw))
    named = "attention.type" if field == "attention" else field  # (the attention's type: a section's tag)
    message = f"{config}: invalid configuration\n  model.{named}: Input should be"
    with pytest.raises(AttnmtError, match=re.escape(message)):
        load(model_folder)


@pytest.mark.parametrize("place", ["best.safetensors", "spm/joint.model", "config.yaml"])
def test_a_model_file_linking_outside_the_folder_is_refused(model_folder, tmp_path, place):
    # A valid file, but elsewhere: a folder from someone else must not read files of this machine.
    outside = tmp_path / "elsewhere" / Path(place).name
    outside.parent.mkdir()
    (model_folder / place).rename(outside)
    (model_folder / place).symlink_to(outside)
    with pytest.raises(AttnmtError, match=re.escape(f"{model_folder / place} leads outside the model folder")):
        load(model_folder)


def test_a_checkpoint_name_cannot_leave_the_folder(model_folder):
    with pytest.raises(ValueError, match="one of best, last, averaged"):
        load(model_folder, checkpoint="../../elsewhere/best")


def test_paths_in_a_model_config_are_not_read_when_translating(model_folder):
    # Training data and experiment_dir in a model's config point elsewhere; loading ignores them.
    config = model_folder / "config.yaml"
    raw = yaml.safe_load(config.read_text())
    raw["experiment_dir"] = "/etc"
    raw["data"]["train"] = {"tsv": "/etc/shadow"}
    raw["data"]["dev"] = {"src": "../../../../../etc/passwd", "tgt": "/nonexistent/dev.tgt"}
    config.write_text(yaml.safe_dump(raw))
    model = load(model_folder)
    assert model.config.experiment_dir == model_folder
    assert len(model.translate(["abc", ""])) == 2


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else ""


UNSAFE_CALLS = {
    "pickle.load",
    "pickle.loads",
    "pickle.Unpickler",
    "yaml.load",
    "yaml.unsafe_load",
    "yaml.full_load",
    "yaml.load_all",
    "marshal.loads",
    "shelve.open",
    "eval",
    "exec",
}


def unsafe_loads(source: str) -> list[str]:
    """Calls that can run code from the data they read: pickle, unsafe YAML, eval/exec, and
    torch.load / numpy.load unless told to refuse pickled objects."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name, keywords = _dotted(node.func), {k.arg: k.value for k in node.keywords}
        flag = keywords.get("weights_only")
        if name in UNSAFE_CALLS:
            found.append(name)
        elif name == "torch.load" and not (isinstance(flag, ast.Constant) and flag.value is True):
            found.append(f"{name} without weights_only=True")
        elif name in ("np.load", "numpy.load") and "allow_pickle" in keywords:
            pickles = keywords["allow_pickle"]
            if not (isinstance(pickles, ast.Constant) and pickles.value is False):  # (False: numpy's default)
                found.append(f"{name} with allow_pickle")
    return found


def test_the_source_never_loads_data_in_a_way_that_can_run_code():
    assert unsafe_loads(
        "torch.load(f)\ntorch.load(f, weights_only=False)\nyaml.load(s)\nnp.load(f, allow_pickle=True)"
        "\ntorch.load(f, weights_only=True)\nnp.load(f, allow_pickle=False)\nnp.load(f, allow_pickle=flag)"
    ) == [
        "torch.load without weights_only=True",
        "torch.load without weights_only=True",
        "yaml.load",
        "np.load with allow_pickle",
        "np.load with allow_pickle",
    ]
    sources = sorted((REPO / "src" / "attnmt").rglob("*.py")) + sorted((REPO / "benchmarks").rglob("*.py"))
    assert sources
    problems = {str(path.relative_to(REPO)): unsafe_loads(path.read_text(encoding="utf-8")) for path in sources}
    assert {path: calls for path, calls in problems.items() if calls} == {}


def test_non_finite_weights_are_refused_on_load_and_resume(model_folder):
    """A diverged run or a tampered file (checksum recomputed): NaN or infinity in any weight."""
    from attnmt.core.checkpoint import save_model, save_training_state

    def trainer():
        config = load_config(model_folder / "config.yaml")
        config.experiment_dir = model_folder  # (the copy's config names the original folder)
        return Trainer(config, log=lambda m: None, progress=False)

    damaged = trainer()
    damaged.loop.resume()
    with torch.no_grad():
        damaged.model.generator.bias[3] = float("inf")
    save_training_state(
        model_folder / "last.safetensors", damaged.model, damaged.loop.optimizer, {"trainer": {}, "scheduler": {}}
    )
    with pytest.raises(AttnmtError, match="last.safetensors: weight 'generator.bias' holds values that are not finite"):
        trainer().loop.resume()
    with torch.no_grad():
        damaged.model.generator.bias[3] = float("nan")
    save_model(damaged.model, model_folder / "best.safetensors")
    with pytest.raises(AttnmtError, match="best.safetensors: weight 'generator.bias' holds values that are not finite"):
        load(model_folder)


@pytest.mark.parametrize(
    "field, value", [("embedding_size", 10_000_000), ("decoder_hidden", 1_000_000), ("attention_size", 9)]
)
def test_a_config_that_does_not_fit_the_weights_is_refused_before_allocating(model_folder, field, value):
    """Shapes are compared with the checkpoint's header on a model built on the meta device: a
    config asking for gigabytes of weights costs nothing and names the first weight that differs."""
    import resource

    config = yaml.safe_load((model_folder / "config.yaml").read_text())
    config["model"][field] = value
    (model_folder / "config.yaml").write_text(yaml.safe_dump(config))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(AttnmtError, match=r"config.yaml and the weights do not belong together") as error:
        load(model_folder)
    assert "best.safetensors: the config asks for weight" in str(error.value)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000  # KiB: nothing of that size


def test_oversized_config_and_beam_are_refused(model_folder):
    text = (model_folder / "config.yaml").read_text()
    (model_folder / "config.yaml").write_text(text + "#" * 2_000_000 + "\n")
    with pytest.raises(AttnmtError, match=r"config.yaml: 2,0\d\d,\d\d\d bytes is too large for a config"):
        load(model_folder)
    config = yaml.safe_load(text)
    config["decoding"]["beam"] = 100_000
    (model_folder / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(AttnmtError, match=r"decoding.beam: Input should be less than or equal to 100"):
        load(model_folder)


def test_loading_draws_no_random_weights_and_loads_every_one(model_folder):
    """The model built to receive a checkpoint's weights skips the random initialisation (0.08 s of
    every command): the global generator is untouched, and every weight is the checkpoint's."""
    from safetensors.torch import load_file

    torch.manual_seed(0)
    before = torch.get_rng_state()
    model = load(model_folder).model
    assert torch.equal(torch.get_rng_state(), before)
    stored = {name.removeprefix("model."): t for name, t in load_file(model_folder / "best.safetensors").items()}
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(tensor, stored[name], rtol=0, atol=0, msg=name)


SECRET = "private_key_of_this_machine"  # the text of the file outside the folder: no message may show it


def outside_file(tmp_path: Path, name: str) -> Path:
    """A file outside the model folder, holding SECRET (as /etc/passwd or ~/.ssh/... would)."""
    path = tmp_path / "elsewhere" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(f"{SECRET}: 1\n")
    return path


def test_an_aligner_folder_or_file_linking_outside_is_refused_before_it_is_read(model_folder, tmp_path):
    """MODEL/aligner as a link to an outside folder, or aligner.yaml as a link to an outside file: the
    same check as the config's, before anything is opened (the file's keys used to appear in the warning)."""
    outside = outside_file(tmp_path, "aligner.yaml").parent
    (outside / "aligner.safetensors").write_bytes(b"not read")
    (model_folder / "aligner").symlink_to(outside)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (no warning either: an error)
        with pytest.raises(AttnmtError, match="aligner.yaml leads outside the model folder") as error:
            load(model_folder)
    assert SECRET not in str(error.value)
    (model_folder / "aligner").unlink()
    (model_folder / "aligner").mkdir()
    (model_folder / "aligner" / "aligner.yaml").symlink_to(outside / "aligner.yaml")
    (model_folder / "aligner" / "aligner.safetensors").write_bytes(b"not read")
    with pytest.raises(AttnmtError, match="aligner.yaml leads outside the model folder") as error:
        load(model_folder)
    assert SECRET not in str(error.value)


def test_the_folders_shortlist_linking_outside_is_refused(model_folder, tmp_path, capsys):
    (model_folder / "shortlist.json").symlink_to(outside_file(tmp_path, "shortlist.json"))
    with pytest.raises(AttnmtError, match="shortlist.json leads outside the model folder"):
        load(model_folder).translate(["abc"], shortlist=True)
    source = tmp_path / "in.txt"
    source.write_text("abc\n")
    assert main(["translate", str(model_folder), "-i", str(source), "--shortlist"]) == 2
    err = capsys.readouterr().err
    assert "shortlist.json leads outside the model folder" in err and SECRET not in err


@pytest.mark.parametrize("target", ["outside", "/etc/passwd"])
def test_plot_and_info_read_no_metrics_outside_the_folder(model_folder, tmp_path, capsys, target):
    metrics = model_folder / "metrics.jsonl"
    metrics.unlink(missing_ok=True)
    metrics.symlink_to(outside_file(tmp_path, "metrics.jsonl") if target == "outside" else target)
    curves = tmp_path / "curves.png"
    assert main(["plot", str(model_folder), "--curves", str(curves)]) == 2
    assert not curves.exists()
    assert "metrics.jsonl leads outside the model folder" in capsys.readouterr().err
    assert main(["info", str(model_folder)]) == 2
    err = capsys.readouterr().err
    assert "metrics.jsonl leads outside the model folder" in err and SECRET not in err


def test_a_file_of_the_folder_that_is_not_a_regular_file_is_refused_unopened(model_folder):
    """A FIFO would wait for a writer for ever, a device may never end: neither is opened."""
    config = model_folder / "config.yaml"
    config.unlink()
    os.mkfifo(config)
    with pytest.raises(AttnmtError, match="config.yaml is not a regular file"):
        load(model_folder)
    metrics = model_folder / "metrics.jsonl"
    metrics.unlink(missing_ok=True)
    os.mkfifo(metrics)
    with pytest.raises(AttnmtError, match="metrics.jsonl is not a regular file"):
        inside_folder(model_folder, metrics)
    with pytest.raises(AttnmtError, match="cannot follow its symbolic links"):
        (model_folder / "loop").symlink_to(model_folder / "loop")
        inside_folder(model_folder, model_folder / "loop")


def hostile_config(model_folder: Path, edit) -> Path:
    """The folder's config.yaml with ``edit(text)`` applied."""
    config = model_folder / "config.yaml"
    config.write_text(edit(config.read_text()))
    return config


def with_value(section: str, field: str, value: str):
    """An edit that sets ``section.field`` to the YAML text ``value``, as written by hand."""
    return lambda text: re.sub(rf"(?m)^({section}:\n(?:  .*\n)*?  {field}:).*$", rf"\g<1> {value}", text)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda text: text + "evil: " + "[" * 50_000 + "\n", "nested more than 50 levels deep"),
        (lambda text: text + "evil: " + "{a: " * 20_000 + "\n", "nested more than 50 levels deep"),
        (with_value("decoding", "max_length_offset", "9" * 5001), "an integer of more than 4,300 digits"),
        (with_value("model", "decoder_hidden", "1099511627776"), "model.decoder_hidden: Input should be less than"),
        (with_value("model", "encoder_layers", "1000000000"), "model.encoder_layers: Input should be less than"),
        (with_value("decoding", "length_penalty", "1.0e+308"), "decoding.length_penalty: Input should be less than"),
        (with_value("decoding", "length_penalty", ".inf"), "decoding.length_penalty: Input should be a finite number"),
    ],
)
def test_a_hostile_config_is_one_error_naming_its_field_or_line(model_folder, capsys, edit, message):
    """Each of these was a traceback (RecursionError, ValueError, torch's RuntimeError "Storage size
    calculation overflowed", OverflowError while decoding) in attnmt.load, translate and serve."""
    config = hostile_config(model_folder, edit)
    with pytest.raises(AttnmtError, match=re.escape(message)) as error:
        load(model_folder)
    assert str(config) in str(error.value)
    if "nested" in message or "digits" in message:  # (YAML's own errors say where)
        assert f'in "{config}", line ' in str(error.value)
    assert main(["translate", str(model_folder), "-i", str(config)]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("value", ["true", "'5'", "5.0", "[5]"])
def test_a_config_value_of_the_wrong_type_is_refused_not_converted(model_folder, value):
    """Types are strict: YAML tells 5 from "5", 5.0 and true, and so does the config."""
    hostile_config(model_folder, with_value("decoding", "beam", value))
    with pytest.raises(AttnmtError, match=re.escape("decoding.beam: Input should be a valid integer")):
        load(model_folder)


def test_a_config_keeps_its_paths_pairs_and_numbers_as_written(tmp_path):
    """What strict types still read: paths as strings, pairs as lists, integers for floats, and
    1e-4 as a number (YAML 1.2; PyYAML's YAML 1.1 reads it as a string)."""
    config = tmp_path / "config.yaml"
    config.write_text(
        "experiment_dir: runs/x\n"
        "data: {train: {src: a.txt, tgt: b.txt}}\n"
        "training: {max_steps: 10, learning_rate: 1e-4, min_learning_rate: 0, adam_betas: [0.9, 0.98]}\n"
        "decoding: {attention_window: [2, 8], length_penalty: 1}\n"
    )
    loaded = load_config(config)
    assert loaded.experiment_dir == tmp_path / "runs" / "x" and loaded.data.train.src == tmp_path / "a.txt"
    assert loaded.training.learning_rate == 1e-4 and loaded.training.adam_betas == (0.9, 0.98)
    assert loaded.decoding.attention_window == (2, 8) and loaded.decoding.length_penalty == 1.0
