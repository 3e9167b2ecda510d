"""Which step mode a run trains in: eager, bf16 autocast (``amp``), the fused Triton cell (``triton``), CUDA
graphs, torch.compile, or a combination; ``auto`` picks one (why: docs/design.md, "The step mode"), any other
name forces that mode.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from swarmctl.config import STEP_MODES, STEP_PARTS, TrainConfig, check_step, has_type, step_parts
from swarmctl.errors import ConfigError

AMP_RTOL = 2e-3  # a bf16 mode is proven when the loss of the same weights is within this of float32's (0.2 %)
TIMINGS_FILE = "step_timings.json"  # package data beside this module
UNMEASURED = "eager"  # what `auto` trains in on a CUDA card the timings do not name (see the module's doc)


@dataclass(frozen=True)
class StepMode:
    amp: bool = False
    graphs: bool = False
    compile: bool = False
    triton: bool = False

    @classmethod
    def named(cls, name: str) -> StepMode:
        """The mode called ``name`` (one of :data:`swarmctl.config.STEP_MODES` other than auto)."""
        return cls(**{part: True for part in step_parts(name)})

    @classmethod
    def of(cls, cfg: TrainConfig) -> StepMode:
        """The mode ``cfg`` trains in; ``auto``, never settled by :func:`resolve_step`, steps eagerly."""
        return MODES["eager" if cfg.step == "auto" else cfg.step]

    @property
    def name(self) -> str:
        return "+".join(p for p in STEP_PARTS if getattr(self, p)) or "eager"


MODES = {name: StepMode.named(name) for name in STEP_MODES[1:]}


@dataclass(frozen=True)
class Measured:
    """One mode of a task measured on a card: seconds per optimisation step in the steady state, and the
    seconds a fresh process spends before it (eager warm-up, graph capture, compilation)."""

    step_seconds: float
    start_seconds: float = 0.0


@dataclass(frozen=True)
class CardTimings:
    """The step timings measured on one card (an entry of :data:`TIMINGS_FILE`): its name as
    ``torch.cuda.get_device_name`` says it, the torch version and the date, each task's modes."""

    card: str
    torch: str
    date: str
    tasks: Mapping[str, Mapping[str, Measured]]

    def measured(self, task: str, proven: Collection[str]) -> dict[str, Measured]:
        """The modes of ``task`` measured on this card that the task lists as ``proven``."""
        return {mode: m for mode, m in self.tasks.get(task, {}).items() if mode in proven}


@functools.cache
def step_timings() -> dict[str, CardTimings]:
    """The step timings shipped with the package, by card name (:data:`TIMINGS_FILE`)."""
    text = resources.files("swarmctl.training").joinpath(TIMINGS_FILE).read_text(encoding="utf-8")
    return parse_timings(json.loads(text))


def parse_timings(raw: Any) -> dict[str, CardTimings]:
    """The cards of a step-timings document, checked: each names its card, torch and date once; each task
    measured there has eager; each mode is a known mode, its step seconds > 0 and its start-up >= 0."""
    cards: dict[str, CardTimings] = {}
    for entry in raw["cards"]:
        name = entry["card"]
        where = f"{TIMINGS_FILE}: {name}"
        if not all(isinstance(entry.get(k), str) and entry[k] for k in ("card", "torch", "date")) or name in cards:
            raise ValueError(f"{where}: each card is named once, with its `torch` and `date`")
        tasks: dict[str, dict[str, Measured]] = {}
        for task, modes in entry["tasks"].items():
            if "eager" not in modes:
                raise ValueError(f"{where}: {task} has no eager timing (the mode every other is compared with)")
            tasks[task] = {}
            for mode, m in modes.items():
                step, start = m.get("step_seconds"), m.get("start_seconds", 0.0)
                if mode not in MODES or not all(has_type(v, "float") and math.isfinite(v) for v in (step, start)) \
                        or step <= 0 or start < 0:
                    raise ValueError(f"{where}: {task} {mode}: a known mode with step_seconds > 0 and "
                                     f"start_seconds >= 0, got {m!r}")
                tasks[task][mode] = Measured(float(step), float(start))
        cards[name] = CardTimings(name, entry["torch"], entry["date"], tasks)
    return cards


@dataclass(frozen=True)
class Choice:
    """The mode a run trains in and why, for the run's first line."""

    mode: StepMode
    reason: str


def choose_step_mode(requested: str, device_type: str, measured: Mapping[str, Measured],
                     budget_seconds: float) -> Choice:
    """The mode for ``requested`` (``auto`` or a mode's name) on a device of ``device_type`` with the task's
    ``measured`` modes and the run's net budget."""
    check_step(requested)
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


def resolve_step(cfg: TrainConfig, device: Any, task: str, proven: Collection[str]) -> tuple[TrainConfig, Choice]:
    """``cfg`` with its step mode settled for a new run of ``task`` on ``device``, and why. ``auto`` on CUDA
    reads the card's step timings, or trains in :data:`UNMEASURED` where the card has none."""
    budget = cfg.minutes * 60
    if cfg.step != "auto" or device.type != "cuda":  # a named mode is as asked, on any card
        choice = choose_step_mode(cfg.step, device.type, {}, budget)
    else:
        import torch

        card = torch.cuda.get_device_name(device)
        timings = step_timings().get(card)
        if timings is None:
            choice = Choice(MODES[UNMEASURED], f"auto: no measurement for this card ({card}): {UNMEASURED}, as on "
                                               "every card not measured; choose another with `step`")
        elif not (measured := timings.measured(task, proven)):
            choice = Choice(MODES[UNMEASURED], f"auto: no mode of {task} measured on {card}")
        else:
            choice = choose_step_mode("auto", "cuda", measured, budget)
            choice = Choice(choice.mode, f"{choice.reason}, measured on {card} (torch {timings.torch}, {timings.date})")
    check_parts(choice.mode, device.type)
    return dataclasses.replace(cfg, step=choice.mode.name), _on(device.type, choice)


def resumed_step(cfg: TrainConfig, device_type: str) -> Choice:
    """The mode a resumed run keeps (its `step` as saved), said as a new run's is; refused where this machine
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
