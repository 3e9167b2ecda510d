"""Which step mode a run trains in: eager, bf16 autocast (``amp``), the fused Triton cell (``triton``), CUDA
graphs, torch.compile, or a combination (the Triton cell is not compiled); ``auto`` picks one.

``auto`` is eager on the CPU (bf16 autocast and CUDA graphs do not speed the CPU step up: its fused
kernels do). On CUDA it takes, among the modes its task has measured and proven (``Task.step_modes``:
seconds per step and start-up seconds of each mode, measured on a card; a mode is listed only where the
GPU tests pin it: a bf16 mode's loss of the same weights within :data:`AMP_RTOL` of float32's, graphed
steps equal to eager ones), the one that does the most steps in the run's budget, its start-up (warm-up and
capture, compilation) counted against the budget. A task with no measurements trains eagerly. Any other
name forces that mode, on any device (off CUDA, graphs are ignored as ever).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass

from swarmctl.config import STEP_MODES, TrainConfig, check_step
from swarmctl.errors import ConfigError

AMP_RTOL = 2e-3  # a bf16 mode is proven when the loss of the same weights is within this of float32's (0.2 %)


@dataclass(frozen=True)
class StepMode:
    """The switches of one mode."""

    amp: bool = False
    graphs: bool = False
    compile: bool = False
    triton: bool = False

    @classmethod
    def of(cls, cfg: TrainConfig) -> StepMode:
        """The mode ``cfg``'s switches make."""
        return cls(amp=cfg.amp, graphs=cfg.cuda_graphs, compile=cfg.compile, triton=cfg.triton)

    def onto(self, cfg: TrainConfig) -> TrainConfig:
        """``cfg`` training in this mode: ``step`` its name, the switches its parts (the inverse of :meth:`of`)."""
        return dataclasses.replace(cfg, step=self.name, amp=self.amp, cuda_graphs=self.graphs, compile=self.compile,
                                   triton=self.triton)

    @property
    def name(self) -> str:
        parts = [n for n, on in (("amp", self.amp), ("triton", self.triton), ("graphs", self.graphs),
                                 ("compile", self.compile)) if on]
        return "+".join(parts) or "eager"


MODES = {m.name: m for m in (StepMode(), StepMode(amp=True), StepMode(graphs=True), StepMode(amp=True, graphs=True),
                             StepMode(compile=True), StepMode(amp=True, compile=True), StepMode(triton=True),
                             StepMode(amp=True, triton=True), StepMode(triton=True, graphs=True),
                             StepMode(amp=True, triton=True, graphs=True))}
CHOICES = STEP_MODES
assert set(CHOICES) == {"auto", *MODES}, "config.STEP_MODES names the modes of this module"


@dataclass(frozen=True)
class Measured:
    """One mode of a task measured on a card: seconds per optimisation step in the steady state, and the
    seconds a fresh process spends before it (eager warm-up, graph capture, compilation)."""

    step_seconds: float
    start_seconds: float = 0.0


@dataclass(frozen=True)
class Choice:
    """The mode a run trains in and why, for the run's first line."""

    mode: StepMode
    reason: str


def choose_step_mode(requested: str, device_type: str, measured: Mapping[str, Measured],
                     budget_seconds: float) -> Choice:
    """The mode for ``requested`` (``auto`` or a mode's name) on a device of ``device_type`` with the task's
    ``measured`` modes and the run's net budget."""
    check_step(requested, {})
    if requested != "auto":
        return Choice(MODES[requested], "as asked")
    if device_type != "cuda":
        return Choice(MODES["eager"], f"auto: on {device_type} the eager step is the fast one")
    usable = {name: m for name, m in measured.items() if name in MODES and m.step_seconds > 0
              and not (MODES[name].triton and not triton_importable())}  # no Triton here: its modes are not
    if not usable:
        return Choice(MODES["eager"], "auto: no mode measured for this task on a card")

    def steps(name: str) -> float:
        return (budget_seconds - usable[name].start_seconds) / usable[name].step_seconds

    best = max(sorted(usable), key=steps)
    if steps(best) <= 0:  # a budget shorter than every start-up: the cheapest start
        best = min(sorted(usable), key=lambda n: usable[n].start_seconds)
        return Choice(MODES[best], f"auto: the budget ({budget_seconds:.0f} s) is shorter than any mode's start-up")
    base = usable.get("eager")
    versus = "" if base is None or best == "eager" else \
        f", {base.step_seconds / usable[best].step_seconds:.2f}x the eager step's speed"
    return Choice(MODES[best], f"auto: the most steps in {budget_seconds / 60:g} net min on cuda{versus}")


def resolve_step(cfg: TrainConfig, device_type: str, measured: Mapping[str, Measured]) -> tuple[TrainConfig, Choice]:
    """``cfg`` with its step mode settled for a new run: ``step`` the mode's name and its switches set. A
    mode given by its switches alone (``amp``, ``triton``, ``cuda_graphs``, ``compile`` with ``step`` auto) is as
    asked."""
    if cfg.step == "auto" and (cfg.amp or cfg.triton or cfg.cuda_graphs or cfg.compile):
        choice = Choice(StepMode.of(cfg), "as asked")
    else:
        choice = choose_step_mode(cfg.step, device_type, measured, cfg.minutes * 60)
    mode = choice.mode
    check_parts(mode, device_type)
    return mode.onto(cfg), _on(device_type, choice)


def resumed_step(cfg: TrainConfig, device_type: str) -> Choice:
    """The mode a resumed run keeps (its switches as saved), said as a new run's is; refused where this machine
    lacks its parts (:func:`check_parts`)."""
    mode = StepMode.of(cfg)
    check_parts(mode, device_type, resuming=True)
    return _on(device_type, Choice(mode, "the run's own"))


def triton_importable() -> bool:
    """Whether the Triton cell can be loaded here (Triton imports)."""
    try:
        from swarmctl.layers import _triton  # noqa: F401
    except ImportError:
        return False
    return True


def check_parts(mode: StepMode, device_type: str, resuming: bool = False) -> None:
    """A mode whose parts this machine lacks is refused before the run starts (on every rank): on CUDA the
    Triton cell needs Triton (elsewhere the layers take their own path, so it is not needed)."""
    if mode.triton and device_type == "cuda" and not triton_importable():
        other = "resume it on the CPU (`device` cpu)" if resuming else "choose another `step`"
        raise ConfigError(f"`step` {mode.name} runs the Triton cell, and Triton cannot be imported here; install "
                          f"PyTorch's Triton or {other}")


def triton_runs_on(device_type: str) -> bool:
    """Whether the Triton cell runs on a device of ``device_type``: CUDA, and the CPU under Triton's interpreter
    (``TRITON_INTERPRET=1``, the tests); elsewhere the layers take their own path."""
    return device_type == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"


def _on(device_type: str, choice: Choice) -> Choice:
    """``choice`` with a note where its graphs or its Triton cell do not apply (off CUDA its steps run eagerly,
    through the layers' own path)."""
    if device_type == "cuda":
        return choice
    notes = [note for note, on in (("CUDA graphs apply on CUDA only: its steps run eagerly here", choice.mode.graphs),
                                   ("the Triton cell runs on CUDA only: the layers take their own path here",
                                    choice.mode.triton and not triton_runs_on(device_type))) if on]
    return Choice(choice.mode, "; ".join([choice.reason, *notes])) if notes else choice
