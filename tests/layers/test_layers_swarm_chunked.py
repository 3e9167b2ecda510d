"""A SWARM set run chunk by chunk over its entities (large sets in `swarmctl cluster`) gives the output of
one pass: mean pooling sums the previous states over every chunk before any chunk moves on."""

import pytest
import torch

from swarmctl.layers import _ext
from swarmctl.layers.swarm import SwarmLayer
from swarmctl.models.swarm import SwarmNet

PATHS = ["kernels", "pytorch"]  # the fused CPU kernels, and the PyTorch code (GPU, no compiler)


@pytest.fixture(params=PATHS)
def path(request, monkeypatch):
    if request.param == "pytorch":
        monkeypatch.setenv("SWARMCTL_NO_EXT", "1")
    elif _ext.kernels() is None:
        pytest.skip("the fused kernels cannot be built here")
    return request.param


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize(("n_layers", "dim_in"), [(1, 2), (2, 3), (1, 12)])  # 12: input wider than the kernels fuse
def test_chunked_forward_equals_one_pass(path, dtype, n_layers, dim_in):
    torch.manual_seed(0)
    model = SwarmNet(dim_in, 10, dim_hidden=16, n_iter=4, n_layers=n_layers).to(dtype).eval()
    x = torch.randn(1000, dim_in, dtype=dtype) * 2
    with torch.no_grad():
        whole = model(x[None])[0]
    seen = []
    chunked = model.forward_chunked(x, 97, progress=seen.append)  # 11 chunks, the last one of 30 entities
    tol = 1e-12 if dtype == torch.float64 else 2e-6
    torch.testing.assert_close(chunked, whole, rtol=tol, atol=tol)
    assert seen[-1] == 1.0 and len(seen) == n_layers * 4 * 11 and seen == sorted(seen)


def test_chunk_size_does_not_change_the_result(path):
    torch.manual_seed(1)
    layer = SwarmLayer(2, 16, 10, n_iter=4).double().eval()
    x = torch.randn(100, 2, dtype=torch.float64)
    # chunks of one entity, a size that leaves a remainder, half the set, all but one, the whole set, more than it
    results = [layer.forward_chunked(x, size) for size in (1, 7, 50, 99, 100, 10_000)]
    for r in results[1:]:
        torch.testing.assert_close(r, results[0], rtol=1e-12, atol=1e-12)


def test_chunked_forward_needs_mean_pooling():
    layer = SwarmLayer(2, 8, 4, n_iter=2, pooling="causal")
    with pytest.raises(ValueError, match="pooling='mean'"):
        layer.forward_chunked(torch.randn(10, 2), 4)
