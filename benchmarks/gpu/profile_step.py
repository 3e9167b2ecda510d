"""Where a training step's time goes, per task, measured with torch.profiler: a markdown table of slices.

For each task (swarm-mog 768-20-1, swarm-image 256-10-1 on MNIST-sized batches, SWARM clustering 192-10-1 on
the seed-0 file DATA; tiny models with --smoke) the script builds the step as step_timing.py's eager mode
does (swarmctl.training.steps.TrainStep, TF32 on CUDA), runs warm-up steps, then profiles a few steps and
puts every piece of device work into one slice:

    matrix products   cuBLAS/GEMM kernels (CPU: aten::mm, addmm, bmm, ...) outside the other slices
    cell pointwise    the SWARM cell's element-wise work (the LSTM update; the Triton cell's kernels, which
                      also pool, with --triton)
    pooling           what layers/pooling.py launches (the masked mean's batched product, the causal cumsum)
    hungarian         the matched loss's matching (tasks/hungarian.py), forward and backward
    optimizer         Adam's update and zeroing the gradients
    other             everything else (the loss's element-wise work, the output map's concatenation, copies)
    host gaps         the profiled wall time not covered by device work: the host launching kernels or
                      waiting (on the CPU: Python and dispatch overhead outside the operators, except the
                      matching's own Python work, scipy's assignment included, which is counted as hungarian)

A piece of work belongs to the first slice (in the order optimizer, hungarian, pooling, matrix products,
cell pointwise) that its launching operator, the Python functions above it, or (backward) the forward
operator it differentiates names. On CUDA the work is the kernels' device time, on the CPU the operators'
own time. The profiler adds host overhead: "step" is also measured without it.

    PYTHONPATH=. python3 benchmarks/gpu/profile_step.py DATA.h5 [--only PART]... [--device cuda] [--smoke]
                                                         [--triton] [--amp] [--json PATH] [--markdown PATH]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from swarmctl.layers.swarm import triton_cell
from swarmctl.tasks.clustering import clustering_loss
from swarmctl.tasks.image import image_loss
from swarmctl.tasks.mog import mog_loss
from swarmctl.training.device import use_tf32

sys.path.insert(0, str(Path(__file__).resolve().parent))
import step_timing as st  # noqa: E402  (the workloads and the timing, as step_timing.py measures them)

SLICES = ("matrix products", "cell pointwise", "pooling", "hungarian", "optimizer", "other", "host gaps")
MATMUL_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm", "aten::matmul",
              "aten::linear", "aten::_addmm_activation"}
GEMM_KERNEL = re.compile(r"gemm|gemv|xmma|cutlass|cublas|Kernel2|dot_kernel|splitKreduce", re.IGNORECASE)
CELL_FILES = ("layers/swarm.py", "layers/_fused.py", "layers/_triton.py")
CELL_NAMES = ("FusedLSTMPointwise", "TritonCell", "FusedIterations", "_cell_forward", "_cell_backward")


def slice_of(work: str, names: list[str]) -> str:
    """The slice of one piece of device work: ``work`` is its kernel (CUDA) or operator (CPU) name, ``names``
    the operators and Python functions that launched it, innermost first (for backward work, followed by
    those of the forward operator it differentiates)."""
    if any(n.startswith("Optimizer.") for n in names):
        return "optimizer"
    if any("tasks/hungarian.py" in n for n in names):
        return "hungarian"
    if any("layers/pooling.py" in n for n in names):
        return "pooling"
    if GEMM_KERNEL.search(work) or work in MATMUL_OPS:
        return "matrix products"
    if any(c in work for c in CELL_NAMES) or any(c in n for n in names for c in (*CELL_FILES, *CELL_NAMES)):
        return "cell pointwise"
    return "other"


def _chain(evt) -> list[str]:
    names = []
    while evt is not None:
        names.append(evt.name)
        evt = evt.cpu_parent
    return names


def _backward_function(evt):
    """The autograd node (a backward function) whose execution ``evt`` is part of, or None."""
    while evt is not None:
        if evt.scope == 1:  # BACKWARD_FUNCTION
            return evt
        evt = evt.cpu_parent
    return None


def slices_of(events, cuda: bool) -> dict[str, float]:
    """Microseconds of device work per slice (host gaps left out) in the profiler's ``events``."""
    cpu = [e for e in events if e.device_type == DeviceType.CPU]
    ops = [e for e in cpu if e.activity_type != "python_function"]
    forward = {}  # (sequence number, thread) of a forward operator -> its chain: what its backward belongs to
    for e in ops:
        if e.sequence_nr >= 0 and _backward_function(e) is None:
            forward.setdefault((e.sequence_nr, e.thread), _chain(e))
    out = dict.fromkeys(SLICES[:-1], 0.0)
    for e in ops:
        names = _chain(e)
        node = _backward_function(e)
        if node is not None:
            names += forward.get((node.sequence_nr, node.fwd_thread), [])
        if cuda:
            for k in e.kernels:
                out[slice_of(k.name, names)] += k.duration
        elif not e.name.startswith("ProfilerStep"):
            out[slice_of(e.name, names)] += e.self_cpu_time_total
    if not cuda:  # on the CPU the matching itself (scipy) is Python work, not an operator
        for e in cpu:
            if e.activity_type == "python_function" and any("tasks/hungarian.py" in n for n in _chain(e)):
                out["hungarian"] += e.self_cpu_time_total
    return out


def profile_part(part: str, step, batches: list, warm: int, device: torch.device) -> dict[str, float]:
    """Milliseconds per step of every slice over ``batches[warm:]`` (after ``batches[:warm]`` unprofiled), and
    the step's time with and without the profiler."""
    endless = st.Budget(None)
    st.timed(step, batches[:warm], device, endless)
    steps = batches[warm:]
    plain = st.timed(step, steps, device, endless) / len(steps)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities, with_stack=True) as prof:  # with_stack: the Python functions as events
        wall = st.timed(step, steps, device, endless) / len(steps)
    work = slices_of(prof.events(), device.type == "cuda")
    ms = {k: v / 1e3 / len(steps) for k, v in work.items()}
    ms["host gaps"] = max(wall * 1e3 - sum(ms.values()), 0.0)
    return {"slices_ms": ms, "profiled_step_ms": wall * 1e3, "step_ms": plain * 1e3, "steps": len(steps)}


def workloads(a: argparse.Namespace, device: torch.device):
    """(part, model, loss, lr, batches, warm-up steps) of every part asked for."""
    s = st.Sizes(a.smoke)
    for part in a.only or st.PARTS:
        if part == "mog":
            H, T = s.mog_HT
            batches = s.mog_batches(device)[:s.mog_warm + 10]  # every N bucket seen before the profiled steps
            yield part, st.fresh_model("swarm-mog", H, T, device), mog_loss, 0.01, batches, s.mog_warm
        elif part == "image":
            H, T = s.image_HT
            yield part, st.fresh_model("swarm-image", H, T, device, dataset="mnist"), image_loss, 1e-3, \
                s.image_batches(device), s.image_warm
        else:
            H, T = s.clustering_HT
            train = s.clustering_batches(st.wait_for(a.data, st.Budget(None)), device)[0][False]
            yield part, st.fresh_model("swarm", H, T, device), clustering_loss, 0.01, train[:10], min(5, len(train) - 1)


def markdown(results: dict[str, dict]) -> str:
    """One row per slice, one column per task: ms per step and its share of the profiled step."""
    parts = list(results)
    lines = ["| slice | " + " | ".join(parts) + " |", "|---|" + "---|" * len(parts)]
    for name in SLICES:
        cells = []
        for p in parts:
            ms, total = results[p]["slices_ms"][name], results[p]["profiled_step_ms"]
            cells.append(f"{ms:.3f} ms ({100 * ms / total:.0f}%)" if total > 0 else f"{ms:.3f} ms")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("| step, profiled | " + " | ".join(f"{results[p]['profiled_step_ms']:.3f} ms" for p in parts) + " |")
    lines.append("| step, without the profiler | " + " | ".join(f"{results[p]['step_ms']:.3f} ms" for p in parts)
                 + " |")
    return "\n".join(lines)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", nargs="?", help="the seed-0 clustering file (needed by the clustering part)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--only", choices=st.PARTS, action="append", help="profile only this part (repeatable)")
    ap.add_argument("--smoke", action="store_true", help="tiny models: seconds on a CPU")
    ap.add_argument("--triton", action="store_true", help="with the Triton cell (swarmctl.layers.swarm.triton_cell)")
    ap.add_argument("--amp", action="store_true", help="bf16 autocast")
    ap.add_argument("--json", type=Path, metavar="PATH", help="write the numbers here")
    ap.add_argument("--markdown", type=Path, metavar="PATH", help="write the table here")
    a = ap.parse_args(argv)
    if "clustering" in (a.only or st.PARTS) and not a.data:
        ap.error("the clustering part needs DATA (or choose parts with --only)")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    device = torch.device(a.device)
    info = st.device_info(device)
    mode = "eager" + (" + Triton cell" if a.triton else "") + (" + bf16 autocast" if a.amp else "")
    print(f"device: {info['name']}; torch {info['torch']}; {mode}; TF32 {'on' if device.type == 'cuda' else 'n/a'}",
          flush=True)
    use_tf32(True)
    results = {}
    with triton_cell(a.triton):
        for part, model, loss, lr, batches, warm in workloads(a, device):
            step = st.adam_step(model, lr, loss, device, amp=a.amp)
            results[part] = profile_part(part, step, batches, warm, device)
            print(f"{part}: {results[part]['step_ms']:.3f} ms/step without the profiler", flush=True)
    table = markdown(results)
    print(f"\nms per step ({mode}; {info['name']}, torch {info['torch']}):\n\n{table}", flush=True)
    if a.json:
        st.write_json_atomic(a.json, {"device": info, "mode": mode, "smoke": a.smoke, "parts": results})
    if a.markdown:
        a.markdown.write_text(f"{mode}; {info['name']}, torch {info['torch']}\n\n{table}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
