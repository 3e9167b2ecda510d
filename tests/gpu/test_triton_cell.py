"""The Triton cell of the SWARM layer compiled for the GPU (`swarm.triton_cell`): states and gradients
against the float64 reference recurrence and the layer's CUDA PyTorch path, in float32 and under bf16
autocast, at the paper's sizes; tests/gpu/test_cuda.py runs it in CUDA graphs and without host syncs. Run
with `pytest -m gpu` (skipped without CUDA); tests/layers/test_layers_swarm_triton.py checks the same
kernels on the CPU (interpreter)."""

import pytest
import torch

from swarmctl.layers.swarm import SwarmLayer, triton_cell
from swarmctl.testing import random_sets, reference_swarm_states

pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda")


@pytest.fixture(autouse=True)
def strict_float32():
    """Strict float32 matrix products (TF32 would blur a float32 comparison), restored afterwards."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = before


def _layer(D, H, T, pooling, seed=0):
    torch.manual_seed(seed)
    return SwarmLayer(D, H, 5, T, pooling=pooling)


def _run(layer, x, mask, triton: bool, amp: bool = False):
    """The layer's output and the gradients of a fixed random linear loss of it (x, then every parameter),
    in float32 on the device of ``x``."""
    layer.zero_grad()
    x = x.detach().requires_grad_()
    with triton_cell(triton), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        out = layer(x, mask)
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(x.device)
    (out.float() * w).sum().backward()
    return [out.detach().float(), x.grad.float()] + [p.grad.float() for p in layer.parameters()]


def _reference(layer, x, mask):
    """The reference recurrence in float64 on the CPU, same loss."""
    ref = SwarmLayer(layer.cell.input.in_features, layer.cell.dim_hidden, 5, layer.n_iter, layer.pooling).double()
    ref.load_state_dict({k: v.double().cpu() for k, v in layer.state_dict().items()})
    x = x.detach().double().cpu().requires_grad_()
    out = ref.output(torch.cat(reference_swarm_states(ref, x, None if mask is None else mask.cpu()), -1))
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).double()
    (out * w).sum().backward()
    return [out.detach(), x.grad] + [p.grad for p in ref.parameters()]


def _close(got, want, atol, rtol):
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        torch.testing.assert_close(g.cpu().double(), w.cpu().double(), atol=atol, rtol=rtol,
                                   msg=lambda m, k=k: f"tensor {k} (output, x, Wx, b, Wh, Wp, Wout, bout): {m}")


# B, N, D, H, T: small and odd; the clustering model's width over padded sets; the MoG model's width
CASES = [("mean", (3, 37, 2, 70, 3)), ("causal", (3, 37, 2, 70, 3)), ("mean", (20, 213, 2, 192, 4)),
         ("causal", (4, 300, 2, 768, 3)), ("mean", (10, 450, 2, 768, 3))]


@pytest.mark.parametrize("pooling, shape", CASES, ids=lambda c: str(c))
def test_triton_cell_matches_the_float64_reference_and_the_pytorch_path_in_float32(pooling, shape, monkeypatch):
    from swarmctl.layers import _triton

    calls = []
    apply = _triton.TritonCell.apply
    monkeypatch.setattr(_triton.TritonCell, "apply", lambda *a: calls.append(1) or apply(*a))
    B, N, D, H, T = shape
    layer = _layer(D, H, T, pooling).to(CUDA)
    x, mask = random_sets(B, N, D)
    x, mask = x.to(CUDA), (mask.to(CUDA) if pooling == "mean" else None)
    got = _run(layer, x, mask, triton=True)
    assert len(calls) == T  # the layer ran the Triton cell
    # float32 through T iterations and a sum over the set: about 1e-6 relative per operation
    _close(got, _reference(layer, x, mask), atol=1e-4, rtol=1e-3)
    _close(got, _run(layer, x, mask, triton=False), atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("pooling", ["mean", "causal"])
def test_triton_cell_under_bf16_autocast_is_as_close_to_float32_as_the_pytorch_path(pooling):
    layer = _layer(2, 192, 5, pooling).to(CUDA)
    x, mask = random_sets(8, 120)
    x, mask = x.to(CUDA), (mask.to(CUDA) if pooling == "mean" else None)
    full = _run(layer, x, mask, triton=False)
    tri, eager = _run(layer, x, mask, triton=True, amp=True), _run(layer, x, mask, triton=False, amp=True)
    for k, (t, e, f) in enumerate(zip(tri, eager, full, strict=True)):
        scale = f.abs().max().item()
        err_t, err_e = (t - f).abs().max().item(), (e - f).abs().max().item()
        # bf16 has 8 bits of mantissa: both about 1e-2 of the tensor's scale; the Triton cell keeps its
        # pointwise work and pooling sums in float32, so it is not allowed to be much worse than eager
        assert err_t <= 2 * err_e + 1e-3 * scale and err_t <= 5e-2 * scale, (k, err_t, err_e, scale)


def test_padding_changes_no_real_output_on_cuda():
    layer = _layer(2, 64, 4, "mean").to(CUDA)
    x, mask = random_sets(4, 30)
    pad = torch.randn(4, 40, 2) * 10
    with torch.no_grad(), triton_cell():
        out = layer(x.to(CUDA), mask.to(CUDA))
        padded = layer(torch.cat([x, pad], 1).to(CUDA), torch.cat([mask, mask.new_zeros(4, 40)], 1).to(CUDA))
    torch.testing.assert_close(padded[:, :30][mask.to(CUDA)], out[mask.to(CUDA)], atol=1e-5, rtol=1e-4)
