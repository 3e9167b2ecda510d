"""benchmarks/gpu/profile_step.py, the per-task profile of a training step that a GPU job records: on the CPU
in smoke size it profiles every task and prints the markdown table, its slices add up to the profiled step,
and the kernel names a GPU profile shows fall into the slices they belong to."""

import json
import runpy
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu" / "profile_step.py"


def _script() -> dict:
    """The script's names (run as a module, not as __main__; the folder it adds to sys.path is taken out)."""
    path = list(sys.path)
    try:
        return runpy.run_path(str(SCRIPT), run_name="profile_step")
    finally:
        sys.path[:] = path


def test_a_smoke_profile_prints_one_column_per_task_and_slices_that_add_up(tiny_h5, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SWARMCTL_NO_EXT", "1")  # the cell's PyTorch code: its pointwise work shows as operators
    out, table = tmp_path / "profile.json", tmp_path / "profile.md"
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), str(tiny_h5), "--smoke", "--device", "cpu", "--json", str(out),
                                      "--markdown", str(table)])
    with pytest.raises(SystemExit) as ended:
        runpy.run_path(str(SCRIPT), run_name="__main__")
    assert ended.value.code == 0
    printed = capsys.readouterr().out
    ps = _script()
    doc = json.loads(out.read_text())
    assert list(doc["parts"]) == ["mog", "image", "clustering"] and doc["device"]["name"] == "cpu"
    for part, r in doc["parts"].items():
        ms = r["slices_ms"]
        assert list(ms) == list(ps['SLICES']) and all(v >= 0 for v in ms.values()), (part, ms)
        assert sum(ms.values()) == pytest.approx(r["profiled_step_ms"], rel=1e-6), part  # the gaps fill the rest
        assert r["step_ms"] > 0 and r["steps"] >= 1
        for busy in ("matrix products", "cell pointwise", "pooling", "optimizer"):  # every SWARM step has each
            assert ms[busy] > 0, (part, busy, ms)
        assert (ms["hungarian"] > 0) == (part == "clustering"), (part, ms)  # only clustering matches
    assert "| slice | mog | image | clustering |" in printed
    for name in ps['SLICES']:
        assert f"| {name} | " in printed, name
    assert "| slice | mog | image | clustering |" in table.read_text()


@pytest.mark.parametrize("kernel, names, want", [
    ("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_cublas", ["aten::mm", "aten::addmm",
     "swarmctl/layers/swarm.py(119): step"], "matrix products"),
    ("ampere_sgemm_128x64_nn", ["aten::mm", "AddmmBackward0", "autograd::engine::evaluate_function: AddmmBackward0",
                                "aten::addmm", "swarmctl/layers/_triton.py(240): swarm_states"], "matrix products"),
    ("_cell_forward", ["TritonCell", "swarmctl/layers/_triton.py(231): swarm_states"], "cell pointwise"),
    ("_cell_backward", ["TritonCellBackward", "autograd::engine::evaluate_function: TritonCellBackward"],
     "cell pointwise"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::sigmoid_kernel_cuda>",
     ["aten::sigmoid_", "swarmctl/layers/_fused.py(30): forward"], "cell pointwise"),
    ("cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4>",
     ["aten::bmm", "swarmctl/layers/pooling.py(40): masked_mean"], "pooling"),
    ("void at::native::tensor_kernel_scan_innermost_dim<float>",
     ["aten::cumsum", "swarmctl/layers/pooling.py(52): causal_mean"], "pooling"),
    ("void at::native::reduce_kernel<512, 1>", ["aten::min", "swarmctl/tasks/hungarian.py(60): device_assignments"],
     "hungarian"),
    ("void at::native::multi_tensor_apply_kernel<...>", ["aten::_foreach_add_", "Optimizer.step#Adam.step"],
     "optimizer"),
    ("void at::native::reduce_kernel<512, 1>", ["aten::sum", "swarmctl/tasks/mog.py(80): mog_loss"], "other"),
])
def test_kernel_names_fall_into_their_slice(kernel, names, want):
    assert _script()['slice_of'](kernel, names) == want
