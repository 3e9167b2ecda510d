"""The one training loop shared by every model and task: Adam under a net time budget, validation
after every epoch, the paper's backtracking heuristic, atomic checkpoints, resume, clean interruption
(Ctrl-C / SIGTERM) and DistributedDataParallel when launched by torchrun."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import Tensor, nn

from swarmctl import threads
from swarmctl.config import TrainConfig
from swarmctl.data.dataset import epoch_order
from swarmctl.errors import CheckpointError
from swarmctl.layers.swarm import triton_cell
from swarmctl.rundir import BEST, LAST
from swarmctl.signals import StopSignals
from swarmctl.training.checkpoint import RunWriter, TrainState
from swarmctl.training.device import DistContext, barrier, tf32_scope
from swarmctl.training.modes import StepMode, triton_runs_on
from swarmctl.training.steps import TrainStep

logger = logging.getLogger(__name__)


class Batch(Protocol):
    def to(self, device: torch.device) -> Batch: ...
    def __len__(self) -> int: ...


LossFn = Callable[[nn.Module, Any], Tensor]  # (model, batch) -> per-item losses (B,)
Batches = Sequence[Batch] | Callable[[int], Sequence[Batch]]  # fixed, or drawn per epoch: epoch -> batches


@dataclass(frozen=True)
class TrainingData:
    """What the loop needs from a task: its batches, its per-item loss, and the numbers it derives from a
    validation loss (e.g. bits per dimension); ``checksum`` identifies the data for resume checks."""

    train: Batches
    val: Batches
    loss_fn: LossFn
    val_metrics_of: Callable[[float], dict[str, float]] | None = None
    checksum: str | None = None

    def train_batches(self, epoch: int) -> Sequence[Batch]:
        return self.train(epoch) if callable(self.train) else self.train

    def val_batches(self, epoch: int) -> Sequence[Batch]:
        return self.val(epoch) if callable(self.val) else self.val

    def val_metrics(self, v: float) -> dict[str, float]:
        return self.val_metrics_of(v) if self.val_metrics_of is not None and math.isfinite(v) else {}


@dataclass(frozen=True)
class TrainingStart:
    """Where a run stands as ``fit`` starts (a resume: where its last checkpoint left it), for a display."""

    device: str
    budget_seconds: float  # the net budget, cfg.minutes in seconds
    max_epochs: int
    epoch: int  # the epoch in progress (= epochs completed)
    cursor: int  # batches of that epoch already done
    net_seconds: float  # net optimisation time already spent
    best_val: float | None  # None: no epoch validated yet
    resumed: bool
    lr_decay_epoch: int | None = None  # the epoch from which the lr is decayed (None: never)


class ProgressHook(Protocol):
    def begin(self, start: TrainingStart) -> None: ...
    def epoch_start(self, epoch: int, n_batches: int, done: int) -> None: ...
    # the epoch's running mean loss (None: not read this step, the net seconds then lag the queued work) and the
    # net optimisation seconds spent so far
    def batch_end(self, mean_loss: float | None, net_seconds: float) -> None: ...
    def epoch_end(self, record: dict[str, Any]) -> None: ...


def host_sync_interval(device: torch.device) -> int:
    """Training steps between reads of the loss on the host: every step on the CPU, where a read costs
    nothing; once an epoch on an accelerator, where each read stalls the host until the queued work is done."""
    return 1 if device.type == "cpu" else 2**62  # never inside an epoch


# Under torchrun the ranks agree on stopping (a signal, the time budget) in a collective call that the
# host waits for; once every this many steps (at the same steps on every rank) instead of every step, so a
# rank overruns its budget or answers a signal by at most this many steps.
DIST_CHECK_STEPS = 32


def on_device(batches: Batches, device: torch.device) -> Batches:
    """Batches on an accelerator: a fixed list copied once (no step waits for a copy); batches drawn per
    epoch drawn there when their sequence has ``on(device)``, else moved as they are used."""
    if device.type == "cpu":
        return batches
    if callable(batches):
        return lambda epoch: _drawn_on(batches(epoch), device)
    return [batch.to(device) for batch in batches]


def _drawn_on(batches: Sequence[Batch], device: torch.device) -> Sequence[Batch]:
    on = getattr(batches, "on", None)
    return on(device) if callable(on) else batches


@dataclass(frozen=True)
class FitResult:
    run_dir: Path
    best_val: float
    best_epoch: int
    epochs: int
    net_seconds: float
    eval_seconds: float
    backtracks: int
    stop_reason: str  # "time budget", "max epochs", "interrupted (SIGINT)", ...
    batch: int = 0  # batches done of epoch ``epochs`` (the epoch in progress when interrupted)
    epoch_batches: int = 0  # that epoch's batches (0 when ``batch`` is 0)
    budget_seconds: float = math.inf  # the net budget

    @property
    def interrupted(self) -> bool:
        return self.stop_reason.startswith("interrupted")


def should_backtrack(history: Sequence[float], v: float, epoch: int, beta: float) -> bool:
    """The authors' rule (the paper, sec. 4.1.3, Setup), plus an immediate backtrack for a non-finite loss.

    ``history`` holds the +inf sentinel and the logged validation losses of epochs 0..epoch-1. With k*
    the last index whose value is worse than ``v``, r = epoch - k* counts the most recent logged epochs
    at least as good as ``v``; backtrack when r > max(5, beta * epoch).
    """
    if not math.isfinite(v):
        return True
    k_star = max(k for k, h in enumerate(history) if h > v)
    return epoch - k_star > max(5, beta * epoch)


@torch.no_grad()
def validation_loss(model: nn.Module, batches: Sequence[Batch], loss_fn: LossFn, device: torch.device,
                    amp: bool = False, signals: StopSignals | None = None,
                    progress: Callable[[int, int], None] | None = None) -> float | None:
    """Mean per-item loss over all batches (each task weighted equally), model in eval mode. With
    ``signals``, a signal received stops the pass between batches: None (a part of the split is no loss).
    ``progress(done, total)`` is told after each batch (it reads the loss on the host each time)."""
    was_training = model.training
    model.eval()
    total, count = torch.zeros((), dtype=torch.float64, device=device), 0  # summed on the device: one host read
    for k, batch in enumerate(batches, start=1):
        if signals is not None and signals.received is not None:
            model.train(was_training)
            return None
        batch = batch.to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            losses = loss_fn(model, batch)
        total += losses.double().sum()
        count += losses.numel()
        if progress is not None:
            progress(k, len(batches))
    model.train(was_training)
    return total.item() / max(count, 1)


def _snapshot(model: nn.Module, opt: torch.optim.Optimizer) -> tuple[dict, dict]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, copy.deepcopy(opt.state_dict())


def _finite_or_none(v: float) -> float | None:
    return v if math.isfinite(v) else None


def any_rank(flags: tuple[bool, ...], ctx: DistContext, device: torch.device) -> tuple[bool, ...]:
    """Each flag OR-ed over all ranks, in one collective call (the flags themselves without DDP)."""
    if not ctx.enabled:
        return flags
    t = torch.tensor([1.0 if f else 0.0 for f in flags], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return tuple(bool(v > 0) for v in t.tolist())


def fit(
    model: nn.Module,
    data: TrainingData,
    cfg: TrainConfig,
    writer: RunWriter,
    *,
    device: torch.device,
    resume: bool = False,
    ctx: DistContext = DistContext(),
    progress: ProgressHook | None = None,
    clock: Callable[[], float] = time.monotonic,
    signals: StopSignals | None = None,
) -> FitResult:
    """Train ``model`` until the net time budget (``cfg.minutes``) or ``cfg.max_epochs`` is spent.

    An epoch runs ``cfg.steps_per_epoch`` steps or one pass over the training batches, then validates,
    backtracks when the rule says so, and saves through ``writer`` (rank 0 only) a metrics line, ``best.pt``
    and ``last.pt`` (also on interruption, with the position inside the epoch). With ``resume`` the run
    continues from ``last.pt``, budget included. ``signals``: the caller's installed :class:`StopSignals`
    (None installs one for the duration of fit).
    """
    model.to(device)
    data = dataclasses.replace(data, train=on_device(data.train, device), val=on_device(data.val, device))
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    state, best = _initial_state(model, opt, cfg, writer, resume, device)
    mode = StepMode.of(cfg)
    train_model = _training_model(model, mode.compile, ctx, device)
    step = TrainStep(train_model, opt, data.loss_fn, device, amp=mode.amp, graphs=mode.graphs and not ctx.enabled)
    if ctx.is_main:
        writer.keep_metrics_before(state.epoch)

    def save_last() -> None:
        if ctx.is_main:
            writer.save(LAST, model.state_dict(), opt.state_dict(), state)

    budget = cfg.minutes * 60.0
    epoch_batches = 0  # the batches of the epoch in progress, for the result of an interrupted run
    if progress:
        progress.begin(TrainingStart(str(device), budget, cfg.max_epochs, state.epoch, state.cursor,
                                     state.net_seconds, _finite_or_none(state.best_val), resume, cfg.lr_decay_epoch))
    # a triton mode runs the steps and the validation through the Triton cell where it runs (triton_runs_on)
    triton = triton_cell() if mode.triton and triton_runs_on(device.type) else contextlib.nullcontext()
    with contextlib.nullcontext(signals) if signals is not None else StopSignals() as signals, tf32_scope(device), \
            triton:
        if state.epoch >= cfg.max_epochs and not state.finished:  # resumed with --max-epochs already done
            state.finished, state.stop_reason = True, "max epochs"
        while state.epoch < cfg.max_epochs:
            if state.cursor == 0 and any_rank((state.net_seconds >= budget,), ctx, device)[0]:
                state.finished, state.stop_reason = True, "time budget"  # nothing left for a new epoch
                break
            if cfg.lr_decay_epoch is not None and state.epoch >= cfg.lr_decay_epoch and not state.lr_decayed:
                state.lr *= cfg.lr_decay
                state.lr_decayed = True
                _set_lr(opt, state.lr)
            batches = data.train_batches(state.epoch)
            order = _epoch_order(len(batches), state.epoch, cfg, ctx)
            epoch_batches = len(order)
            if progress:
                progress.epoch_start(state.epoch, len(order), state.cursor)
            stopped_by, time_up = _train_epoch(train_model, step, batches, order, state, budget, signals, ctx, device,
                                               clock, progress)
            if stopped_by is not None:
                state.stop_reason = f"interrupted ({stopped_by})"
                save_last()
                return _result(writer.dir, state, ctx, epoch_batches, budget)
            time_up = time_up or any_rank((state.net_seconds >= budget,), ctx, device)[0]

            t_eval = clock()
            v = validation_loss(model, data.val_batches(state.epoch), data.loss_fn, device, mode.amp, signals)
            if any_rank((v is None,), ctx, device)[0]:  # stopped inside the validation: the epoch is not validated
                state.stop_reason = f"interrupted ({signals.received or 'signal on another rank'})"
                state.eval_seconds += clock() - t_eval
                save_last()  # the steps are done: a resume starts with this validation
                return _result(writer.dir, state, ctx, epoch_batches, budget)
            if ctx.enabled:  # rank 0's loss decides for every rank
                t = torch.tensor([v], dtype=torch.float64, device=device)
                dist.broadcast(t, src=0)
                v = float(t.item())
            lr_used = state.lr
            backtracked = should_backtrack(state.history, v, state.epoch, cfg.beta) and not time_up
            if backtracked:
                _backtrack(model, opt, best, state, cfg, v)
            logged = state.best_val if backtracked else v
            state.history.append(logged)
            improved = math.isfinite(logged) and logged < state.best_val
            if improved:
                state.best_val, state.best_epoch = logged, state.epoch
                best = _snapshot(model, opt)
            record = {  # one line of metrics.jsonl
                "epoch": state.epoch,
                "train_loss": state.epoch_loss_sum / max(state.epoch_loss_count, 1),
                "val_loss": _finite_or_none(v),
                "best_val": _finite_or_none(state.best_val),
                "lr": lr_used,
                "net_seconds": state.net_seconds,
                "batches": state.cursor,
                "backtracked": backtracked,
                "backtracks": state.backtracks,
                "eval_seconds": state.eval_seconds + (clock() - t_eval),
                **data.val_metrics(v),
            }
            state.epoch, state.cursor = state.epoch + 1, 0
            state.epoch_loss_sum, state.epoch_loss_count = 0.0, 0
            if time_up or state.epoch >= cfg.max_epochs:
                state.finished, state.stop_reason = True, "time budget" if time_up else "max epochs"
            if ctx.is_main:
                writer.append_metrics(record)
                if improved:
                    writer.save(BEST, best[0], best[1], state)
            save_last()
            state.eval_seconds += clock() - t_eval
            logger.info("epoch %d: train %.4f  val %.4f  best %.4f  lr %.3g  net %.1fs", record["epoch"],
                        record["train_loss"], v, state.best_val, lr_used, state.net_seconds)
            if progress:
                progress.epoch_end(record)
            if state.finished:
                break
    return _result(writer.dir, state, ctx, epoch_batches, budget)


# ---- the steps of fit, in the order it calls them -------------------------------------------------------

def _initial_state(model: nn.Module, opt: torch.optim.Optimizer, cfg: TrainConfig, writer: RunWriter, resume: bool,
                   device: torch.device) -> tuple[TrainState, tuple[dict, dict]]:
    """A fresh state, or the one in ``last.pt`` (weights and optimizer loaded); and the best snapshot."""
    state = TrainState(lr=cfg.lr)
    best = None
    if resume:
        last = writer.load(LAST, map_location=device)
        if last is None:
            raise CheckpointError(f"{writer.dir / LAST}: no checkpoint to resume from")
        if last.optimizer is None:  # a finished run kept as weights only, or a shipped model's file
            raise CheckpointError(f"{writer.dir / LAST} holds weights only, no optimizer state, so the run cannot "
                                  "be continued; start a new run (another `name`)")
        model.load_state_dict(last.model)
        opt.load_state_dict(last.optimizer)
        state = last.state  # validated by load_checkpoint; the trainer advances it in place
        state.finished = False
        saved = writer.load(BEST, map_location=device)
        if saved is not None:
            best = saved.model, saved.optimizer
            state.best_val, state.best_epoch = saved.state.best_val, saved.state.best_epoch
    if best is None:
        best = _snapshot(model, opt)
    _set_lr(opt, state.lr)
    return state, best


def _training_model(model: nn.Module, compiled: bool, ctx: DistContext, device: torch.device) -> nn.Module:
    """The module the steps run through: compiled (``compiled``) and/or wrapped in DDP; ``model`` keeps the
    weights."""
    train_model: nn.Module = model
    if compiled:
        if device.type != "cuda":  # inductor's C++ path finds a CUDA toolkit and logs that no GPU uses it
            logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
        if hasattr(model, "compile_steps"):
            model.compile_steps()  # compile the recurrent step only: stable shapes, state dict untouched
        else:
            train_model = torch.compile(model, dynamic=True)
    if ctx.enabled:
        ids = [device.index] if device.type == "cuda" else None
        train_model = nn.parallel.DistributedDataParallel(train_model, device_ids=ids)
    return train_model


def _set_lr(opt: torch.optim.Optimizer, lr: float) -> None:
    for group in opt.param_groups:
        group["lr"] = lr


def _epoch_order(n_batches: int, epoch: int, cfg: TrainConfig, ctx: DistContext) -> list[int]:
    """Which batches this rank runs in ``epoch``, in order (the same count on every rank)."""
    order = epoch_order(n_batches, cfg.seed, epoch)
    if cfg.steps_per_epoch is not None:
        order = [order[k % len(order)] for k in range(cfg.steps_per_epoch)]
    if ctx.enabled:
        per_rank = len(order) // ctx.world_size
        order = order[ctx.rank :: ctx.world_size][:per_rank]
    return order


def _train_epoch(train_model: nn.Module, step: TrainStep, batches: Sequence[Batch], order: list[int],
                 state: TrainState, budget: float, signals: StopSignals, ctx: DistContext, device: torch.device,
                 clock: Callable[[], float], progress: ProgressHook | None) -> tuple[str | None, bool]:
    """Optimisation steps from ``state.cursor`` to the end of ``order``: (the signal that stopped them, or
    None; whether the budget ran out). Only the steps count towards ``state.net_seconds``."""
    train_model.train()
    time_up, interval, read_at = False, host_sync_interval(device), state.cursor
    unread = torch.zeros((), dtype=torch.float64, device=device)  # the losses of the steps since read_at

    def read() -> None:  # fold them into the state (on an accelerator the host waits for the queued steps)
        nonlocal read_at
        if state.cursor > read_at:
            state.epoch_loss_sum += unread.item()
            state.epoch_loss_count += state.cursor - read_at
            unread.zero_()
            read_at = state.cursor

    while state.cursor < len(order):
        if ctx.enabled and state.cursor % DIST_CHECK_STEPS:  # ranks agree on stopping every few steps only
            stop_signal = time_up = False
        else:
            stop_signal, time_up = any_rank((signals.received is not None, state.net_seconds >= budget), ctx,
                                            device)
        if stop_signal:
            read()
            return signals.received or "signal on another rank", time_up
        if time_up:
            break
        if device.type == "cpu":
            threads.adjust()  # the cores free now, every few seconds, where swarmctl's rule chose the count
        t0 = clock()  # drawing the batch and copying it count: on a GPU the copy waits for the queued steps
        unread += step(batches[order[state.cursor]].to(device)).detach()  # forward, loss, backward, Adam
        state.cursor += 1
        if state.cursor - read_at >= interval or state.cursor == len(order):
            read()  # synchronises, so the interval below includes the queued work
        state.net_seconds += clock() - t0
        if progress:
            progress.batch_end(state.epoch_loss_sum / state.epoch_loss_count if read_at == state.cursor else None,
                               state.net_seconds)
    if state.cursor > read_at:  # steps still queued on an accelerator count as optimisation time
        t0 = clock()
        read()
        state.net_seconds += clock() - t0
    return None, time_up


def _backtrack(model: nn.Module, opt: torch.optim.Optimizer, best: tuple[dict, dict], state: TrainState,
               cfg: TrainConfig, v: float) -> None:
    """Back to the best weights and optimizer state, with the learning rate times alpha."""
    model.load_state_dict(best[0])
    # a copy: load_state_dict keeps tensors of the right dtype and device as they are, and Adam then updates
    # them in place, which changed the snapshot a second backtrack restores
    opt.load_state_dict(copy.deepcopy(best[1]))
    state.lr = cfg.alpha * state.lr
    _set_lr(opt, state.lr)
    state.backtracks += 1
    logger.info("epoch %d: val %.4f -> backtrack to epoch %d, lr %.3g", state.epoch, v, state.best_epoch, state.lr)


def _result(run_dir: Path, state: TrainState, ctx: DistContext, epoch_batches: int, budget: float) -> FitResult:
    """What fit returns, once every rank is here (a rank that tore down its process group while rank 0 still
    wrote ended now and then in an abort of gloo's threads)."""
    barrier(ctx)
    return FitResult(run_dir, state.best_val, state.best_epoch, state.epoch, state.net_seconds,
                     state.eval_seconds, state.backtracks, state.stop_reason, state.cursor,
                     epoch_batches if state.cursor else 0, budget)
