"""Shared fixtures: every test starts from the same seeds and runs single-threaded-deterministic on CPU."""

import random

import numpy as np
import pytest
import torch


@pytest.fixture(autouse=True)
def _seed() -> None:
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)


TINY_PARAMS = dict(n_tasks=24, val_fraction=0.25, k_min=2, k_max=4, n_min=8, n_max=20)


@pytest.fixture
def tiny_h5(tmp_path):
    """A tiny clustering dataset written by the real generator (18 train + 6 validation tasks)."""
    from swarmctl.data.hdf5 import generate_dataset
    from swarmctl.data.tasks import ClusteringParams

    path = tmp_path / "tiny.h5"
    generate_dataset(path, ClusteringParams(**TINY_PARAMS), seed=0)
    return path
