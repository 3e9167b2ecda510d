"""Damaged files, and what a user sees on the terminal: one error line, with nothing that C libraries (HDF5, zlib)
or warnings would print beside Python's own output (this process's file descriptors captured in the default
suite; a real `python -m swarmctl` process for each kind of file in the slow one)."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys

import pytest
from conftest import write_fake_mnist
from faults import assert_clean_failure, cli, flip_bits, overwrite_block, snapshot, truncate

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


def _damaged_copy(tiny_h5, root, fault):
    """A copy of ``tiny_h5`` in ``root`` with the first such fault the reader refuses (a few change nothing it
    reads)."""
    root.mkdir()
    path = root / "data.h5"
    shutil.copyfile(tiny_h5, path)
    for seed in range(20):
        fault(random.Random(seed)).apply(path)
        try:
            read_dataset(path)
        except DataError:
            break
        shutil.copyfile(tiny_h5, path)
    return path


def test_damaged_hdf5_prints_nothing_below_python(tiny_h5, tmp_path, capfd):
    """In this process, its file descriptors captured: the command's one line, and nothing that HDF5's C library
    or a warning would write to the terminal beside it."""
    root = tmp_path / "case"
    path = _damaged_copy(tiny_h5, root, overwrite_block)
    capfd.readouterr()
    before = snapshot(root)
    r = cli("train", "swarm", "--data", path, "--runs-dir", root / "runs", "--device", "cpu")
    assert_clean_failure(r, root, before)
    assert r.output.startswith("error:"), r.output
    assert capfd.readouterr() == ("", "")


# a process each (the default suite: the same fault in this process, above)
@pytest.mark.slow
@pytest.mark.parametrize("fault", [overwrite_block, flip_bits])
def test_damaged_hdf5_in_a_real_process(tiny_h5, tmp_path, fault):
    root = tmp_path / "case"
    path = _damaged_copy(tiny_h5, root, fault)
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
