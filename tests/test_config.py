"""Configs written by earlier versions: a field this version dropped reads as absent when it holds the one
value it could have had (no option ever set it), and is refused as unknown with any other value."""

import dataclasses
import json

import pytest

from swarmctl.config import DataConfig, ModelConfig, TrainConfig, current_sections, from_dict
from swarmctl.errors import CheckpointError, ConfigError
from swarmctl.runs import resume_run, run_lock, start_run
from swarmctl.training.checkpoint import load_checkpoint, save_checkpoint

OLD_MODEL = {"activation": "relu"}  # ModelConfig fields of earlier versions, at their one value
OLD_DATA = {"train_split": "train", "val_split": "val"}  # DataConfig's


def test_retired_fields_at_their_one_value_read_as_absent():
    assert from_dict(ModelConfig, {"name": "swarm", **OLD_MODEL}) == ModelConfig(name="swarm")
    assert from_dict(DataConfig, {"path": "a.h5", **OLD_DATA}) == DataConfig(path="a.h5")
    with pytest.raises(ConfigError, match="activation"):
        from_dict(ModelConfig, {"name": "swarm", "activation": "elu"})  # another model than this version builds
    with pytest.raises(ConfigError, match="val_split"):
        from_dict(DataConfig, {"val_split": "test"})


def test_a_run_written_by_an_earlier_version_resumes_and_is_rewritten_without_them(tiny_h5, tmp_path):
    run = start_run(ModelConfig(name="swarm", dim_hidden=8, n_iter=2), TrainConfig(batch_size=6, max_epochs=1),
                    DataConfig(path=str(tiny_h5)), tmp_path, "old").run_dir
    old = json.loads((run / "config.json").read_text())
    old["model"].update(OLD_MODEL)
    old["data"].update(OLD_DATA)
    (run / "config.json").write_text(json.dumps(old))
    with run_lock(run):  # a run's checkpoints are written under its lock
        for name in ("last.pt", "best.pt"):
            save_checkpoint(run / name, dataclasses.replace(load_checkpoint(run / name), config=old))
    assert load_checkpoint(run / "last.pt").config == current_sections(old)  # read as this version writes it
    assert resume_run("old", tmp_path, max_epochs=2).epochs == 2
    new = json.loads((run / "config.json").read_text())
    want = current_sections(old)
    assert (new["model"], new["data"]) == (want["model"], want["data"])  # train: the resume's max_epochs
    assert "activation" not in new["model"] and "val_split" not in new["data"]
    old["model"]["activation"] = "elu"  # a value no earlier version wrote from its options
    (run / "config.json").write_text(json.dumps(old))
    with pytest.raises(CheckpointError, match="damaged"):
        resume_run("old", tmp_path)

