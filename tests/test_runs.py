"""Runs: resume continues exactly where an uninterrupted run would be, also after an interrupt."""

import json
import os
import signal

import torch

from swarmctl.config import DataConfig, ModelConfig, TrainConfig
from swarmctl.runs import resume_run, start_run
from swarmctl.training.checkpoint import load_checkpoint


def _tiny_run(tiny_h5, runs, name, max_epochs):
    return start_run(ModelConfig(name="swarm", dim_hidden=8, n_iter=3),
                            TrainConfig(batch_size=4, minutes=10, max_epochs=max_epochs),
                            DataConfig(path=str(tiny_h5)), runs, name)


def _weights(run_dir):
    return load_checkpoint(run_dir / "last.pt").model


def test_resume_continues_exactly_where_an_uninterrupted_run_would_be(tiny_h5, tmp_path):
    straight = _tiny_run(tiny_h5, tmp_path, "straight", 4)
    _tiny_run(tiny_h5, tmp_path, "split", 2)
    resumed = resume_run("split", tmp_path, max_epochs=4)
    assert resumed.epochs == straight.epochs == 4
    a, b = _weights(straight.run_dir), _weights(resumed.run_dir)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)
    lines = (resumed.run_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["epoch"] for x in lines] == [0, 1, 2, 3]


def test_interrupt_saves_position_inside_the_epoch_and_resume_matches(tiny_h5, tmp_path, clustering_training_loss):
    straight = _tiny_run(tiny_h5, tmp_path, "straight", 2)
    calls = {"n": 0}

    def interrupting(real):
        def loss(model, batch):
            calls["n"] += model.training
            if calls["n"] == 6 and model.training:
                os.kill(os.getpid(), signal.SIGINT)  # arrives during the 6th step; the loop stops after it
            return real(model, batch)
        return loss

    clustering_training_loss(interrupting)
    res = _tiny_run(tiny_h5, tmp_path, "cut", 2)
    clustering_training_loss(None)
    assert res.interrupted and "SIGINT" in res.stop_reason
    state = load_checkpoint(res.run_dir / "last.pt").state
    assert (state.epoch, state.cursor) == (1, 1)  # 5 batches per epoch: epoch 0 done, 1 step into epoch 1
    resumed = resume_run("cut", tmp_path)
    assert resumed.epochs == 2
    a, b = _weights(straight.run_dir), _weights(resumed.run_dir)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)
