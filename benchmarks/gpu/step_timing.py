"""Step timings of each training mode on the device; the JSON is rewritten atomically after every mode.

Seconds per training epoch and per step, measured with swarmctl's own trainer pieces (the training
loop's step, swarmctl.training.steps.TrainStep, in each mode), without a whole-model torch.compile
anywhere in the timing modes; the compile cost is measured apart by --compile-probe.

Timing modes (the default invocation), in this order, each one a unit of the JSON:

(1) swarm-mog (768-20-1): ms per step of 10 tasks drawn on the device (N padded to the sampler's buckets),
    120 warm-up steps then 40 timed: eager (TF32, as `swarmctl train` on CUDA), bf16 autocast, CUDA graphs
    (one per N bucket), graphs + bf16, fp32 (eager, strict float32: what the old script measured as eager,
    its TF32 being off); then with the Triton cell (swarmctl.layers.swarm.triton_cell): triton (eager,
    TF32), triton+bf16, triton+graphs, triton+graphs+bf16; then the loss of one set of weights (160 eager
    steps trained) on 500 other tasks in fp32, TF32 and bf16, and TF32 and bf16 with the Triton cell.
(2) swarm-image (256-10-1): seconds per MNIST epoch (1,200 steps of 50 images), extrapolated from 8 timed
    steps after 4 warm-up steps: eager (TF32), bf16 autocast, CUDA graphs, graphs + bf16, fp32; the loss
    of the same weights in float32 and bf16; then with the Triton cell: triton, triton+bf16,
    triton+graphs+bf16.
(3) SWARM (192-10-1) on the seed-0 data file DATA (waited for: the session generates it meanwhile): one
    epoch = the bucketed batches of 100 tasks, Adam, Hungarian-matched loss; the second epoch is timed:
    TF32, strict float32, bf16 autocast, TF32 + CUDA graphs, then with the Triton cell: tf32+triton,
    bf16+triton, tf32+triton+graphs; then the validation loss of one set of weights (3 epochs trained)
    under fp32, TF32 and bf16, and TF32 and bf16 with the Triton cell (tf32+triton, bf16+triton).

Modes that need CUDA (graphs, TF32, the Triton cell) are not measured on the CPU: they are listed under
"not_measured".
A mode that raises is listed under "failed"; the others still run.

The JSON (--json PATH) is rewritten atomically (a temporary file beside it, fsync, rename) after every
mode, so a run killed at any moment leaves either no file or a valid one holding every finished mode:
    {"mog_ms_per_step": {MODE: ms}, "image_s_per_epoch": {MODE: s}, "clustering_s_per_epoch": {MODE: s},
     "warmup_s": {"PART/MODE": s}, "loss": {"mog_same_weights": {...}, "image_same_weights": {...},
     "clustering_val_same_weights": {...}},
     "not_measured": {"PART/MODE": why}, "failed": {"PART/MODE" or PART: error},
     "device": {"name", "type", "torch"}, "smoke": bool, "budget_s": s or null, "elapsed_s": s,
     "complete": bool, "stopped": "SIGTERM" (only when stopped)}
Keys of PATH that this invocation does not own (e.g. "compile_probe" from a probe run) are kept.
With --budget SECONDS no mode is started that the time left cannot hold (estimated from the modes
measured so far), and a mode still running at the end of the budget is stopped and listed as not measured.
SIGTERM: the JSON is written once more ("stopped") and the script exits with 143.

The compile probe (--compile-probe TASK, a separate invocation meant for its own subprocess timeout):
from a cold compile cache (a fresh inductor/triton cache folder unless --compile-cache names one) it
compiles as `swarmctl train --step compile` does (SWARM models: model.compile_steps(); others:
torch.compile(model, dynamic=True)), then times the steps as the timing mode eager does (with --amp: the
bf16 autocast step, as `swarmctl train --step amp+compile`, timed as the bf16 modes are). It writes
    {"compile_probe": {"task", "amp", "device", "torch", "cache_dir", "cold_cache", "compile_s", "warmup_s",
                       "steady_ms_per_step" (mog, image) / "steady_s_per_epoch" (image, clustering),
                       "finished": bool, "stopped"/"failed" (when so)}}
after each number, compile_s first (seconds from before the compile to the end of the first step;
the first step's one-time CUDA set-up, which an eager run pays too, is in it). warmup_s: the steps after
it that bring the other batch shapes (recompiles, where any); then the steady steps as in the timing
modes. --budget bounds the steady part only (an unfinished probe says "stopped": "budget"); the compile
itself is bounded by the caller's subprocess timeout.

    PYTHONPATH=. python3 benchmarks/gpu/step_timing.py DATA.h5 [--json PATH] [--budget S] [--only PART]...
                                                       [--device cuda] [--smoke]
    PYTHONPATH=. python3 benchmarks/gpu/step_timing.py [DATA.h5] --compile-probe {mog,image,clustering} [--amp]
                                                       [--json PATH] [--budget S] [--compile-cache DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from swarmctl import ModelConfig, create_model
from swarmctl.data.dataset import bucketed_batches
from swarmctl.data.hdf5 import read_dataset
from swarmctl.data.images import ImageBatch
from swarmctl.data.mog import FreshBatches, MogParams
from swarmctl.layers.swarm import triton_cell
from swarmctl.tasks.clustering import GRAPH_N_BUCKET, clustering_loss
from swarmctl.tasks.image import image_loss
from swarmctl.tasks.mog import mog_loss
from swarmctl.training.device import use_tf32
from swarmctl.training.steps import TrainStep

PARTS = ("mog", "image", "clustering")  # MoG and images first: the clustering data is generated meanwhile
RESULT_KEY = {"mog": "mog_ms_per_step", "image": "image_s_per_epoch", "clustering": "clustering_s_per_epoch"}
TIMING_KEYS = (*RESULT_KEY.values(), "warmup_s", "loss", "not_measured", "failed", "device", "smoke", "budget_s",
               "elapsed_s", "complete", "stopped")
DATA_WAIT_S = 150.0  # at most this long for the clustering data file to appear
WRITE_PAUSE_ENV = "STEP_TIMING_WRITE_PAUSE"  # tests: seconds between writing the temporary file and its rename


class OutOfBudget(Exception):
    """The --budget ran out inside a mode."""


class Stopped(BaseException):
    """SIGTERM (or SIGINT): not an Exception, so no mode guard swallows it."""


# ---------------------------------------------------------------------------------------------- the JSON


def write_json_atomic(path: Path, data: dict) -> None:
    """``path`` holds either its old content or all of ``data``, whatever kills the process when: the
    bytes go to a hidden temporary file beside it (``.NAME.PID.*.tmp``, never read as PATH), fsynced, then
    renamed over it."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            os.fchmod(fh.fileno(), 0o644)
            fh.write(json.dumps(data, indent=2) + "\n")
            fh.flush()
            pause = float(os.environ.get(WRITE_PAUSE_ENV, "0") or 0)
            if pause > 0:
                time.sleep(pause)
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # the rename itself survives a crash of the machine
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def remove_orphan_temps(path: Path) -> list[Path]:
    """Remove the temporary files that killed writers of ``path`` left (their PID no longer runs)."""
    path = Path(path)
    removed = []
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        try:
            pid = int(tmp.name[len(path.name) + 2:].split(".")[0])
        except ValueError:
            continue
        if pid == os.getpid() or _alive(pid):
            continue
        with contextlib.suppress(OSError):
            tmp.unlink()
            removed.append(tmp)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGTERM/SIGINT wait until the block ends (a result and its write are never torn apart)."""
    sigs = {signal.SIGTERM, signal.SIGINT}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


class Report:
    """The JSON document: ``data`` (the keys this invocation owns) on top of the keys of an existing PATH
    that it does not own; written atomically by :meth:`commit`."""

    def __init__(self, path: Path | None, owned: tuple[str, ...]) -> None:
        self.path = Path(path) if path else None
        self.data: dict[str, Any] = {}
        self.kept: dict[str, Any] = {}
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            remove_orphan_temps(self.path)
            with contextlib.suppress(OSError, ValueError):
                old = json.loads(self.path.read_text())
                if isinstance(old, dict):
                    self.kept = {k: v for k, v in old.items() if k not in owned}

    def commit(self, update: Callable[[dict], None] | None = None) -> None:
        """Apply ``update`` to the data and write it, with SIGTERM held off in between."""
        with signals_held():
            if update is not None:
                update(self.data)
            if self.path is not None:
                write_json_atomic(self.path, {**self.kept, **self.data})


# ------------------------------------------------------------------------------------------ time budget


class Budget:
    """Seconds left of --budget (infinite without), and what each part's units cost so far."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.start = time.monotonic()
        self.end = math.inf if seconds is None else self.start + seconds
        self.costs: dict[str, list[float]] = {}

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def left(self) -> float:
        return self.end - time.monotonic()

    def check(self) -> None:
        if time.monotonic() > self.end:
            raise OutOfBudget

    def estimate(self, part: str) -> float:
        """A new unit of ``part`` costs about as much as the dearest one measured in it (0: none yet)."""
        return max(self.costs.get(part) or [0.0])


# ------------------------------------------------------------------------------------------ measuring


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(step: Callable[[Any], Any], batches, device: torch.device, budget: Budget) -> float:
    """Seconds for ``step`` over ``batches`` (device work included); OutOfBudget past the budget."""
    sync(device)
    t = time.perf_counter()
    for batch in batches:
        budget.check()
        step(batch)
    sync(device)
    return time.perf_counter() - t


def adam_step(model, lr: float, loss_fn, device, amp: bool = False, graphs: bool = False) -> TrainStep:
    return TrainStep(model, torch.optim.Adam(model.parameters(), lr=lr), loss_fn, device, amp=amp, graphs=graphs)


def fresh_model(name: str, H: int, T: int, device, **extra):
    torch.manual_seed(0)
    return create_model(ModelConfig(name=name, dim_hidden=H, n_iter=T, **extra)).to(device)


def wait_for(path: str | None, budget: Budget) -> Path:
    if not path:
        raise FileNotFoundError("no clustering data file was named (the positional DATA)")
    until = time.monotonic() + min(DATA_WAIT_S, max(budget.left(), 0.0))
    while not os.path.isfile(path) and time.monotonic() < until:  # written atomically by gen-data
        time.sleep(0.5)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} did not appear")
    return Path(path)


class Sizes:
    """The workloads: the paper's models at full size, tiny ones with --smoke."""

    def __init__(self, smoke: bool) -> None:
        self.smoke = smoke
        self.mog_HT = (8, 2) if smoke else (768, 20)
        self.mog_steps, self.mog_warm = (8, 4) if smoke else (160, 120)  # 120: every N bucket seen (graphs: captured)
        self.mog_val = 2 if smoke else 50  # tasks / 10 for the same-weights losses
        self.image_HT = (8, 2) if smoke else (256, 10)
        self.image_batch, self.image_steps, self.image_warm = (4, 3, 1) if smoke else (50, 12, 4)
        self.clustering_HT = (8, 2) if smoke else (192, 10)
        self.loss_epochs = 1 if smoke else 3

    def mog_batches(self, device):
        return list(FreshBatches(self.mog_steps, 10, 0, 0, 0, MogParams()).on(device))  # drawn on the device

    def image_batches(self, device):
        gen = torch.Generator().manual_seed(0)
        B = self.image_batch
        return [ImageBatch(torch.randint(0, 256, (B, 1, 28, 28), generator=gen),
                           torch.randint(0, 10, (B,), generator=gen)).to(device) for _ in range(self.image_steps)]

    def clustering_batches(self, data: Path, device):
        """The training batches as `swarmctl train` cuts them (padded to multiples of GRAPH_N_BUCKET points
        with --cuda-graphs, so 10 shapes instead of one per batch), and the validation batches."""
        splits, info = read_dataset(data)
        train = [b.to(device) for b in bucketed_batches(splits["train"], 100)]
        padded = [b.to(device) for b in bucketed_batches(splits["train"], 100, pad_to=GRAPH_N_BUCKET)]
        val = [b.to(device) for b in bucketed_batches(splits["val"], 100)]
        return {False: train, True: padded}, val, info


class Timing:
    """The timing modes, each measured, recorded and written as one unit."""

    def __init__(self, a: argparse.Namespace, device: torch.device, report: Report, budget: Budget) -> None:
        self.a, self.device, self.report, self.budget = a, device, report, budget
        self.sizes = Sizes(a.smoke)
        self.cuda = device.type == "cuda"

    def unit(self, part: str, mode: str, measure: Callable[[], tuple[Callable[[dict], None], str]],
             graphs: bool = False, tf32: bool = False, triton: bool = False) -> None:
        """Measure one mode unless this device has no such mode (``graphs``: CUDA graphs; ``tf32``: a mode
        that differs from plain float32 by TF32 alone; ``triton``: the Triton cell, measured inside
        ``triton_cell()``) or the budget cannot hold it; ``measure()`` returns the update of the JSON (applied
        and written at once) and the line to print."""
        key = f"{part}/{mode}"
        if graphs and not self.cuda:  # TrainStep would run it eagerly: not a graphs number
            return self._record("not_measured", key, f"needs CUDA graphs (device {self.device.type})")
        if tf32 and not self.cuda:
            return self._record("not_measured", key, f"TF32 exists on CUDA only (device {self.device.type})")
        if triton and not self.cuda:  # the layer would keep its own path: not a Triton number
            return self._record("not_measured", key, f"the Triton cell runs on CUDA (device {self.device.type})")
        need, left = self.budget.estimate(part), self.budget.left()
        if need > left:
            return self._record("not_measured", key, f"budget: about {need:.1f} s needed, {max(left, 0):.1f} s left")
        t = time.monotonic()
        try:
            with triton_cell(triton):  # a Triton that cannot be imported fails this mode alone
                update, line = measure()
        except OutOfBudget:
            self._record("not_measured", key, f"budget: ran out {time.monotonic() - t:.1f} s into the mode")
        except Exception as exc:
            traceback.print_exc()
            self._record("failed", key, f"{type(exc).__name__}: {str(exc)[:300]}")
        else:
            self.report.commit(lambda d: (update(d), d.__setitem__("elapsed_s", round(self.budget.elapsed(), 3))))
            print(line, flush=True)  # after the write: what is printed is in the JSON
        finally:
            self.budget.costs.setdefault(part, []).append(time.monotonic() - t)
            if self.cuda:
                torch.cuda.empty_cache()

    def _record(self, what: str, key: str, why: str) -> None:
        print(f"{key}: {what.replace('_', ' ')}: {why}", flush=True)
        self.report.commit(lambda d: d[what].__setitem__(key, why))

    def _result(self, part: str, mode: str, value: float, warmup: float | None):
        key = f"{part}/{mode}"

        def update(d: dict) -> None:
            d[RESULT_KEY[part]][mode] = value
            if warmup is not None:
                d["warmup_s"][key] = warmup

        return update

    # ---- (1) swarm-mog

    def mog(self) -> None:
        s = self.sizes
        batches = s.mog_batches(self.device)
        modes = (("eager", True, False, False), ("bf16-autocast", True, True, False), ("graphs", True, False, True),
                 ("graphs+bf16", True, True, True), ("fp32", False, False, False), ("triton", True, False, False),
                 ("triton+bf16", True, True, False), ("triton+graphs", True, False, True),
                 ("triton+graphs+bf16", True, True, True))
        for mode, tf32, amp, graphs in modes:
            self.unit("mog", mode, lambda m=mode, t=tf32, p=amp, g=graphs: self._mog(batches, m, t, p, g),
                      graphs=graphs, tf32=mode == "fp32", triton="triton" in mode)  # off CUDA fp32 is eager
        self.unit("mog", "loss", lambda: self._mog_loss(batches))

    def _mog(self, batches, mode, tf32, amp, graphs):
        s = self.sizes
        H, T = s.mog_HT
        use_tf32(tf32)
        model = fresh_model("swarm-mog", H, T, self.device)
        step = adam_step(model, 0.01, mog_loss, self.device, amp=amp, graphs=graphs)
        warm = timed(step, batches[:s.mog_warm], self.device, self.budget)  # every bucket seen (graphs captured)
        per_step = timed(step, batches[s.mog_warm:], self.device, self.budget) / (len(batches) - s.mog_warm)
        ms = per_step * 1e3
        return (self._result("mog", mode, ms, warm),
                f"mog/{mode}: {ms:.3f} ms/step, swarm-mog ({H}-{T}-1), 10 tasks per step (warm-up {warm:.2f} s; "
                f"{per_step * 50_000 / 60:.1f} min for the paper's 50,000 steps)")

    def _mog_loss(self, batches):
        """The loss of one set of weights (the eager step's, trained on the timing's steps) on tasks drawn apart
        from the training ones, in each numeric: what a bf16 MoG mode must keep within AMP_RTOL of float32.
        A Triton numeric that fails is listed under "failed" alone."""
        H, T = self.sizes.mog_HT
        use_tf32(True)
        model = fresh_model("swarm-mog", H, T, self.device)
        timed(adam_step(model, 0.01, mog_loss, self.device), batches, self.device, self.budget)
        val = list(FreshBatches(self.sizes.mog_val, 10, 0, 1, 0, MogParams()).on(self.device))
        numerics = [("fp32", False, False, False), ("bf16-autocast", True, True, False)]
        if self.cuda:
            numerics[1:1] = [("tf32", True, False, False)]
            numerics += [("tf32+triton", True, False, True), ("bf16+triton", True, True, True)]
        losses, failed = {}, {}
        for name, tf32, amp, triton in numerics:
            use_tf32(tf32)
            try:
                with triton_cell(triton):
                    losses[name] = mean_loss(model, val, mog_loss, amp, self.device)
            except Exception as exc:
                if not triton:
                    raise
                traceback.print_exc()
                failed[f"mog/loss/{name}"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        use_tf32(True)

        def update(d: dict) -> None:
            d["loss"]["mog_same_weights"] = losses
            d["failed"].update(failed)

        return update, (f"loss/mog_same_weights ({len(batches)} steps trained, {len(val) * 10} tasks), nats per "
                        "point: " + ", ".join(f"{k} {v:.5f}" for k, v in losses.items()))

    # ---- (2) swarm-image

    def image(self) -> None:
        batches = self.sizes.image_batches(self.device)
        modes = (("eager", True, False, False), ("bf16-autocast", True, True, False), ("graphs", True, False, True),
                 ("graphs+bf16", True, True, True), ("fp32", False, False, False), ("triton", True, False, False),
                 ("triton+bf16", True, True, False), ("triton+graphs+bf16", True, True, True))
        for mode, tf32, amp, graphs in modes:
            self.unit("image", mode, lambda m=mode, t=tf32, p=amp, g=graphs: self._image(batches, m, t, p, g),
                      graphs=graphs, tf32=mode == "fp32", triton="triton" in mode)  # off CUDA fp32 is eager

    def _image(self, batches, mode, tf32, amp, graphs):
        s = self.sizes
        H, T = s.image_HT
        use_tf32(tf32)
        model = fresh_model("swarm-image", H, T, self.device, dataset="mnist")
        step = adam_step(model, 1e-3, image_loss, self.device, amp=amp, graphs=graphs)
        warm = timed(step, batches[:s.image_warm], self.device, self.budget)
        per_step = timed(step, batches[s.image_warm:], self.device, self.budget) / len(batches[s.image_warm:])
        update = self._result("image", mode, per_step * 1200, warm)
        line = (f"image/{mode}: {per_step * 1200:.2f} s per MNIST epoch (1,200 steps), {per_step * 1e3:.2f} ms/step, "
                f"swarm-image ({H}-{T}-1), batch {s.image_batch} (warm-up {warm:.2f} s)")
        if mode != "eager":
            return update, line
        with torch.no_grad():  # the loss of these weights in float32 and in bf16
            use_tf32(False)
            full = image_loss(model, batches[0]).mean().item()
            with torch.autocast(self.device.type, dtype=torch.bfloat16):
                half = image_loss(model, batches[0]).mean().item()
        use_tf32(True)

        def both(d: dict) -> None:
            update(d)
            d["loss"]["image_same_weights"] = {"fp32": full, "bf16-autocast": half}

        return both, (f"{line}\nloss/image_same_weights: fp32 {full:.5f}, bf16 autocast {half:.5f} nats "
                      f"({abs(half - full) / math.log(2):.4f} bits/dim apart)")

    # ---- (3) SWARM clustering

    def clustering(self) -> None:
        data = wait_for(self.a.data, self.budget)
        batches, val, info = self.sizes.clustering_batches(data, self.device)
        train = batches[False]
        H, T = self.sizes.clustering_HT
        print(f"clustering: SWARM ({H}-{T}-1), {len(train)} batches of <= 100 tasks per epoch; data checksum "
              f"{info['checksum'][:16]}", flush=True)
        torch.manual_seed(0)
        ref = create_model(ModelConfig(name="swarm", dim_hidden=H, n_iter=T))
        modes = (("tf32", True, False, False), ("fp32", False, False, False), ("bf16-autocast", True, True, False),
                 ("tf32+graphs", True, False, True), ("tf32+triton", True, False, False),
                 ("bf16+triton", True, True, False), ("tf32+triton+graphs", True, False, True))
        for mode, tf32, amp, graphs in modes:
            self.unit("clustering", mode,
                      lambda m=mode, t=tf32, p=amp, g=graphs: self._clustering(ref, batches[g], m, t, p, g),
                      graphs=graphs, tf32=mode.startswith("tf32"), triton="triton" in mode)
        self.unit("clustering", "loss", lambda: self._clustering_loss(ref, train, val))

    def _clustering(self, ref, train, mode, tf32, amp, graphs):
        use_tf32(tf32)
        model = self._copy(ref)
        step = adam_step(model, 0.01, clustering_loss, self.device, amp, graphs)
        first = timed(step, train, self.device, self.budget)  # warm-up (graph capture)
        second = timed(step, train, self.device, self.budget)
        return (self._result("clustering", mode, second, first),
                f"clustering/{mode}: {second:.3f} s per epoch (warm-up: the first epoch, {first:.2f} s)")

    def _copy(self, ref):
        H, T = self.sizes.clustering_HT
        model = create_model(ModelConfig(name="swarm", dim_hidden=H, n_iter=T)).to(self.device)
        model.load_state_dict(ref.state_dict())
        return model

    def _clustering_loss(self, ref, train, val):
        use_tf32(True)
        model = self._copy(ref)
        step = adam_step(model, 0.01, clustering_loss, self.device)
        for _ in range(self.sizes.loss_epochs):
            timed(step, train, self.device, self.budget)
        numerics = (("fp32", False, False), ("tf32", True, False), ("bf16-autocast", True, True))
        losses = {}
        for name, tf32, amp in numerics if self.cuda else (numerics[0], numerics[2]):
            use_tf32(tf32)
            losses[name] = mean_loss(model, val, clustering_loss, amp, self.device)
        for name, amp in (("tf32+triton", False), ("bf16+triton", True)) if self.cuda else ():
            use_tf32(True)
            with triton_cell():  # the same weights through the Triton cell
                losses[name] = mean_loss(model, val, clustering_loss, amp, self.device)
        use_tf32(True)
        return (lambda d: d["loss"].__setitem__("clustering_val_same_weights", losses),
                f"loss/clustering_val_same_weights ({self.sizes.loss_epochs} epochs trained): "
                + ", ".join(f"{k} {v:.5f}" for k, v in losses.items()))


@torch.no_grad()
def mean_loss(model, batches, loss_fn, amp: bool, device) -> float:
    """The mean of ``loss_fn``'s per-task losses over ``batches`` (eval mode, bf16 autocast when ``amp``)."""
    model.eval()
    total = n = 0
    for b in batches:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            losses = loss_fn(model, b)
        total, n = total + losses.double().sum().item(), n + len(losses)
    model.train()
    return total / n


def run_timing(a: argparse.Namespace, device: torch.device, report: Report, budget: Budget) -> None:
    timing = Timing(a, device, report, budget)
    report.data.update({key: {} for key in RESULT_KEY.values()})
    report.data.update(warmup_s={}, loss={}, not_measured={}, failed={}, device=device_info(device),
                       smoke=a.smoke, budget_s=a.budget, elapsed_s=0.0, complete=False)
    for part in a.only or PARTS:
        try:
            getattr(timing, part)()
        except OutOfBudget:
            timing._record("not_measured", part, "budget: ran out")
        except Exception as exc:  # the part's setup (its data): the other parts keep their minutes
            traceback.print_exc()
            timing._record("failed", part, f"{type(exc).__name__}: {str(exc)[:300]}")
    use_tf32(True)
    report.commit(lambda d: d.update(complete=True, elapsed_s=round(budget.elapsed(), 3)))
    print(f"done in {budget.elapsed():.1f} s", flush=True)


def device_info(device: torch.device) -> dict[str, str]:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {"name": name, "type": device.type, "torch": torch.__version__}


# ---------------------------------------------------------------------------------------- compile probe


@contextlib.contextmanager
def compile_cache(folder: str | None) -> Iterator[tuple[str, bool]]:
    """Point inductor's and triton's caches at ``folder`` (a fresh temporary one when None, removed after):
    yields (the folder, whether it started empty, i.e. cold)."""
    made = folder is None
    path = Path(tempfile.mkdtemp(prefix="step-timing-compile-cache-")) if made else Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    cold = not any(path.iterdir())
    keys = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
    old = {k: os.environ.get(k) for k in keys}
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(path)
    os.environ["TRITON_CACHE_DIR"] = str(path / "triton")
    try:
        yield str(path), cold
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if made:
            shutil.rmtree(path, ignore_errors=True)


def compiled_for_training(model: torch.nn.Module) -> torch.nn.Module:
    """What `swarmctl train --step compile` runs (swarmctl/training/loop.py, _training_model)."""
    if hasattr(model, "compile_steps"):
        model.compile_steps()  # the recurrent step only; the state dict is untouched
        return model
    return torch.compile(model, dynamic=True)


def run_probe(a: argparse.Namespace, device: torch.device, report: Report, budget: Budget) -> None:
    """The cold-compile probe of ``a.compile_probe``; each number is written as soon as it is known."""
    task, s = a.compile_probe, Sizes(a.smoke)
    entry: dict[str, Any] = {"task": task, "device": device_info(device)["name"], "torch": torch.__version__,
                             "smoke": a.smoke, "tf32": device.type == "cuda", "amp": a.amp, "finished": False}
    report.data["compile_probe"] = entry

    def write(**numbers: Any) -> None:
        report.commit(lambda d: d["compile_probe"].update(numbers))

    use_tf32(True)
    if task == "mog":
        H, T = s.mog_HT
        model, loss_fn, lr = fresh_model("swarm-mog", H, T, device), mog_loss, 0.01
        batches = s.mog_batches(device)
        first, warm, timed_part = batches[0], batches[1:s.mog_warm], batches[s.mog_warm:]
    elif task == "image":
        H, T = s.image_HT
        model, loss_fn, lr = fresh_model("swarm-image", H, T, device, dataset="mnist"), image_loss, 1e-3
        batches = s.image_batches(device)
        first, warm, timed_part = batches[0], batches[1:s.image_warm], batches[s.image_warm:]
    else:
        H, T = s.clustering_HT
        batches, _, _ = s.clustering_batches(wait_for(a.data, budget), device)
        train = batches[False]  # what `train --compile` runs: the unpadded batches
        model, loss_fn, lr = fresh_model("swarm", H, T, device), clustering_loss, 0.01
        first, warm, timed_part = train[0], train[1:], train  # the first epoch warms up, the second is timed
    entry["model"] = f"{model.__class__.__name__} ({H}-{T}-1)"
    with compile_cache(a.compile_cache) as (folder, cold):
        write(cache_dir=folder, cold_cache=cold)
        sync(device)
        t = time.perf_counter()
        step = adam_step(compiled_for_training(model), lr, loss_fn, device, amp=a.amp)
        step(first)
        sync(device)
        compile_s = time.perf_counter() - t
        write(compile_s=compile_s)
        print(f"compile-probe {task}{' (bf16 autocast)' * a.amp}: compile_s {compile_s:.2f} s to the first "
              f"compiled step ({'cold' if cold else 'warm'} cache {folder})", flush=True)
        try:
            warmup = timed(step, warm, device, budget)  # the other shapes (a recompile each, where any)
            write(warmup_s=warmup)
            seconds = timed(step, timed_part, device, budget)
        except OutOfBudget:
            write(stopped="budget")
            print(f"compile-probe {task}: budget ran out before the steady timing ended", flush=True)
            return
        per_step = seconds / len(timed_part)
        numbers: dict[str, Any] = {"finished": True}
        if task in ("mog", "image"):
            numbers["steady_ms_per_step"] = per_step * 1e3
        if task == "image":
            numbers["steady_s_per_epoch"] = per_step * 1200
        if task == "clustering":
            numbers["steady_s_per_epoch"] = seconds
        write(**numbers)
        print(f"compile-probe {task}: warm-up {warmup:.2f} s, then "
              + ", ".join(f"{k} {v:.4g}" for k, v in numbers.items() if k != "finished"), flush=True)


# ------------------------------------------------------------------------------------------------ main


def _stop(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise Stopped(signal.Signals(signum).name)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", nargs="?", help="the seed-0 clustering file (needed by the clustering part and probe)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                    help="cuda (the default where there is one) or cpu")
    ap.add_argument("--only", choices=PARTS, action="append", help="measure only this part (repeatable)")
    ap.add_argument("--smoke", action="store_true", help="tiny models: seconds on a CPU")
    ap.add_argument("--json", type=Path, metavar="PATH", help="write the numbers here (atomically, after every mode)")
    ap.add_argument("--budget", type=float, metavar="SECONDS",
                    help="seconds for the whole script: no mode is started that would not end in time, and one "
                         "still running at the end is stopped")
    ap.add_argument("--compile-probe", choices=PARTS, metavar="TASK",
                    help="instead of the timing modes: seconds from a cold compile cache to the first compiled "
                         "step of TASK (mog, image or clustering), then its steady step time")
    ap.add_argument("--amp", action="store_true", help="with --compile-probe: compile and time the bf16 autocast "
                                                       "step (`train --step amp+compile`)")
    ap.add_argument("--compile-cache", metavar="DIR", help="with --compile-probe: the inductor cache folder to use "
                                            "(default: a fresh temporary one, i.e. a cold cache)")
    a = ap.parse_args(argv)
    if a.compile_probe and a.only:
        ap.error("--only and --compile-probe exclude each other")
    if a.amp and not a.compile_probe:
        ap.error("--amp goes with --compile-probe (the timing modes measure bf16 autocast by themselves)")
    if "clustering" in ((a.compile_probe,) if a.compile_probe else (a.only or PARTS)) and not a.data:
        ap.error("the clustering part needs DATA (or choose parts with --only)")
    if a.budget is not None and not a.budget > 0:
        ap.error("--budget must be > 0")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    budget = Budget(a.budget)
    device = torch.device(a.device)
    print(f"device: {device_info(device)['name']}; torch {torch.__version__}", flush=True)
    report = Report(a.json, ("compile_probe",) if a.compile_probe else TIMING_KEYS)
    handlers = {sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        if a.compile_probe:
            run_probe(a, device, report, budget)
        else:
            run_timing(a, device, report, budget)
    except Stopped as stop:
        why = str(stop)
        print(f"stopped by {why}: {a.json or 'nothing'} holds every unit finished before", flush=True)
        if report.data:
            elapsed = round(budget.elapsed(), 3)
            report.commit(lambda d: d["compile_probe"].update(stopped=why) if a.compile_probe
                          else d.update(stopped=why, elapsed_s=elapsed))
        sys.stdout.flush()
        return 143
    except Exception as exc:
        if not a.compile_probe or "compile_probe" not in report.data:
            raise
        traceback.print_exc()
        error = f"{type(exc).__name__}: {str(exc)[:300]}"
        report.commit(lambda d: d["compile_probe"].update(failed=error))
        return 1
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return 0


if __name__ == "__main__":
    sys.exit(main())
