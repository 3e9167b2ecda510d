"""The fused CPU kernels of the SWARM layer: same function and gradients as the PyTorch path, and the
switches around them (environment variable, missing compiler, dtypes and devices they do not handle)."""

import logging

import pytest
import torch

from swarmctl.layers import _ext, _fused
from swarmctl.layers.swarm import SwarmCell, SwarmLayer
from swarmctl.testing import random_sets, reference_swarm_states

needs_kernels = pytest.mark.skipif(_ext.disabled(), reason="SWARMCTL_NO_EXT is set")


@pytest.fixture(scope="module")
def kernels():
    """The kernels; skipped only where no compiler exists: a compiler whose build fails, or gives a library
    that does not load or has another ABI, fails every test that needs them."""
    if _ext._compiler() is None:
        pytest.skip("no C++ compiler: the fused kernels cannot be built here")
    k = _ext.kernels()
    assert k is not None, f"a C++ compiler exists, but the fused kernels are unavailable: {_ext.unavailable_reason()}"
    return k


def outputs_and_grads(layer, x, mask, states, w_h, w_c):
    layer.zero_grad()
    x = x.detach().requires_grad_()
    h, c = states(x, mask)
    ((h * w_h).sum() + (c * w_c).sum()).backward()
    # an unused weight (Wh and Wp with one iteration) has no gradient here and a zero one in the reference
    return [h.detach(), c.detach(), x.grad] + [torch.zeros_like(p) if p.grad is None else p.grad
                                               for p in layer.cell.parameters()]


@needs_kernels
@pytest.mark.parametrize("pooling", ["mean", "causal"])
@pytest.mark.parametrize("dim_in", [2, 12])  # projected inside the kernels / by a product beforehand
@pytest.mark.parametrize("n_iter", [1, 2, 4])
def test_fused_layer_matches_reference_in_values_and_gradients(kernels, pooling, dim_in, n_iter):
    layer = SwarmLayer(dim_in, 8, 3, n_iter, pooling=pooling).double()
    x, mask = random_sets(4, 9, dim_in, dtype=torch.float64)
    mask[1, :] = False  # an empty set pools to zero
    mask = mask if pooling == "mean" else None
    w_h, w_c = torch.randn(4, 9, 8, dtype=torch.float64), torch.randn(4, 9, 8, dtype=torch.float64)
    got = outputs_and_grads(layer, x, mask, layer.states, w_h, w_c)
    # the layer holds padded entities' inputs at zero (what padding holds reaches nothing): so does the reference
    padded = (lambda v, m: v) if mask is None else (lambda v, m: torch.where(m[..., None], v, 0))
    want = outputs_and_grads(layer, x, mask, lambda v, m: reference_swarm_states(layer, padded(v, m), m), w_h, w_c)
    assert len(got) == len(want) == 3 + 4  # h, c, x; Wx, b, Wh, Wp
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, atol=1e-12, rtol=1e-10)


@needs_kernels
@pytest.mark.parametrize("pooling", ["mean", "causal"])
def test_fused_layer_passes_gradcheck(kernels, pooling):
    layer = SwarmLayer(2, 3, 2, 3, pooling=pooling).double()
    x, mask = random_sets(2, 4, 2, dtype=torch.float64)
    params = {k: v for k, v in layer.named_parameters() if k.startswith("cell.")}  # the output layer is plain torch

    def f(x, *ps):
        return torch.func.functional_call(layer, dict(zip(params, ps, strict=True)), (x, mask))

    assert torch.autograd.gradcheck(f, (x.requires_grad_(), *params.values()))


@needs_kernels
@pytest.mark.parametrize("pooling", ["mean", "causal"])
def test_fused_layer_equals_pytorch_path_in_float32(kernels, monkeypatch, pooling):
    # large enough for the kernels to split rows (and sets) over threads: 3 x 400 rows x 128 gate values
    assert 3 * 400 * 128 >= _ext.PARALLEL_MIN
    layer = SwarmLayer(2, 32, 5, 5, pooling=pooling)
    x, mask = random_sets(3, 400, 2)
    w = torch.randn(3, 400, 5)

    def run():
        layer.zero_grad()
        xx = x.clone().requires_grad_()
        y = layer(xx, mask)
        (y * w).sum().backward()
        return [y.detach(), xx.grad] + [p.grad.clone() for p in layer.parameters()]

    fused = run()
    monkeypatch.setenv("SWARMCTL_NO_EXT", "1")
    plain = run()
    for a, b in zip(fused, plain, strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)
    with torch.no_grad():  # inference runs the kernels without keeping anything for a backward
        monkeypatch.delenv("SWARMCTL_NO_EXT")
        torch.testing.assert_close(layer(x, mask), plain[0], atol=2e-5, rtol=1e-4)


@needs_kernels
def test_fused_backward_can_run_twice(kernels):
    layer = SwarmLayer(2, 4, 2, 3)
    y = layer(torch.randn(2, 3, 2)).sum()
    first = torch.autograd.grad(y, list(layer.parameters()), retain_graph=True)
    second = torch.autograd.grad(y, list(layer.parameters()))
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)


@needs_kernels
@pytest.mark.parametrize("step_rows", [4, _fused.STEP_ROWS])  # 4: blocks of whole sets, of parts of one set
@pytest.mark.parametrize("per_set", [1, 3, 10])  # entities per set
@pytest.mark.parametrize("pooled", ["set", "entity"])  # one pooled h per set (mean), one per entity (causal)
@pytest.mark.parametrize("dim_in", [2, 12])  # projected inside the kernels / by a product beforehand
def test_step_without_gradients_equals_its_pytorch_code(kernels, monkeypatch, step_rows, per_set, pooled, dim_in):
    monkeypatch.setattr(_fused, "STEP_ROWS", step_rows)
    cell = SwarmCell(dim_in, 8).double()
    x = torch.randn(5, per_set, dim_in, dtype=torch.float64)
    h, c = torch.randn(2, 5, per_set, 8, dtype=torch.float64)
    pool = torch.randn(5, 1 if pooled == "set" else per_set, 8, dtype=torch.float64)

    def steps():
        with torch.no_grad():
            return [*cell.step(None, None, None, x=x), *cell.step(h, c, pool, x=x),
                    *cell.step(h, c, pool, cell.project_input(x))]

    fused = steps()
    monkeypatch.setenv("SWARMCTL_NO_EXT", "1")
    for a, b in zip(fused, steps(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-13, rtol=1e-12)


def test_environment_variable_switches_kernels_off(monkeypatch):
    monkeypatch.setenv("SWARMCTL_NO_EXT", "1")
    assert _ext.kernels() is None
    monkeypatch.setenv("SWARMCTL_NO_EXT", "0")
    assert not _ext.disabled()


def test_missing_compiler_falls_back_with_one_log_line(monkeypatch, caplog):
    monkeypatch.setattr(_ext, "_state", {})
    monkeypatch.delenv("SWARMCTL_NO_EXT", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("PATH", "")
    layer = SwarmLayer(2, 4, 2, 3)
    x, mask = random_sets(2, 5)
    with caplog.at_level(logging.WARNING, logger="swarmctl.layers._ext"):
        y1 = layer(x, mask)
        y2 = layer(x, mask)
    assert _ext.kernels() is None
    assert [r.getMessage() for r in caplog.records if "no C++ compiler" in r.getMessage()] != []
    assert len(caplog.records) == 1
    torch.testing.assert_close(y1, y2)


def test_failed_build_falls_back_with_one_log_line(monkeypatch, caplog, tmp_path):
    monkeypatch.setattr(_ext, "_state", {})
    monkeypatch.delenv("SWARMCTL_NO_EXT", raising=False)
    monkeypatch.setenv("SWARMCTL_CACHE", str(tmp_path))
    monkeypatch.setattr(_ext, "SOURCE", tmp_path / "broken.cpp")
    (tmp_path / "broken.cpp").write_text("this is not C++\n")
    with caplog.at_level(logging.WARNING, logger="swarmctl.layers._ext"):
        assert _ext.kernels() is None
        assert _ext.kernels() is None
    assert len(caplog.records) == 1 and "PyTorch code" in caplog.records[0].getMessage()
    assert list((tmp_path / "ext").glob("*.so")) == []  # nothing half-written left behind
    assert _ext.unavailable_reason()  # the compiler's message, for the report of a test that needs the kernels


@pytest.mark.parametrize("t", [torch.zeros(2, device="meta"), torch.zeros(2, dtype=torch.bfloat16),
                               torch.zeros(2, dtype=torch.float16)])
def test_kernels_only_take_cpu_float32_and_float64(t):
    assert not _ext.Kernels.supports(t)
    assert _ext.Kernels.supports(torch.zeros(2)) and _ext.Kernels.supports(torch.zeros(2, dtype=torch.float64))


@needs_kernels
def test_compiled_library_is_cached(kernels, monkeypatch):
    cxx = _ext._compiler()
    assert kernels.path.exists() and kernels.path.parent == _ext.cache_dir()
    monkeypatch.setattr(_ext.subprocess, "run", _no_compile(_ext.subprocess.run))
    assert _ext._build(cxx).path == kernels.path  # found by its hash: no compiler call but the version query


def _no_compile(run):
    def guarded(cmd, *args, **kwargs):
        assert "--version" in cmd, f"unexpected compiler call {cmd}"
        return run(cmd, *args, **kwargs)

    return guarded


@needs_kernels
@pytest.mark.parametrize("used", [0, 1])  # only h or only c reaches the loss: the other gradient is None
def test_fused_layer_gradients_when_one_state_is_unused(kernels, used):
    layer = SwarmLayer(2, 4, 3, 3).double()
    x, mask = random_sets(2, 5, 2, dtype=torch.float64)
    got, want = [], []
    for states, out in ((layer.states, got), (lambda v, m: reference_swarm_states(layer, v, m), want)):
        layer.zero_grad()
        states(x, mask)[used].sum().backward()
        out += [p.grad.clone() for p in layer.cell.parameters()]
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, atol=1e-12, rtol=1e-10)
