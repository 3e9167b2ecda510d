"""The GPU tests: each starts from strict float32 matrix products and no sync checking, and gets back
whatever it changed, so a tolerance or a check that holds alone holds in any order."""

import warnings

import pytest
import torch


@pytest.fixture(autouse=True)
def strict_float32_between_tests():
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
    if torch.cuda.is_available():
        with warnings.catch_warnings():  # PyTorch warns (once) that sync checking is a prototype
            warnings.simplefilter("ignore")
            torch.cuda.set_sync_debug_mode("default")
