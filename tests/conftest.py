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
