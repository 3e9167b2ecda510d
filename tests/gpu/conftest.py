"""The GPU tests: each starts from strict float32 matrix products and gets back whatever it changed, so a
tolerance that holds alone holds in any order."""

import pytest
import torch


@pytest.fixture(autouse=True)
def strict_float32_between_tests():
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
