"""`swarmctl eval` of a run interrupted in its first epoch says which checkpoint it scored and why."""

import os
import signal

from swarmctl.config import DataConfig, ModelConfig, TrainConfig
from swarmctl.runs import start_run


def test_eval_of_an_interrupted_run_names_last_pt_and_its_position(tiny_h5, tmp_path, cli, clustering_training_loss):
    calls = {"n": 0}

    def interrupting(real):
        def loss(model, batch):
            calls["n"] += model.training
            if calls["n"] == 3 and model.training:
                os.kill(os.getpid(), signal.SIGINT)  # arrives during the 3rd step of epoch 0
            return real(model, batch)
        return loss

    clustering_training_loss(interrupting)
    res = start_run(ModelConfig(name="swarm", dim_hidden=8, n_iter=3), TrainConfig(batch_size=4, minutes=10,
                    max_epochs=2), DataConfig(path=str(tiny_h5)), tmp_path / "runs", "cut")
    clustering_training_loss(None)
    assert res.interrupted and not (res.run_dir / "best.pt").exists()
    r = cli("eval", res.run_dir, "--data", tiny_h5, "--split", "val")
    assert r.exit_code == 0, r.output
    assert "no best.pt yet: scoring last.pt, epoch 0 batch 3 (no finished epoch)" in r.output
    assert "epoch -1" not in r.output
