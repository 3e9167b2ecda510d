"""The Triton cell of the SWARM layer (swarmctl/layers/_triton.py, switched on by `swarm.triton_cell`): the
same states and gradients as the reference recurrence and the layer's PyTorch path, padding that changes
no real entity, and the switch itself. On the CPU through Triton's interpreter.

The interpreter is chosen by TRITON_INTERPRET=1, read when Triton is first imported, so the checks cannot
run in the suite's own process (Triton may be imported already, and the variable must not reach the other
tests): in a normal run this module holds one test, which runs the module again in a child process with
the variable set and fails with the child's output when any check there fails. With the variable set (the
child, or `TRITON_INTERPRET=1 pytest tests/layers/test_layers_swarm_triton.py`) it holds the checks.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
N_CHECKS = 23  # the checks the child must run, all passed: fewer means some were lost, not that they passed

if not INTERPRETED:

    @pytest.mark.slow  # a few processes or an interpreter: seconds of CPU; `make test-all`
    def test_the_triton_cell_checks_pass_under_the_interpreter():
        pytest.importorskip("triton", reason="Triton cannot be imported here: there is no Triton cell to check")
        repo = Path(__file__).resolve().parents[2]
        env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1"}
        res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                              str(Path(__file__).relative_to(repo))], cwd=repo, env=env, capture_output=True,
                             text=True, timeout=900)
        out = res.stdout[-20_000:] + res.stderr[-5_000:]
        assert res.returncode == 0, out
        counts = dict((word, int(n)) for n, word in re.findall(r"(\d+) (passed|failed|skipped|error|deselected)", out))
        assert counts == {"passed": N_CHECKS}, out

else:
    from swarmctl.layers import _triton, swarm
    from swarmctl.layers.pooling import zero_padded
    from swarmctl.layers.swarm import SwarmLayer, triton_cell
    from swarmctl.testing import (
        assert_masked_no_influence,
        assert_padding_invariant,
        random_sets,
        reference_swarm_states,
    )

    @pytest.fixture
    def cell_calls(monkeypatch):
        """How many times the Triton cell ran (a check that the layer took it, not its PyTorch path)."""
        calls = []
        apply = _triton.TritonCell.apply
        monkeypatch.setattr(_triton.TritonCell, "apply", lambda *a: calls.append(1) or apply(*a))
        return calls

    def outputs_and_grads(layer, x, mask, run, seed=1):
        """Output of the whole layer (cell and output map) and the gradients of a random linear loss of it
        with respect to x and every parameter."""
        layer.zero_grad()
        x = x.detach().requires_grad_()
        out = run(x, mask)
        w = torch.randn(out.shape, dtype=out.dtype, generator=torch.Generator().manual_seed(seed))
        (out * w).sum().backward()
        return [out.detach(), x.grad] + [torch.zeros_like(p) if p.grad is None else p.grad
                                         for p in layer.parameters()]

    def reference(layer):
        """The reference of the layer, whose entry zeroes padded inputs (padding holds nothing)."""
        return lambda v, m: layer.output(torch.cat(reference_swarm_states(layer, zero_padded(v, m), m), -1))

    def in_triton(layer):
        def run(v, m):
            with triton_cell():
                return layer(v, m)
        return run

    def test_the_interpreter_runs_the_kernels():
        assert _triton.interpreting()
        assert _triton.usable(torch.zeros(1, 1, 4)) and not _triton.usable(torch.zeros(1, 1, 4, dtype=torch.int64))

    # B, N, D, H, T: one set of one entity; N and H not powers of two; N over one block of entities (32) and
    # H over one block of hidden units (64), each with a partial last block
    SHAPES = [(1, 1, 2, 4, 2), (3, 7, 3, 5, 3), (2, 37, 2, 70, 2), (4, 9, 5, 3, 1)]

    @pytest.mark.parametrize("pooling", ["mean", "causal"])
    @pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "-".join(map(str, s)))
    def test_triton_cell_equals_the_reference_in_float64(pooling, shape, cell_calls):
        B, N, D, H, T = shape
        torch.manual_seed(0)
        layer = SwarmLayer(D, H, 3, T, pooling=pooling).double()
        x, mask = random_sets(B, N, D, dtype=torch.float64)
        if B > 2:
            mask[2] = False  # an empty set pools to zero
        mask = mask if pooling == "mean" else None
        got = outputs_and_grads(layer, x, mask, in_triton(layer))
        assert len(cell_calls) == T
        want = outputs_and_grads(layer, x, mask, reference(layer))
        assert len(got) == len(want) == 2 + 6  # output, x; Wx, b, Wh, Wp, output weight and bias
        for k, (g, w) in enumerate(zip(got, want, strict=True)):
            torch.testing.assert_close(g, w, atol=1e-12, rtol=1e-10, msg=lambda m, k=k: f"tensor {k}: {m}")

    @pytest.mark.parametrize("pooling", ["mean", "causal"])
    def test_triton_cell_equals_the_layers_pytorch_path_in_float32(pooling, monkeypatch, cell_calls):
        monkeypatch.setenv("SWARMCTL_NO_EXT", "1")  # the layer's own path is its PyTorch code, not the C++ kernels
        torch.manual_seed(0)
        layer = SwarmLayer(2, 40, 6, 4, pooling=pooling)
        x, mask = random_sets(3, 45, 2)
        mask = mask if pooling == "mean" else None
        got = outputs_and_grads(layer, x, mask, in_triton(layer))
        assert len(cell_calls) == 4
        want = outputs_and_grads(layer, x, mask, layer)
        assert len(cell_calls) == 4  # outside the switch the layer kept its path
        for g, w in zip(got, want, strict=True):  # float32: sums in another order, tanh by sigmoid
            torch.testing.assert_close(g, w, atol=2e-5, rtol=1e-4)

    @pytest.mark.parametrize("name, pooling", [("swarm", "mean"), ("swarm-mog", "causal"), ("swarm-mog-pma", "mean"),
                                               ("swarm-image", "causal")])
    def test_every_swarm_model_runs_the_triton_cell_with_the_same_loss_and_gradients(name, pooling, monkeypatch,
                                                                                      cell_calls):
        from swarmctl import ModelConfig, create_model
        from swarmctl.models import complete_config
        from swarmctl.tasks import task_of

        monkeypatch.setenv("SWARMCTL_NO_EXT", "1")
        torch.manual_seed(0)
        cfg = complete_config(ModelConfig(name=name, dim_hidden=8, n_iter=2, pooling=pooling))
        model = create_model(cfg).double()
        inputs = task_of(name).example_inputs(2, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
        results = []
        for on in (True, False):
            model.zero_grad()
            with triton_cell(on):
                model(*inputs).sum().backward()
            results.append([p.grad.clone() for p in model.parameters() if p.grad is not None])
        assert len(cell_calls) == 2 * sum(isinstance(m, SwarmLayer) for m in model.modules()) > 0
        for g, w in zip(*results, strict=True):
            torch.testing.assert_close(g, w, atol=1e-12, rtol=1e-10)

    def test_padded_entities_change_no_real_output_or_gradient():
        torch.manual_seed(0)
        layer = SwarmLayer(2, 6, 3, 3).double()
        x, mask = random_sets(3, 8, 2, dtype=torch.float64)
        with triton_cell():
            assert_padding_invariant(layer, x, mask, n_pad=35, atol=1e-12, rtol=1e-10)  # a second entity block
        grads = []
        for n_pad in (0, 35):
            pad = torch.randn(3, n_pad, 2, dtype=torch.float64) * 10
            xp = torch.cat([x, pad], 1).requires_grad_()
            mp = torch.cat([mask, mask.new_zeros(3, n_pad)], 1)
            layer.zero_grad()
            with triton_cell():
                out = layer(xp, mp)
            out[:, :8][mask].sum().backward()
            grads.append([xp.grad[:, :8][mask]] + [p.grad.clone() for p in layer.parameters()])
        for g, w in zip(*grads, strict=True):
            torch.testing.assert_close(g, w, atol=1e-12, rtol=1e-10)

    @pytest.mark.parametrize("pooling", ["mean", "causal"])
    def test_gradcheck_passes_and_second_derivatives_are_refused_with_a_message(pooling, cell_calls):
        """First derivatives are right (gradcheck); the cell's backward is not differentiable, so
        create_graph=True raises, naming the way out, instead of giving a silent wrong number."""
        torch.manual_seed(0)
        layer = SwarmLayer(2, 3, 2, 2, pooling=pooling).double()
        x = torch.randn(2, 3, 2, dtype=torch.float64, requires_grad=True)
        with triton_cell():
            assert torch.autograd.gradcheck(layer, (x,))
            out = layer(x).sin().sum()
        assert cell_calls
        with pytest.raises(RuntimeError, match=r"no second derivatives.*outside .*triton_cell\(\)"):
            torch.autograd.grad(out, x, create_graph=True)

    def test_masked_entities_holding_nan_change_no_real_output(cell_calls):
        torch.manual_seed(0)
        layer = SwarmLayer(2, 5, 3, 3)
        x, _ = random_sets(3, 6, 2)
        mask = torch.arange(6).expand(3, 6) < torch.tensor([[6], [4], [1]])
        with triton_cell():
            assert_masked_no_influence(layer, x, mask)
        assert cell_calls

    def test_a_column_major_mask_gives_the_same_outputs_and_gradients(cell_calls):
        """The kernel reads the pooling weights row by row: a mask of another layout must not reorder them."""
        torch.manual_seed(0)
        layer = SwarmLayer(2, 3, 2, 2)
        x, _ = random_sets(3, 4, 2)
        mask = torch.arange(4).expand(3, 4) < torch.tensor([[4], [2], [1]])
        column_major = mask.t().contiguous().t()
        run = in_triton(layer)
        got, want = outputs_and_grads(layer, x, column_major, run), outputs_and_grads(layer, x, mask, run)
        assert cell_calls
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w)

    def test_the_backward_can_run_twice():
        torch.manual_seed(0)
        layer = SwarmLayer(2, 5, 2, 3, pooling="causal").double()
        x = torch.randn(2, 6, 2, dtype=torch.float64, requires_grad=True)
        with triton_cell():
            out = layer(x).square().sum()
        first = torch.autograd.grad(out, [x, *layer.parameters()], retain_graph=True)
        second = torch.autograd.grad(out, [x, *layer.parameters()])
        for a, b in zip(first, second, strict=True):
            torch.testing.assert_close(a, b, atol=0, rtol=0)

    def test_only_the_states_gradients_that_are_used_flow():
        torch.manual_seed(0)
        layer = SwarmLayer(2, 5, 2, 3).double()
        x, mask = random_sets(2, 6, 2, dtype=torch.float64)
        for which in (0, 1):  # the loss uses only h, or only c
            grads = []
            for run in (lambda v: reference_swarm_states(layer, v, mask), lambda v: layer.states(v, mask)):
                xg = x.clone().requires_grad_()
                with triton_cell():
                    run(xg)[which].sum().backward()
                grads.append(xg.grad)
            torch.testing.assert_close(grads[0], grads[1], atol=1e-12, rtol=1e-10)

    def test_the_switch_is_off_by_default_restored_and_skips_what_it_does_not_cover(cell_calls):
        torch.manual_seed(0)
        layer = SwarmLayer(2, 4, 2, 2, dropout=0.5)
        x = torch.randn(2, 3, 2)
        assert not swarm.triton_cell_enabled()
        layer.eval()
        layer(x)
        assert cell_calls == []
        with triton_cell():
            assert swarm.triton_cell_enabled()
            with triton_cell(False):
                layer(x)
                assert cell_calls == [] and not swarm.triton_cell_enabled()
            layer(x)
            assert len(cell_calls) == 2
            layer.train()  # dropout between iterations: the fused pooling would pool the undropped h
            layer(x)
            assert len(cell_calls) == 2
        assert not swarm.triton_cell_enabled()
        with pytest.raises(RuntimeError), triton_cell():
            raise RuntimeError
        assert not swarm.triton_cell_enabled()
