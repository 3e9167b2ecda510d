"""Damaged files through a real `python -m swarmctl` process: what a user sees on the terminal, including
anything C libraries (HDF5, zlib) or warnings would print beside Python's own output, is one error line."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys

import pytest
from conftest import write_fake_mnist
from faults import flip_bits, overwrite_block, snapshot, truncate

from swarmctl.data.hdf5 import read_dataset
from swarmctl.errors import DataError


def _run(args, cwd):
    env = {**os.environ, "SWARMCTL_NO_DOWNLOAD": "1", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "swarmctl", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)


def _assert_one_line(proc, root, before):
    assert proc.returncode == 1, proc.stdout + proc.stderr
    err = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("error:"), proc.stderr
    assert not proc.stdout.strip(), proc.stdout
    assert snapshot(root) == before


@pytest.mark.parametrize("fault", [overwrite_block, pytest.param(flip_bits, marks=pytest.mark.slow)])
def test_damaged_hdf5_in_a_real_process(tiny_h5, tmp_path, fault):
    root = tmp_path / "case"
    root.mkdir()
    path = root / "data.h5"
    shutil.copyfile(tiny_h5, path)
    for seed in range(20):  # the first such fault the reader refuses (a few change nothing it reads)
        fault(random.Random(seed)).apply(path)
        try:
            read_dataset(path)
        except DataError:
            break
        shutil.copyfile(tiny_h5, path)
    before = snapshot(root)
    _assert_one_line(_run(["train", "swarm", "--data", path, "--runs-dir", root / "runs", "--device", "cpu"], root),
                     root, before)


@pytest.mark.slow
def test_damaged_checkpoint_in_a_real_process(trained_runs, tmp_path):
    root = tmp_path / "case"
    shutil.copytree(trained_runs[0] / "swarm", root / "swarm")
    flip_bits(random.Random(3)).apply(root / "swarm" / "best.pt")
    before = snapshot(root)
    _assert_one_line(_run(["eval", root / "swarm", "--device", "cpu"], root), root, before)


@pytest.mark.slow
def test_damaged_gz_in_a_real_process(tmp_path):
    root = tmp_path / "case"
    write_fake_mnist(root / "images", gz=True)
    truncate(random.Random(0)).apply(root / "images" / "MNIST" / "raw" / "train-labels-idx1-ubyte.gz")
    before = snapshot(root)
    _assert_one_line(_run(["train", "swarm-image", "--dataset", "mnist", "--data-dir", root / "images",
                           "--runs-dir", root / "runs", "--device", "cpu"], root), root, before)
