import json
import math

import pytest

TINY = ["--hidden", "8", "--iters", "2", "--batch-size", "20", "--max-epochs", "2"]


def test_train_eval_and_sample_an_image_model(fake_mnist, tmp_path, cli):
    runs = tmp_path / "runs"
    r = cli("train", "swarm-image", "--dataset", "mnist", "--data-dir", fake_mnist, *TINY, "--runs-dir", runs)
    assert r.exit_code == 0, r.output
    assert "bits/dim" in r.output
    run = runs / "swarm-image-8-2-1-s0"
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["val_bits_per_dim"] == pytest.approx(records[-1]["val_loss"] / math.log(2))

    r = cli("eval", "swarm-image-8-2-1-s0", "--runs-dir", runs)
    assert r.exit_code == 0, r.output
    res = json.loads((run / "eval-test.json").read_text())
    assert res["tasks"] == 20 and res["bits_per_dim"] == pytest.approx(res["loss"] / math.log(2))
    assert res["bits_per_dim"] == pytest.approx(min(x["val_bits_per_dim"] for x in records), rel=1e-5)

    r = cli("sample", "--dataset", "mnist", "--runs-dir", runs, "--per-class", 1, "--seed", 3)
    assert r.exit_code == 0, r.output
    assert (run / "samples-s3.png").is_file()
    import numpy as np

    grid = np.load(run / "samples-s3.npy")
    assert grid.shape == (10, 1, 1, 28, 28) and grid.dtype == np.uint8


def test_image_errors_are_one_line(tmp_path, fake_mnist, cli):
    runs = tmp_path / "runs"
    r = cli("train", "swarm-image", "--dataset", "mnist", "--data-dir", tmp_path / "nowhere", "--runs-dir", runs)
    assert r.exit_code == 1 and "put the four IDX files" in r.output and not runs.exists()
    r = cli("sample", "--dataset", "mnist", "--runs-dir", runs)
    assert r.exit_code == 1 and "train one with `swarmctl train swarm-image --dataset mnist`" in r.output
    r = cli("train", "swarm", "--dataset", "mnist", "--runs-dir", runs)
    assert r.exit_code == 2 and "do not apply to clustering models" in r.output
    r = cli("train", "swarm-image", "--dataset", "svhn", "--data-dir", fake_mnist, "--runs-dir", runs)
    assert r.exit_code == 2 and "dataset must be one of" in r.output
