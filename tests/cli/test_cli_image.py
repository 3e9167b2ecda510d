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
    # the image folder has train's name in eval, in its option and its messages
    r = cli("eval", "swarm-image-8-2-1-s0", "--runs-dir", runs, "--data-dir", fake_mnist, "--out", tmp_path / "e.json")
    assert r.exit_code == 0 and json.loads((tmp_path / "e.json").read_text())["tasks"] == 20, r.output
    r = cli("eval", "swarm-image-8-2-1-s0", "--runs-dir", runs, "--data-dir", tmp_path / "nowhere")
    assert r.exit_code == 1 and "name their folder with --data-dir" in r.output, r.output
    r = cli("eval", "swarm-image-8-2-1-s0", "--runs-dir", runs, "--data", fake_mnist)
    assert r.exit_code == 2 and "name it with --data-dir, not --data" in r.output, r.output

    r = cli("sample", "--dataset", "mnist", "--runs-dir", runs, "--per-class", 1, "--seed", 3)
    assert r.exit_code == 0, r.output
    assert (run / "samples-s3.png").is_file()
    import numpy as np

    grid = np.load(run / "samples-s3.npy")
    assert grid.shape == (10, 1, 1, 28, 28) and grid.dtype == np.uint8

    # refused before any work, nothing written: an output that is not a PNG (never written as x.png), and more
    # images than memory holds (refused from the estimate, never allocated)
    before = snapshot(tmp_path)
    r = cli("sample", "--dataset", "mnist", "--runs-dir", runs, "--out", tmp_path / "x.jpg")
    assert r.exit_code == 2 and "does not end in .png" in r.output and snapshot(tmp_path) == before
    r = cli("sample", "--dataset", "mnist", "--runs-dir", runs, "--per-class", 10**14)
    assert r.exit_code == 1 and "lower --per-class" in r.output and "Traceback" not in r.output
    assert snapshot(tmp_path) == before


def test_image_errors_are_one_line(tmp_path, fake_mnist, cli):
    runs = tmp_path / "runs"
    before = snapshot(tmp_path)

    def fails(*args, code=1):
        r = cli(*args)
        assert r.exit_code == code and "Traceback" not in r.output, r.output
        assert snapshot(tmp_path) == before  # nothing left behind, no input changed
        return r.output

    out = fails("train", "swarm-image", "--dataset", "mnist", "--data-dir", tmp_path / "nowhere", "--runs-dir", runs)
    assert "put the four IDX files" in out
    out = fails("sample", "--dataset", "mnist", "--runs-dir", runs)
    assert "train one with `swarmctl train swarm-image --dataset mnist`" in out
    assert "do not apply to clustering models" in fails("train", "swarm", "--dataset", "mnist", "--runs-dir", runs,
                                                                    code=2)
    out = fails("train", "swarm-image", "--dataset", "svhn", "--data-dir", fake_mnist, "--runs-dir", runs, code=2)
    assert "--dataset must be mnist, fashion-mnist or cifar10" in out


def snapshot(root):
    """Every path under ``root`` with the bytes of each file (folders: None)."""
    return {str(p): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}
