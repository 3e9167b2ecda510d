"""`swarmctl gen-data`: seeded tasks of one kind (a task's data) to HDF5."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from swarmctl.catalog import tasks as catalog_tasks
from swarmctl.cli._app import app
from swarmctl.cli._options import count, flush_output, number, option, say, seed_option

_KINDS = [t for t in catalog_tasks() if t["data_kind"] is not None]
_KIND_NAMES = tuple(t["data_kind"] for t in _KINDS)  # the choices of --kind
_GENERATOR: dict[str, Any] = {}  # generator parameter -> (default, kinds that take it)
for _t in _KINDS:
    for _name, _default in _t["generator"].items():
        _GENERATOR.setdefault(_name, (_default, []))[1].append(_t["data_kind"])


def _param_help(text: str, name: str) -> str:
    default, kinds = _GENERATOR[name]
    return f"{text} [{', '.join(kinds)} only; default: {default:g}]."


_TASKS_DEFAULT = (f"{_KINDS[0]['default_tasks']:,}" if len({t["default_tasks"] for t in _KINDS}) == 1
                  else "; ".join(f"{t['data_kind']}: {t['default_tasks']:,}" for t in _KINDS))
_HELP = ("Generate seeded tasks of one kind and write them to HDF5.\n\n"
         + "\n\n".join(f"{t['data_kind']}: {t['data_kind_help']}." for t in _KINDS)
         + "\n\nSame seed, same arrays.")


@app.command("gen-data", help=_HELP)
def gen_data_cmd(
    seed: Annotated[int, seed_option(help="Seed of the legacy NumPy RandomState (0: the paper's draws).")] = 0,
    kind: Annotated[Literal[_KIND_NAMES], option(help="The kind of tasks.")] = _KINDS[0]["data_kind"],  # type: ignore[valid-type]
    out: Annotated[Path | None, option(help="Output file [default: " + " or ".join(
        t["data_file"] for t in _KINDS) + "].")] = None,
    tasks: Annotated[int | None, count(help=f"Number of tasks (train + validation) [default: {_TASKS_DEFAULT}].")]
    = None,
    val_fraction: Annotated[float | None, number(float, help=_param_help(
        "Fraction of tasks, taken from the end, for validation", "val_fraction"))] = None,
    k_min: Annotated[int | None, count(help=_param_help("Fewest clusters per task", "k_min"))] = None,
    k_max: Annotated[int | None, count(help=_param_help("Most clusters per task (at most 10)", "k_max"))] = None,
    n_min: Annotated[int | None, count(help=_param_help("Fewest points per task (at least 2)", "n_min"))] = None,
    n_max: Annotated[int | None, count(help=_param_help("Most points per task", "n_max"))] = None,
    wishart_df: Annotated[float | None, number(float, help=_param_help(
        "Degrees of freedom of the inverse-Wishart covariances", "wishart_df"))] = None,
    wishart_scale: Annotated[float | None, number(float, help=_param_help(
        "Scale s of the inverse-Wishart (scale matrix s*I)", "wishart_scale"))] = None,
    force: Annotated[bool, option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    from swarmctl.cli._progress import DataGenerationProgress
    from swarmctl.studies.datasets import generated_data

    with generated_data(kind, out, seed, tasks, force=force, progress=DataGenerationProgress(),
                        val_fraction=val_fraction, k_min=k_min, k_max=k_max, n_min=n_min, n_max=n_max,
                        wishart_df=wishart_df, wishart_scale=wishart_scale) as made:
        say(f"wrote {made.path}: {made.holds}, seed {seed}, {made.seconds:.1f} s (checksum "
            f"{made.checksum[:12]})")
        flush_output()  # the file appears once this is printed, or not at all
