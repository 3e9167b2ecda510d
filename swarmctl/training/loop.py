"""The one training loop shared by every model and task: Adam under a net time budget, validation
after every epoch, the paper's backtracking heuristic, atomic checkpoints, resume, clean interruption
(Ctrl-C / SIGTERM) and DistributedDataParallel when launched by torchrun."""

from __future__ import annotations

import copy
import json
import logging
import math
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import Tensor, nn

from swarmctl.config import TrainConfig
from swarmctl.data.dataset import epoch_order
from swarmctl.files import atomic_write_text
from swarmctl.training.checkpoint import load_checkpoint, save_checkpoint
from swarmctl.training.device import DistContext

logger = logging.getLogger(__name__)


class Batch(Protocol):
    def to(self, device: torch.device) -> Batch: ...
    def __len__(self) -> int: ...


LossFn = Callable[[nn.Module, Any], Tensor]  # (model, batch) -> per-item losses (B,)
Batches = Sequence[Batch] | Callable[[int], Sequence[Batch]]  # fixed, or drawn per epoch: epoch -> batches


def _batches_for(batches: Batches, epoch: int) -> Sequence[Batch]:
    return batches(epoch) if callable(batches) else batches


class ProgressHook(Protocol):
    def epoch_start(self, epoch: int, n_batches: int, done: int) -> None: ...
    def batch_end(self, mean_loss: float | None) -> None: ...  # running mean of the epoch, None: not read
    def epoch_end(self, record: dict[str, Any]) -> None: ...


def host_sync_interval(device: torch.device) -> int:
    """Training steps between reads of the loss on the host. On the CPU a read costs nothing; on an
    accelerator each read stalls the host until the queued work is done, so the loss is summed on the
    device and read every few steps (the Hungarian matching still reads its cost matrices each step)."""
    return 1 if device.type == "cpu" else 25


def on_device(batches: Batches, device: torch.device) -> Batches:
    """A fixed list of batches copied to an accelerator once (the whole clustering dataset is ~90 MB), so
    no step waits for a host-to-device copy; batches drawn per epoch are moved as they are used."""
    if device.type == "cpu" or callable(batches):
        return batches
    return [batch.to(device) for batch in batches]


@dataclass
class TrainState:
    """Everything besides weights that a resumed run needs; JSON types only."""

    lr: float
    epoch: int = 0  # epoch in progress (= epochs completed)
    cursor: int = 0  # batches of that epoch already done
    best_val: float = math.inf
    best_epoch: int = -1
    history: list[float] = field(default_factory=lambda: [math.inf])  # logged val losses, +inf sentinel
    net_seconds: float = 0.0  # optimisation time only
    eval_seconds: float = 0.0  # validation, checkpoints
    backtracks: int = 0
    epoch_loss_sum: float = 0.0
    epoch_loss_count: int = 0
    finished: bool = False
    stop_reason: str = ""
    lr_decayed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainState:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


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

    @property
    def interrupted(self) -> bool:
        return self.stop_reason.startswith("interrupted")


def should_backtrack(history: Sequence[float], v: float, epoch: int, beta: float) -> bool:
    """The authors' rule (protocol sec. 2.7), plus an immediate backtrack for a non-finite loss.

    ``history`` holds the +inf sentinel and the logged validation losses of epochs 0..epoch-1. With k*
    the last index whose value is worse than ``v``, r = epoch - k* counts the most recent logged epochs
    at least as good as ``v``; backtrack when r > max(5, beta * epoch).
    """
    if not math.isfinite(v):
        return True
    k_star = max(k for k, h in enumerate(history) if h > v)
    return epoch - k_star > max(5, beta * epoch)


@torch.no_grad()
def evaluate(model: nn.Module, batches: Sequence[Batch], loss_fn: LossFn, device: torch.device,
             amp: bool = False) -> float:
    """Mean per-item loss over all batches (each task weighted equally), model in eval mode."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for batch in batches:
        batch = batch.to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            losses = loss_fn(model, batch)
        total += losses.double().sum().item()
        count += losses.numel()
    model.train(was_training)
    return total / max(count, 1)


def _snapshot(model: nn.Module, opt: torch.optim.Optimizer) -> tuple[dict, dict]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, copy.deepcopy(opt.state_dict())


def _finite_or_none(v: float) -> float | None:
    return v if math.isfinite(v) else None


class _StopSignals:
    """Turns SIGINT/SIGTERM into a flag checked between batches (main thread only)."""

    def __init__(self) -> None:
        self.received: str | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> _StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = signal.Signals(signum).name

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)


def _any_rank(flags: tuple[bool, ...], ctx: DistContext, device: torch.device) -> tuple[bool, ...]:
    """Each flag OR-ed over all ranks, in one collective call (the flags themselves without DDP)."""
    if not ctx.enabled:
        return flags
    t = torch.tensor([1.0 if f else 0.0 for f in flags], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return tuple(bool(v > 0) for v in t.tolist())


def _broadcast(value: float, ctx: DistContext, device: torch.device) -> float:
    if not ctx.enabled:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.broadcast(t, src=0)
    return float(t.item())


def fit(
    model: nn.Module,
    train_batches: Batches,
    val_batches: Batches,
    loss_fn: LossFn,
    cfg: TrainConfig,
    run_dir: Path,
    *,
    config: dict[str, Any],
    task: str,
    device: torch.device,
    resume: bool = False,
    ctx: DistContext = DistContext(),
    progress: ProgressHook | None = None,
    clock: Callable[[], float] = time.monotonic,
    plot: Callable[[list[dict[str, Any]], Path], None] | None = None,
    extra_metrics: Callable[[float], dict[str, float]] | None = None,
) -> FitResult:
    """Train ``model`` until the net time budget (``cfg.minutes``) or ``cfg.max_epochs`` is spent.

    ``train_batches`` and ``val_batches`` are sequences, or functions of the epoch returning them (for
    tasks drawn fresh every epoch); an epoch runs ``cfg.steps_per_epoch`` steps or one pass.

    Writes (rank 0 only) ``metrics.jsonl`` (one line per epoch), ``best.pt`` (best validation loss),
    ``last.pt`` (after every epoch, and on interruption with the position inside the epoch) into
    ``run_dir``. With ``resume`` the run continues from ``last.pt``, budget included. ``plot(records,
    run_dir)`` draws the curves at the end (time not counted).
    """
    run_dir = Path(run_dir)
    model.to(device)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    state = TrainState(lr=cfg.lr)
    best_model, best_opt = None, None
    if resume:
        last = load_checkpoint(run_dir / "last.pt", map_location=device)
        model.load_state_dict(last["model"])
        opt.load_state_dict(last["optimizer"])
        state = TrainState.from_dict(last["state"])
        state.finished = False
        if (run_dir / "best.pt").is_file():
            best = load_checkpoint(run_dir / "best.pt", map_location=device)
            best_model, best_opt = best["model"], best["optimizer"]
            state.best_val, state.best_epoch = best["state"]["best_val"], best["state"]["best_epoch"]
    if best_model is None:
        best_model, best_opt = _snapshot(model, opt)
    for group in opt.param_groups:
        group["lr"] = state.lr

    train_model: nn.Module = model
    if cfg.compile:
        if hasattr(model, "compile_steps"):
            model.compile_steps()  # compile the recurrent step only: stable shapes, state dict untouched
        else:
            train_model = torch.compile(model, dynamic=True)
    if ctx.enabled:
        ids = [device.index] if device.type == "cuda" else None
        train_model = nn.parallel.DistributedDataParallel(train_model, device_ids=ids)

    metrics_path = run_dir / "metrics.jsonl"
    records: list[dict[str, Any]] = []
    if metrics_path.is_file():
        # a run killed between its metrics line and last.pt logged an epoch it will now redo
        records = [r for r in map(json.loads, metrics_path.read_text().splitlines()) if r["epoch"] < state.epoch]
        if ctx.is_main:
            atomic_write_text(metrics_path, "".join(json.dumps(r) + "\n" for r in records))

    def save_last() -> None:
        if ctx.is_main:
            save_checkpoint(run_dir / "last.pt", model_state=model.state_dict(), optimizer_state=opt.state_dict(),
                            state=state.to_dict(), config=config, task=task)

    budget = cfg.minutes * 60.0
    amp = cfg.amp
    train_batches, val_batches = on_device(train_batches, device), on_device(val_batches, device)
    sync_every = host_sync_interval(device)
    loss_acc = torch.zeros((), dtype=torch.float64, device=device)  # losses not yet read on the host
    unread = 0

    def read_losses() -> None:
        """Fold the losses summed on the device into the state (one host sync)."""
        nonlocal unread
        if unread:
            state.epoch_loss_sum += loss_acc.item()
            state.epoch_loss_count += unread
            loss_acc.zero_()
            unread = 0
    with _StopSignals() as signals:
        while state.epoch < cfg.max_epochs:
            if state.cursor == 0 and _any_rank((state.net_seconds >= budget,), ctx, device)[0]:
                state.finished, state.stop_reason = True, "time budget"  # nothing left for a new epoch
                break
            if cfg.lr_decay_epoch is not None and state.epoch >= cfg.lr_decay_epoch and not state.lr_decayed:
                state.lr *= cfg.lr_decay
                state.lr_decayed = True
                for group in opt.param_groups:
                    group["lr"] = state.lr
            epoch_batches = _batches_for(train_batches, state.epoch)
            order = epoch_order(len(epoch_batches), cfg.seed, state.epoch)
            if cfg.steps_per_epoch is not None:
                order = [order[k % len(order)] for k in range(cfg.steps_per_epoch)]
            if ctx.enabled:  # every rank gets the same number of batches
                per_rank = len(order) // ctx.world_size
                order = order[ctx.rank :: ctx.world_size][:per_rank]
            if progress:
                progress.epoch_start(state.epoch, len(order), state.cursor)
            model.train()
            time_up = False
            while state.cursor < len(order):
                stop_signal, time_up = _any_rank((signals.received is not None, state.net_seconds >= budget), ctx,
                                                 device)
                if stop_signal:
                    read_losses()
                    state.stop_reason = f"interrupted ({signals.received or 'signal on another rank'})"
                    save_last()
                    return _result(run_dir, state)
                if time_up:
                    break
                batch = epoch_batches[order[state.cursor]].to(device)
                t0 = clock()
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
                    loss = loss_fn(train_model, batch).mean()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                loss_acc += loss.detach()
                unread += 1
                state.cursor += 1
                if unread >= sync_every or state.cursor == len(order):
                    read_losses()  # synchronises, so the time below includes the queued work
                state.net_seconds += clock() - t0
                if progress:
                    progress.batch_end(state.epoch_loss_sum / state.epoch_loss_count if unread == 0 else None)
            if unread:  # the steps still queued on an accelerator count as optimisation time
                t0 = clock()
                read_losses()
                state.net_seconds += clock() - t0
            time_up = time_up or _any_rank((state.net_seconds >= budget,), ctx, device)[0]

            t_eval = clock()
            v = _broadcast(evaluate(model, _batches_for(val_batches, state.epoch), loss_fn, device, amp), ctx, device)
            lr_used = state.lr
            backtracked = should_backtrack(state.history, v, state.epoch, cfg.beta) and not time_up
            logged = v
            if backtracked:
                model.load_state_dict(best_model)
                opt.load_state_dict(best_opt)
                state.lr = cfg.alpha * lr_used
                for group in opt.param_groups:
                    group["lr"] = state.lr
                state.backtracks += 1
                logged = state.best_val
                logger.info("epoch %d: val %.4f -> backtrack to epoch %d, lr %.3g", state.epoch, v,
                            state.best_epoch, state.lr)
            state.history.append(logged)
            improved = math.isfinite(logged) and logged < state.best_val
            if improved:
                state.best_val, state.best_epoch = logged, state.epoch
                best_model, best_opt = _snapshot(model, opt)
            record = {
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
            }
            if extra_metrics is not None and math.isfinite(v):
                record.update(extra_metrics(v))
            state.epoch += 1
            state.cursor = 0
            state.epoch_loss_sum, state.epoch_loss_count = 0.0, 0
            if time_up or state.epoch >= cfg.max_epochs:
                state.finished = True
                state.stop_reason = "time budget" if time_up else "max epochs"
            if ctx.is_main:
                records.append(record)
                with open(metrics_path, "a") as fh:
                    fh.write(json.dumps(record) + "\n")
                if improved:
                    save_checkpoint(run_dir / "best.pt", model_state=best_model, optimizer_state=best_opt,
                                    state=state.to_dict(), config=config, task=task)
            save_last()
            state.eval_seconds += clock() - t_eval
            logger.info("epoch %d: train %.4f  val %.4f  best %.4f  lr %.3g  net %.1fs", record["epoch"],
                        record["train_loss"], v, state.best_val, lr_used, state.net_seconds)
            if progress:
                progress.epoch_end(record)
            if state.finished:
                break
    if ctx.is_main and plot is not None:
        plot(records, run_dir)
    return _result(run_dir, state)


def _result(run_dir: Path, state: TrainState) -> FitResult:
    return FitResult(run_dir, state.best_val, state.best_epoch, state.epoch, state.net_seconds,
                     state.eval_seconds, state.backtracks, state.stop_reason)
