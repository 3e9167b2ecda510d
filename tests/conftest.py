"""Shared fixtures: every test starts from the same seeds and runs single-threaded-deterministic on CPU."""

import dataclasses
import functools
import os
import random

import numpy as np
import pytest
import typer.main

# A Typer app's click command, built once per app as a process that runs the CLI builds it once: Typer's CliRunner
# builds it for every invocation (24 ms on a quiet core, 125 ms beside a busy one; the suite runs 1,666 commands in
# process). typer.testing takes `typer.main.get_command`, a public function, by name when it is first imported:
# cached here, before that import, every CliRunner of the suite uses the cached one (test_cli_basics checks it).
typer.main.get_command = functools.cache(typer.main.get_command)
import typer.testing  # noqa: E402

# PyTorch is imported where it is used: the controller process of `pytest -n` loads this file too, runs no test,
# and starts the workers after it (about 2.5 s sooner without PyTorch's import).
if os.environ.get("PYTEST_XDIST_WORKER"):
    # a worker process of `pytest -n` starts with COLUMNS=80, and the command line's console, made when a test
    # module imports it, would keep that width for good: the worker starts as `pytest` alone does
    os.environ.pop("COLUMNS", None)
    import torch

    torch.set_num_threads(1)  # two workers on two cores: one thread each, as swarmctl's rule picks on a busy machine


def tiered(*values, default: bool):
    """One parametrize case, run by the default suite when ``default``, else by the slow one only."""
    return pytest.param(*values, marks=() if default else pytest.mark.slow)


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` need CUDA: skipped where there is none (run them with ``pytest -m gpu``)."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _no_network(monkeypatch) -> None:
    monkeypatch.setenv("SWARMCTL_NO_DOWNLOAD", "1")  # tests never try torchvision's download


@pytest.fixture(scope="session")
def _empty_folder(tmp_path_factory):
    return tmp_path_factory.mktemp("no-shipped-models")


@pytest.fixture(autouse=True)
def _no_shipped_models(monkeypatch, _empty_folder):
    """Commands fall back to the models in pretrained/ when no run is named; tests see none unless they
    point SWARMCTL_PRETRAINED somewhere themselves. One empty folder for the session (a new numbered folder a
    test costs more the more tests ran: pytest lists the base folder to number it), checked still empty after
    each test."""
    monkeypatch.setenv("SWARMCTL_PRETRAINED", str(_empty_folder))
    yield
    assert not any(_empty_folder.iterdir()), f"a test wrote into the shipped models' folder {_empty_folder}"


@pytest.fixture(autouse=True)
def _seed() -> None:
    random.seed(0)
    np.random.seed(0)
    import torch

    if torch.cuda.is_available():
        torch.manual_seed(0)
    else:  # the one generator there is: torch.manual_seed also queues a seed for each accelerator PyTorch knows, with
        torch.default_generator.manual_seed(0)  # the caller's stack formatted three times (1-2 ms in a test)


TINY_PARAMS = dict(n_tasks=24, val_fraction=0.25, k_min=2, k_max=4, n_min=8, n_max=20)


@pytest.fixture(scope="session")
def _tiny_h5_once(tmp_path_factory):
    from swarmctl.data.clustering_generator import ClusteringParams
    from swarmctl.data.hdf5 import generate_dataset

    path = tmp_path_factory.mktemp("tiny-h5") / "tiny.h5"
    generate_dataset(path, ClusteringParams(**TINY_PARAMS), seed=0)
    return path


@pytest.fixture
def tiny_h5(tmp_path, _tiny_h5_once):
    """A tiny clustering dataset written by the real generator (18 train + 6 validation tasks): each test gets
    its own copy of the one file the session generates (the generator takes 0.2 s or more; 190 tests use it)."""
    import shutil

    path = tmp_path / "tiny.h5"
    shutil.copyfile(_tiny_h5_once, path)
    return path


@pytest.fixture(scope="session")
def trained_runs(tmp_path_factory):
    """Two tiny runs trained for two epochs on a tiny dataset: (runs_dir, data_path)."""
    from swarmctl.config import DataConfig, ModelConfig, TrainConfig
    from swarmctl.data.clustering_generator import ClusteringParams
    from swarmctl.data.hdf5 import generate_dataset
    from swarmctl.runs import start_run

    root = tmp_path_factory.mktemp("trained")
    data = root / "data.h5"
    generate_dataset(data, ClusteringParams(**{**TINY_PARAMS, "n_tasks": 40}), seed=0)
    runs = root / "runs"
    for name, hidden in (("swarm", 8), ("lstm", 8)):
        start_run(ModelConfig(name=name, dim_hidden=hidden, n_iter=3, n_layers=1),
                         TrainConfig(batch_size=8, max_epochs=2, device="cpu"), DataConfig(path=str(data)), runs, name)
    return runs, data


def _one_pixel_png() -> bytes:
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\x00\xff")) + chunk(b"IEND", b""))


@pytest.fixture
def figures_unrendered(monkeypatch):
    """For tests of what a command prints or writes beside its figures: each figure is built as the command builds
    it, and saved where and as it saves it, but as a one-pixel PNG instead of its drawing (drawing takes 0.3 to 1
    CPU s a figure, a third of the suite's time when every test drew its figures). Every kind of figure is drawn
    for real elsewhere in the default suite: tests/robustness/test_robust_results.py draws each from its plot
    function, names that are no plain text included, and each command's tests draw its own."""
    from matplotlib.figure import Figure

    png = _one_pixel_png()

    def savefig(self, fname, **kwargs):
        assert kwargs.get("format", "png") == "png", kwargs
        if hasattr(fname, "write"):
            fname.write(png)
        else:
            with open(fname, "wb") as fh:
                fh.write(png)

    monkeypatch.setattr(Figure, "savefig", savefig)


def write_fake_mnist(root, folder="MNIST", n_train=40, n_test=20, size=28, gz=False):
    """Four IDX files in torchvision's layout ROOT/<folder>/raw/ (random binary images, random labels)."""
    import gzip
    import struct
    from pathlib import Path

    raw = Path(root) / folder / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        images = ((rng.random((n, size, size)) < 0.2) * 255).astype(np.uint8)
        labels = rng.integers(0, 10, n).astype(np.uint8)
        for name, header, data in ((f"{prefix}-images-idx3-ubyte", struct.pack(">IIII", 2051, n, size, size), images),
                                   (f"{prefix}-labels-idx1-ubyte", struct.pack(">II", 2049, n), labels)):
            payload = header + data.tobytes()
            if gz:
                (raw / f"{name}.gz").write_bytes(gzip.compress(payload))
            else:
                (raw / name).write_bytes(payload)
    return Path(root)


@pytest.fixture
def fake_mnist(tmp_path):
    return write_fake_mnist(tmp_path / "images")


@pytest.fixture
def cli():
    """Run swarmctl in-process: ``cli("train", "swarm", "--data", path)`` -> click Result (output, exit_code).

    Arguments are turned into strings; a wide terminal keeps each printed line on one line."""
    from typer.testing import CliRunner

    from swarmctl.cli import app

    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


@pytest.fixture
def campaigns_cli():
    """Run the maintainers' campaign tools in-process (`python -m tools.campaigns`, from the repository's root):
    ``campaigns_cli("status", "--campaigns", root)`` -> click Result, as :func:`cli`."""
    from typer.testing import CliRunner

    from tools.campaigns.cli import app

    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


@pytest.fixture
def clustering_training_loss(monkeypatch):
    """``install(wrap)`` makes clustering runs train with ``wrap(loss)`` in place of the task's loss (to count
    steps, or fail or stop at one), by wrapping what ``ClusteringTask.prepare`` returns; ``install(None)``
    restores the task's own."""
    from swarmctl.tasks.clustering import ClusteringTask

    real_prepare = ClusteringTask.prepare

    def install(wrap):
        def prepare(self, *args, **kwargs):
            data = real_prepare(self, *args, **kwargs)
            return dataclasses.replace(data, loss_fn=wrap(data.loss_fn))

        monkeypatch.setattr(ClusteringTask, "prepare", real_prepare if wrap is None else prepare)

    return install


CAMPAIGNS = ("clustering", "mog", "mnist", "fashion-mnist")


def fresh_progress(name):
    """The progress.json of campaign ``name`` as it stood before any GPU job moved it (the repository's own
    campaigns move on with every job; the tests must not)."""
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "campaigns" / name / "progress.json"
    progress = json.loads(path.read_text())
    for key in ("best_bits_per_dim", "best_log_likelihood", "epochs", "net_minutes"):
        progress.pop(key, None)
    progress["sessions"] = []
    if name == "clustering":
        progress["runs"] = {}
    return progress


def fresh_campaigns(root):
    """A campaigns folder as before the first job: every campaign's fresh progress.json and the README; no
    checkpoints, runs, step timings or session records."""
    import json
    import shutil
    from pathlib import Path

    root.mkdir(parents=True)
    shutil.copy2(Path(__file__).resolve().parents[1] / "campaigns" / "README.md", root / "README.md")
    for name in CAMPAIGNS:
        (root / name).mkdir()
        (root / name / "progress.json").write_text(json.dumps(fresh_progress(name), indent=2) + "\n")
    return root
