"""An overview over training runs: one row per configuration and dataset (mean ± std over seeds) next to the
paper's number for that configuration, the runs with no finished epoch, and the paper's parameters-vs-loss
frontier per model family with the paper's own points. Reads run folders only (no torch)."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import statistics
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from swarmctl.config import SEED_RANGE
from swarmctl.errors import ConfigError, DataError, ResourceError, SwarmctlWarning, plural, shell_command
from swarmctl.files import atomic_write_text, read_bytes, read_metrics, staged_outputs
from swarmctl.rundir import CONFIG, RunDir


@dataclass(frozen=True)
class RunSummary:
    """A run folder with a config; one with no finished epoch (``why`` says so) is left out of the means."""

    name: str
    model: str
    code: str
    parameters: int
    seed: int
    best_val: float
    epochs: int
    net_minutes: float
    device: str
    data: str = ""  # the data it trained on: its checksum (or path; "" for data drawn fresh)
    data_name: str = ""  # that data's file name (an image task: its dataset's name), for the table
    dataset: str | None = None  # an image task's named dataset (the paper's number depends on it)
    why: str = ""  # why it has no finished epoch
    hardware: tuple[str, ...] = ()  # what it trained on, each session's ("cpu, 1 thread", "NVIDIA H200")


@dataclass(frozen=True)
class ConfigSummary:
    """All seeds of one (model, code) trained on one dataset, named by ``data`` (never pooled across data)."""

    model: str
    code: str
    parameters: int
    seeds: tuple[int, ...]
    val_mean: float
    val_std: float  # 0 for a single seed
    epochs: float
    net_minutes: float
    devices: tuple[str, ...]
    data: str = ""
    dataset: str | None = None  # an image task's named dataset
    hardware: tuple[str, ...] = ()  # what its seeds trained on (a run that records none: its device)
    data_id: str = ""  # the data's checksum (or named dataset, or path): what tells the paper's data

    @property
    def paper_data(self) -> bool:
        """Whether it trained on the data the paper's number for its model was measured on."""
        return on_papers_data(self.model, self.data, self.data_id)

    @property
    def error(self) -> float | None:
        """The spread over seeds to draw and print (the standard deviation), None for a single seed."""
        return self.val_std if len(self.seeds) > 1 else None


def read_all_runs(runs_dir: Path) -> tuple[list[RunSummary], list[RunSummary]]:
    """The runs under ``runs_dir`` with a finished epoch, and those without one (with the reason); a damaged
    run is skipped with a warning."""
    runs_dir = Path(runs_dir)
    if runs_dir.exists() and not runs_dir.is_dir():
        raise DataError(f"{runs_dir} is a file, not a runs folder; give the folder holding the runs")
    if not runs_dir.is_dir():
        raise DataError(f"{runs_dir}: no such runs folder; train a model with `swarmctl train` first")
    out, unfinished = [], []
    for run in RunDir.all_in(runs_dir):
        try:
            records = read_metrics(run.metrics)
            vals = [r["val_loss"] for r in records if r.get("val_loss") is not None]
            cfg = json.loads(read_bytes(run.config))
            known = dict(
                name=run.name, model=str(cfg["model"]["name"]), code=str(cfg["run"]["code"]),
                parameters=_whole(cfg["run"]["parameters"], "parameters", 1),
                seed=_whole(cfg["train"]["seed"], "seed", SEED_RANGE[0], SEED_RANGE[1]),
                device=str(cfg["run"].get("device", "?")), hardware=_hardware(cfg["run"]))
            given = cfg.get("data") or {}  # a dataset has a checksum; data drawn fresh none
            path, dataset = given.get("path"), given.get("dataset")
            data = {"data": str(given.get("checksum") or dataset or path or ""), "dataset": str(dataset) if dataset
                    else None, "data_name": str(dataset) if dataset else Path(str(path)).name if path else "fresh data"}
            if not vals:
                why = ("no finished epoch; its last.pt holds the interrupted one" if run.last.exists()
                       else "no finished epoch and no checkpoint")
                unfinished.append(RunSummary(**known, best_val=0.0, epochs=0, net_minutes=0.0, **data, why=why))
                continue
            summary = RunSummary(
                **known, best_val=min(float(r["best_val"]) for r in records if r.get("best_val") is not None),
                epochs=len(records), net_minutes=float(records[-1]["net_seconds"]) / 60, **data)
        except (ValueError, TypeError, KeyError, AttributeError, UnicodeDecodeError, OSError, ConfigError,
                ResourceError, DataError) as exc:
            why = (str(exc) if isinstance(exc, ConfigError | ResourceError | DataError)
                   else f"its {run.config.name} or {run.metrics.name} is damaged")
            warnings.warn(f"skipped run {run.path}: {why}", SwarmctlWarning, stacklevel=2)
            continue
        if not _spent(cfg["train"], records):  # a run still training, or stopped before its budget: no seed yet
            unfinished.append(dataclasses.replace(summary, why=(
                f"stopped before its budget: {plural(summary.epochs, 'epoch')}, "
                f"{summary.net_minutes:.1f} of {float(cfg['train']['minutes']):g} net min (resume it to count it)")))
            continue
        if not math.isfinite(summary.best_val) or not math.isfinite(summary.net_minutes):
            warnings.warn(f"skipped run {run.path}: its best validation loss is {summary.best_val} (not a "
                          f"finite number); its {run.metrics.name} is damaged or the run diverged", SwarmctlWarning,
                          stacklevel=2)
            continue
        out.append(summary)
    if not out:
        left = f" (unfinished: {', '.join(u.name for u in unfinished)})" if unfinished else ""
        stopped = [u for u in unfinished if u.epochs]  # stopped before its budget, with epochs to build on
        if stopped:
            raise DataError(f"{runs_dir} holds no finished run{left}; resume one to its budget: "
                            + shell_command("train", stopped[0].model, resume=stopped[0].name,
                                            **({} if Path(runs_dir) == Path("runs") else {"runs_dir": runs_dir})))
        raise DataError(f"{runs_dir} holds no runs with a finished epoch{left}; train a model with `swarmctl train` "
                        "first")
    return out, unfinished


def _spent(train: dict[str, Any], records: list[dict[str, Any]]) -> bool:
    """Whether a run's metrics show its net budget spent or its epoch limit reached (without them: done)."""
    minutes, max_epochs = train.get("minutes"), train.get("max_epochs")
    if not isinstance(minutes, int | float) or not isinstance(max_epochs, int):
        return True
    return records[-1]["net_seconds"] >= minutes * 60 or len(records) >= max_epochs


def _hardware(run: dict[str, Any]) -> tuple[str, ...]:
    """A run config's hardware, each session's (a run from before swarmctl recorded it: its device)."""
    given = run.get("hardware")
    given = [given] if isinstance(given, str) else given if isinstance(given, list) else []
    return tuple(str(h) for h in given) or (str(run.get("device", "?")),)


def _whole(value: Any, field: str, least: int, most: int | None = None) -> int:
    """A whole number from a run's config (JSON true, 2.5 or "12" are not one) within [least, most]."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least or (most is not None and value > most):
        bound = f">= {least}" if most is None else f"in {least}..{most}"
        raise DataError(f"its {CONFIG} gives {field} {value!r}, not a whole number {bound}")
    return value


def summarise(runs: list[RunSummary]) -> list[ConfigSummary]:
    """Group runs by (model, code, data), sorted by mean best validation loss; a warning names a
    configuration trained on different data."""
    groups: dict[tuple[str, str, str], list[RunSummary]] = {}
    for r in runs:
        groups.setdefault((r.model, r.code, r.data), []).append(r)
    datas: dict[tuple[str, str], list[str]] = {}
    for (model, code, _), rs in groups.items():
        datas.setdefault((model, code), []).append(rs[0].data_name)
    for (model, code), names in datas.items():
        if len(names) > 1:
            warnings.warn(f"runs of {model} ({code}) trained on different data ({', '.join(sorted(names))}): one row "
                          "per dataset, never pooled", SwarmctlWarning, stacklevel=2)
    rows = []
    for (model, code, _), rs in groups.items():
        vals = [r.best_val for r in rs]
        rows.append(ConfigSummary(
            model=model, code=code, parameters=rs[0].parameters, seeds=tuple(sorted(r.seed for r in rs)),
            val_mean=statistics.fmean(vals), val_std=statistics.stdev(vals) if len(vals) > 1 else 0.0,
            epochs=statistics.fmean(r.epochs for r in rs), net_minutes=statistics.fmean(r.net_minutes for r in rs),
            devices=tuple(sorted({r.device for r in rs})), data=rs[0].data_name, dataset=rs[0].dataset,
            hardware=tuple(dict.fromkeys(h for r in rs for h in r.hardware)), data_id=rs[0].data,
        ))
    return sorted(rows, key=lambda c: c.val_mean)


def pareto_front(points: list[tuple[int, float]]) -> list[int]:
    """Indices of the (parameters, loss) points no other point dominates, sorted by parameters."""
    keep = [i for i, (p, v) in enumerate(points) if not any(q <= p and w <= v and (q, w) != (p, v) for q, w in points)]
    return sorted(keep, key=lambda i: points[i][0])


def frontiers(rows: list[ConfigSummary]) -> dict[str, list[ConfigSummary]]:
    """Per model family, its Pareto-optimal configurations by (parameters, mean best loss)."""
    fams: dict[str, list[ConfigSummary]] = {}
    for r in rows:
        fams.setdefault(r.model, []).append(r)
    return {m: [rs[i] for i in pareto_front([(r.parameters, r.val_mean) for r in rs])] for m, rs in fams.items()}


def largest_explored(rows: list[ConfigSummary]) -> dict[str, int]:
    """Per model family, the parameter count of its largest configuration (the figure's end marker)."""
    return {m: max(r.parameters for r in rows if r.model == m) for m in dict.fromkeys(r.model for r in rows)}


@functools.cache
def paper_results() -> dict[str, Any]:
    """The paper's reported numbers (package data ``paper_results.json``)."""
    return json.loads(resources.files("swarmctl.studies").joinpath("paper_results.json").read_text())


@dataclass(frozen=True)
class PaperNumber:
    mean: float  # in the unit of swarmctl's validation loss for that model
    std: float | None

    def text(self) -> str:
        return f"{self.mean:.3f} ± {self.std:.3f}" if self.std is not None else f"{self.mean:.3f}"


def papers_data(model: str) -> dict[str, str] | None:
    """The data the paper measured ``model``'s numbers on (``name``, ``checksum``, ``about``; ``name`` absent
    where the number depends on a named dataset), or None."""
    tasks = [row["task"] for row in paper_results()["rows"] if row["model"] == model]
    return paper_results()["data"][tasks[0]] if tasks else None


def on_papers_data(model: str, data_name: str, data_id: str = "") -> bool:
    """Whether a run of ``model`` on data named ``data_name`` (with checksum ``data_id``) trained on the
    paper's data: the same file name or checksum (for images :func:`paper_number` asks the dataset)."""
    spec = papers_data(model)
    if spec is None:
        return False
    return "name" not in spec or data_name == spec["name"] or (bool(data_id) and data_id == spec.get("checksum"))


def paper_number(model: str, code: str, dataset: str | None = None) -> PaperNumber | None:
    """The paper's result for a configuration as a validation loss; None where the paper reports nothing for
    it (or, for images, without ``dataset``)."""
    for row in paper_results()["rows"]:
        if (row["model"], row["code"], row.get("dataset")) == (model, code, dataset):
            return PaperNumber(row["loss"], row["std"])
    return None


@dataclass(frozen=True)
class PaperPoint:
    """One of the paper's results drawn on the frontier figure, from the same table as the report's column."""

    model: str
    code: str
    parameters: int
    loss: float
    std: float | None


def paper_points(rows: list[ConfigSummary]) -> dict[str, list[PaperPoint]]:
    """Per model family with rows on the paper's data, the paper's results for it, sorted by parameters."""
    seen = {(r.model, r.dataset) for r in rows if r.paper_data}
    out: dict[str, list[PaperPoint]] = {}
    for row in paper_results()["rows"]:
        if (row["model"], row.get("dataset")) in seen:
            out.setdefault(row["model"], []).append(
                PaperPoint(row["model"], row["code"], int(row["parameters"]), float(row["loss"]), row["std"]))
    return {m: sorted(ps, key=lambda p: p.parameters) for m, ps in out.items()}


@dataclass(frozen=True)
class FrontierPanel:
    """The frontier figure's panel for one dataset: per family its Pareto-optimal configurations, its largest
    explored size, and the paper's points (only on the paper's data)."""

    title: str
    frontiers: dict[str, list[ConfigSummary]]
    largest: dict[str, int]
    paper: dict[str, list[PaperPoint]]
    papers_data: bool = False


def frontier_panels(rows: list[ConfigSummary]) -> list[FrontierPanel]:
    """One panel per dataset the rows trained on (by name and checksum), the paper's data first."""
    groups: dict[tuple[str, str], list[ConfigSummary]] = {}
    for r in rows:
        groups.setdefault((r.data, r.data_id), []).append(r)
    names = [name for name, _ in groups]
    panels = []
    for (name, data_id), rs in groups.items():
        shown = f"{name} (checksum {data_id[:12]})" if names.count(name) > 1 else name
        ours = [r for r in rs if r.paper_data]
        about = (papers_data(ours[0].model) or {}).get("about", "") if ours else ""
        title = (f"{shown}: the paper's data ({about})" if about else f"{shown}: the paper's data") if ours \
            else f"{shown}: not the paper's data (no paper points)"
        panels.append(FrontierPanel(title, frontiers(rs), largest_explored(rs), paper_points(rs), bool(ours)))
    return sorted(panels, key=lambda p: (not p.papers_data, p.title))


REPORT_COLUMNS = ("model", "code", "data", "parameters", "n", "seed ids", "best val loss", "paper", "epochs",
                  "net min", "hardware")
NUMBER_COLUMNS = ("parameters", "n", "epochs", "net min")
OPTIONAL_COLUMNS = ("seed ids", "parameters", "n")  # what a narrow terminal leaves out first


def _record(r: ConfigSummary | RunSummary) -> dict[str, Any]:
    """A row of the report as values (numbers, lists and null): a configuration, or a run with no finished epoch."""
    done = isinstance(r, ConfigSummary)
    ours = r.paper_data if done else on_papers_data(r.model, r.data_name, r.data)
    paper = paper_number(r.model, r.code, r.dataset) if ours else None  # beside a run on the paper's data only
    return {"model": r.model, "code": r.code, "data": r.data if done else r.data_name, "parameters": r.parameters,
            "n": len(r.seeds) if done else 0, "seeds": list(r.seeds) if done else [r.seed],
            "val_loss_mean": r.val_mean if done else None, "val_loss_std": r.error if done else None,
            "paper": paper and paper.mean, "paper_std": paper and paper.std, "epochs": r.epochs if done else None,
            "net_minutes": r.net_minutes if done else None, "devices": list(r.devices) if done else [r.device],
            "status": "finished" if done else "unfinished", "note": "" if done else f"{r.name}: {r.why}",
            "hardware": "; ".join(r.hardware or (r.devices if done else (r.device,))), "papers_data": ours}


def _cells(rec: dict[str, Any]) -> tuple[str, ...]:
    """A record as the table's text, one cell per column of :data:`REPORT_COLUMNS`."""
    val = "unfinished" if rec["status"] == "unfinished" else \
        f"{rec['val_loss_mean']:.4f}" + (f" ± {rec['val_loss_std']:.4f}" if rec["val_loss_std"] is not None else "")
    paper = "" if rec["paper"] is None else PaperNumber(rec["paper"], rec["paper_std"]).text()
    return (rec["model"], rec["code"], rec["data"], f"{rec['parameters']:,}", str(rec["n"]),
            ",".join(map(str, rec["seeds"])), val, paper, "" if rec["epochs"] is None else f"{rec['epochs']:.0f}",
            "" if rec["net_minutes"] is None else f"{rec['net_minutes']:.1f}", rec["hardware"])


def unfinished_line(unfinished: list[RunSummary]) -> str:
    """The line after the table naming the runs left out of it (empty when there are none)."""
    if not unfinished:
        return ""
    return ("unfinished (left out of the means and the figure): "
            + "; ".join(f"{u.name} ({u.why})" for u in unfinished))


def report_markdown(rows: list[ConfigSummary], unfinished: list[RunSummary] = ()) -> str:
    lines = ["| " + " | ".join(REPORT_COLUMNS) + " |", "|" + "---|" * len(REPORT_COLUMNS)]
    for r in [*rows, *unfinished]:
        cells = _cells(_record(r))
        lines.append("| " + " | ".join((cells[0], f"({cells[1]})", *cells[2:])) + " |")
    note = unfinished_line(list(unfinished))
    return "\n".join(lines) + "\n" + (f"\n{note}\n" if note else "")


@dataclass(frozen=True)
class Report:
    """A report: its rows (a configuration and dataset each, then the unfinished runs) as text in ``table``
    and as values in ``records``, the line naming the unfinished runs, and the frontier figure's panels."""

    runs_dir: Path
    out_dir: Path
    table: list[tuple[str, ...]]
    records: list[dict[str, Any]]
    note: str
    panels: list[FrontierPanel]

    @property
    def markdown(self) -> Path:
        return self.out_dir / "report.md"

    @property
    def figure(self) -> Path:
        return self.out_dir / "frontier.png"


@contextmanager
def report(runs_dir: Path, out: Path | None = None, default_runs_dir: Path = Path("runs"),
           force: bool = False) -> Iterator[Report]:
    """`swarmctl report`'s work: summarise the runs in ``runs_dir`` (or ``default_runs_dir/sweep-NAME``) and
    write report.md in ``out`` (default: the runs' folder; a named ``out``'s files are replaced only with
    ``force``). The caller draws the figure inside the block; both files appear, or neither."""
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir() and runs_dir.name.startswith("sweep-") and (default_runs_dir / runs_dir).is_dir():
        runs_dir = default_runs_dir / runs_dir
    with staged_outputs(replace=force or out is None) as outputs:
        runs, unfinished = read_all_runs(runs_dir)  # a folder without runs is named as such, not as an output
        out_dir = outputs.folder(out or runs_dir)
        for name in ("report.md", "frontier.png"):
            outputs.file(out_dir / name)
        rows = summarise(runs)
        records = [_record(r) for r in [*rows, *unfinished]]
        atomic_write_text(out_dir / "report.md", report_markdown(rows, unfinished))
        yield Report(runs_dir, out_dir, [_cells(r) for r in records], records, unfinished_line(unfinished),
                     frontier_panels(rows))
