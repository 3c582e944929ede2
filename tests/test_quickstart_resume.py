"""A quick start stopped short of its steps (Ctrl-C saves a checkpoint) goes on from there when run
again; one trained that far is used as it is, its config.yaml untouched."""

import yaml

from attnmt.core.checkpoint import read_trainer_state
from attnmt.training.quickstart import train_once
from conftest import reverse, toy_config

PAIRS = [(w, reverse(w)) for w in ["abc", "bca", "cab", "abd", "dba", "bad", "cad", "dac"]]


def raw_config(folder, steps):
    return toy_config(folder, PAIRS, training={"max_steps": steps, "validate_every": 100}).model_dump(mode="json")


def test_a_stopped_quick_start_resumes_and_a_finished_one_is_kept(tmp_path):
    said = []
    config = train_once(tmp_path, raw_config(tmp_path, 4), "a toy", said.append, progress=False)
    last = config.experiment_dir / "last.safetensors"
    assert read_trainer_state(last)["step"] == 4 and "training a toy" in said

    # run again with more steps (as after a Ctrl-C at step 4 of 8): on from step 4, not "already trained"
    train_once(tmp_path, raw_config(tmp_path, 8), "a toy", said.append, progress=False)
    assert read_trainer_state(last)["step"] == 8
    assert any(line.startswith("resuming the quick start stopped at step 4 of 8") for line in said)
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["training"]["max_steps"] == 8

    # fewer steps than trained: the model is kept, and so is the config that made it
    said.clear()
    train_once(tmp_path, raw_config(tmp_path, 6), "a toy", said.append, progress=False)
    assert read_trainer_state(last)["step"] == 8
    assert said == [f"{config.experiment_dir} is already trained (8 steps); delete {tmp_path} to train again"]
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["training"]["max_steps"] == 8
