"""Checkpoint averaging: training keeps the last N checkpoints' weights (training.keep_checkpoints),
`attnmt average` writes their mean, and every command reads it with --checkpoint averaged."""

import pytest
import torch

from attnmt.api import load
from attnmt.cli import main
from attnmt.core.checkpoint import average_weights, read_checkpoint, save_weights
from attnmt.core.errors import AttnmtError
from attnmt.core.folders import kept_checkpoint_path, kept_checkpoints
from attnmt.training import train
from conftest import random_strings, toy_config


def test_the_average_is_the_mean_of_each_weight_in_its_own_dtype(tmp_path):
    first = {
        "w": torch.tensor([1.0, 2.0]),
        "h": torch.tensor([1.0, 3.0], dtype=torch.float16),
        "count": torch.tensor([1]),
    }
    second = {
        "w": torch.tensor([2.0, 5.0]),
        "h": torch.tensor([2.0, 4.0], dtype=torch.float16),
        "count": torch.tensor([7]),
    }
    save_weights(first, tmp_path / "a.safetensors")
    save_weights(second, tmp_path / "b.safetensors")
    mean = average_weights([tmp_path / "a.safetensors", tmp_path / "b.safetensors"])
    assert mean["w"].tolist() == [1.5, 3.5] and mean["w"].dtype == torch.float32
    assert mean["h"].tolist() == [1.5, 3.5] and mean["h"].dtype == torch.float16
    assert mean["count"].tolist() == [7]  # not a weight: the last checkpoint's


def test_only_checkpoints_of_one_model_are_averaged(tmp_path):
    save_weights({"w": torch.zeros(2)}, tmp_path / "a.safetensors")
    save_weights({"w": torch.zeros(3)}, tmp_path / "b.safetensors")
    save_weights({"v": torch.zeros(2)}, tmp_path / "c.safetensors")
    with pytest.raises(AttnmtError, match=r"b.safetensors: weight 'w' has shape \[3\]"):
        average_weights([tmp_path / "a.safetensors", tmp_path / "b.safetensors"])
    with pytest.raises(AttnmtError, match="c.safetensors: its weights are not those of"):
        average_weights([tmp_path / "a.safetensors", tmp_path / "c.safetensors"])


def trained(tmp_path, max_steps=6, keep=2, resume=False, log=lambda message: None):
    pairs = [(s, s[::-1]) for s in random_strings(40, 3, 8, seed=1)]
    config = toy_config(
        tmp_path, pairs, training={"max_steps": max_steps, "validate_every": 2, "threads": 1, "keep_checkpoints": keep}
    )
    train(config, resume=resume, log=log, progress=False)
    return config.experiment_dir


@pytest.mark.slow  # trains a model (a second)
def test_training_keeps_the_last_checkpoints_and_average_writes_their_mean(tmp_path, capsys):
    folder = trained(tmp_path)
    kept = kept_checkpoints(folder)
    assert list(kept) == [4, 6]  # validations at 2, 4 and 6; the oldest removed
    main(["average", str(folder)])
    assert "steps 4, 6" in capsys.readouterr().err
    averaged = read_checkpoint(folder / "averaged.safetensors")[0]
    four, six = read_checkpoint(kept[4])[0], read_checkpoint(kept[6])[0]
    for name, tensor in averaged.items():
        torch.testing.assert_close(tensor, (four[name] + six[name]) / 2)

    model = load(folder, "averaged")
    assert model.weights == folder / "averaged.safetensors"
    (tmp_path / "in").write_text("abc\n")
    assert main(["translate", str(folder), "--checkpoint", "averaged", "-i", str(tmp_path / "in")]) == 0
    assert capsys.readouterr().out.strip() == model.translate(["abc"])[0].text


@pytest.mark.slow  # trains a model (a second)
def test_the_server_reads_the_checkpoint_it_is_given(tmp_path):
    from attnmt.serve.limits import ServerLimits
    from attnmt.serve.models import load_models

    folder = trained(tmp_path)
    main(["average", str(folder)])
    models = load_models([str(folder)], ServerLimits(), checkpoint="averaged")
    assert next(iter(models.values())).translator.weights == folder / "averaged.safetensors"


@pytest.mark.slow  # trains a model (a second)
def test_average_says_what_is_missing(tmp_path, capsys):
    folder = trained(tmp_path, keep=0)
    assert main(["translate", str(folder), "--checkpoint", "averaged", "-i", str(tmp_path / "in")]) == 2
    assert "attnmt average" in capsys.readouterr().err
    assert main(["average", str(folder)]) == 2
    assert "train with training.keep_checkpoints" in capsys.readouterr().err
    kept = trained(tmp_path / "kept", keep=3)
    assert main(["average", str(kept), "--last", "4"]) == 2
    assert "holds 3 checkpoints (steps 2, 4, 6)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["average", str(kept), "--last", "1"])
    assert "two or more checkpoints" in capsys.readouterr().err


@pytest.mark.slow  # trains a model (a second)
def test_a_resumed_run_drops_the_checkpoints_that_the_dead_run_kept_past_its_last(tmp_path):
    folder = trained(tmp_path, max_steps=4, keep=5)
    ghost = kept_checkpoint_path(folder, 8)  # as a run that died after step 8 but before last.safetensors
    ghost.write_bytes(kept_checkpoint_path(folder, 4).read_bytes())
    logged = []
    trained(tmp_path, max_steps=6, keep=5, resume=True, log=logged.append)
    assert list(kept_checkpoints(folder)) == [2, 4, 6]
    assert f"resumed from {folder / 'last.safetensors'} at step 4" in logged


@pytest.mark.slow  # trains a model (a second)
def test_average_reads_no_checkpoint_outside_the_model_folder(tmp_path, capsys):
    folder = trained(tmp_path)
    outside = tmp_path / "elsewhere.safetensors"
    kept_checkpoints(folder)[6].rename(outside)
    kept_checkpoint_path(folder, 6).symlink_to(outside)
    assert main(["average", str(folder)]) == 2
    assert "leads outside the model folder" in capsys.readouterr().err
    assert not (folder / "averaged.safetensors").exists()


@pytest.mark.slow  # trains a model (a second)
def test_info_shows_the_kept_and_averaged_checkpoints(tmp_path, capsys):
    from attnmt.info import model_info

    folder = trained(tmp_path, keep=3)
    assert model_info(folder)["checkpoints"] == {"kept": [2, 4, 6]}
    main(["average", str(folder), "--last", "2"])
    assert model_info(folder)["checkpoints"] == {"kept": [2, 4, 6], "averaged": [4, 6]}
    capsys.readouterr()
    main(["info", str(folder)])
    out = capsys.readouterr().out
    assert "checkpoints kept      steps 2, 4, 6" in out and "checkpoints averaged  steps 4, 6" in out


@pytest.mark.slow  # trains a model (a second)
def test_the_checkpoint_of_an_interruption_is_not_kept_for_averaging(tmp_path, monkeypatch):
    from attnmt.training.loop import TrainingLoop

    monkeypatch.setattr(TrainingLoop, "_interrupted", lambda self: self.state.step == 3)  # Ctrl-C at step 3
    with pytest.raises(KeyboardInterrupt):
        trained(tmp_path, keep=5)
    folder = tmp_path / "exp"
    assert list(kept_checkpoints(folder)) == [2]  # the schedule's, not step 3's
    monkeypatch.undo()
    trained(tmp_path, keep=5, resume=True)
    assert list(kept_checkpoints(folder)) == [2, 4, 6]
