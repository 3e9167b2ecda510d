"""The maintainers' campaign commands, run from the repository's root (campaigns/README.md):

    python -m tools.campaigns run OUT       one job with a wall-time limit: continue every campaign
    python -m tools.campaigns commit OUT    check what a job returned and put it into the repository
    python -m tools.campaigns status        where each campaign stands, and what the next job would do

The limits of the environment a job runs in (its wall seconds, how many files it may return and how large
each may be, as on a Slurm cluster or a preemptible instance) are options of `run` (and of `status`, for
its plan), with their defaults here and nowhere else.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from swarmctl.cli._app import _OneLineErrors, _Typer
from swarmctl.cli._options import argument, checked, count, option, positive_number, say
from swarmctl.config import DATA_DIR
from swarmctl.errors import ConfigError
from tools.campaigns import DEVICES, NAMES, PROBES

if TYPE_CHECKING:
    from tools.campaigns.status import Status

# The limits of the jobs the campaigns run in: a job's wall seconds (some 30 s under its scheduler's limit),
# the files it may return and the MiB each may hold.
WALL_S = 540.0
FILES = 8
FILE_MIB = 16

app = _Typer(name="python -m tools.campaigns", cls=_OneLineErrors, no_args_is_help=True, add_completion=False,
             pretty_exceptions_enable=False,
             help="Continue the paper's experiments on a GPU, job by job, and commit what each job returned.")


def _one_of(choices: tuple[str, ...]) -> object:
    """An option callback: every value given (one, or a list) is one of ``choices`` (else exit 2)."""
    def check(value: str | list[str], flag: str) -> None:
        for name in [value] if isinstance(value, str) else value:
            if name not in choices:
                raise ConfigError(f"`{flag}` {name!r} is not one of {', '.join(choices)}")
    return checked(check)


Campaigns = Annotated[Path, option(help="The campaigns folder (each campaign's progress.json).")]
Wall = Annotated[float, positive_number(help="Seconds for the whole job (its wall-time limit).")]
Files = Annotated[int, count(low=3, help="Files the job may return (its record, its logs and at least one "
                                         "campaign's archive).")]
FileMib = Annotated[int, count(help="MiB each returned file may hold.")]
DataDir = Annotated[Path, option(help="Image files in torchvision's layout (DIR/MNIST/raw/).")]


@app.command("run")
def run_cmd(
    out: Annotated[Path, argument(help="Folder the job leaves its files in (at most --files, each of at most "
                                        "--file-mib MiB).")],
    wall: Wall = WALL_S,
    files: Files = FILES,
    file_mib: FileMib = FILE_MIB,
    smoke: Annotated[bool, option("--smoke", help="Tiny sizes: the whole job in minutes on a CPU.")] = False,
    retime: Annotated[bool, option("--retime", help="Measure the step modes again instead of reading the committed "
                                        "timings.")] = False,
    only: Annotated[list[str] | None, option(metavar="NAME", callback=_one_of(NAMES),
                                             help=f"Run only this campaign (repeatable): {', '.join(NAMES)}.")]
    = None,
    probe: Annotated[str, option(help=f"The task whose cold compile is probed: {', '.join(PROBES)}.",
                                 callback=_one_of(PROBES))] = PROBES[0],
    data_dir: DataDir = Path(DATA_DIR),
    campaigns: Campaigns = Path("campaigns"),
    work: Annotated[Path, option(help="Scratch folder (emptied first).")] = Path(".gpu-work"),
    device: Annotated[str, option(help="cuda: every campaign on the card; cpu: Table 2 on this machine's CPU "
                                       "(campaigns/clustering-cpu/), in place, run after run.",
                                  callback=_one_of(DEVICES))] = DEVICES[0],
    threads: Annotated[int, count(help="Threads each CPU training uses (--device cpu).")] = 1,
    parallel: Annotated[int, count(help="Runs trained at once, each held to --threads cores of its own "
                                        "(--device cpu).")] = 1,
    clustering_data: Annotated[Path, option(help="The seed-0 clustering file the CPU table trains on "
                                                 "(--device cpu).")] = Path("data/clustering-seed0.h5"),
) -> None:
    """Continue every campaign where the campaigns folder left it, within a wall-time limit.

    Phases, each leaving its result in OUT at once: the machine and the inputs; the GPU tests; the step
    timings (or the committed ones); the campaigns, furthest from the paper first. A SIGTERM (a scheduler's
    notice) stops the running commands the graceful way and packs what finished. Exit 0 when done, 130 when
    stopped by a signal, 1 without CUDA (unless --smoke). The work folder is emptied first: it must be new,
    empty or an earlier job's.

    With --device cpu the job trains Table 2's runs on this machine's CPU instead, --parallel at a time on
    --threads threads each, 60 net minutes each, in campaigns/clustering-cpu/ (resuming the run the last job
    stopped); OUT gets its record and logs. Exit 0 when it ended by itself, 130 when stopped by a signal."""
    _log_lines()
    if device == "cpu":
        from tools.campaigns.cpu import check_cpu_job, run_cpu_job

        check_cpu_job(campaigns, clustering_data)
        code = run_cpu_job(campaigns, out, wall, threads, clustering_data, parallel=parallel)
    else:
        if parallel != 1 or threads != 1:  # the card job's own rule sets its trainings' threads
            raise ConfigError(f"`--{'parallel' if parallel != 1 else 'threads'}` applies to the CPU table's job "
                              "only; add `--device cpu` or leave it out")
        from tools.campaigns.job import JobOptions, run_job

        code = run_job(JobOptions(out, wall, files, file_mib, campaigns, data_dir, work, retime, probe,
                                  tuple(only or ()), smoke))
    raise typer.Exit(code)


@app.command("commit")
def commit_cmd(
    returned: Annotated[Path, argument(help="The folder a job's files came back to (its OUT).")],
    campaigns: Campaigns = Path("campaigns"),
    pretrained: Annotated[Path | None, option(help="The folder of shipped models [default: the package's, or "
                                                   "$SWARMCTL_PRETRAINED].")] = None,
    data_dir: Annotated[Path | None, option(help="Torchvision image files to re-evaluate an image candidate on "
                                                 f"[default: the run's data folder, else {DATA_DIR}/].")] = None,
    clustering_data: Annotated[Path | None, option(help="The seed-0 clustering file to re-evaluate a clustering "
                                                        "candidate on [default: the run's file, else the "
                                                        "clustering task's default file].")] = None,
    subset: Annotated[int | None, option(min=2, help="Items a candidate is re-evaluated on [default: 1000 "
                                                     "clustering tasks, 500 test images].")] = None,
    keep_shipped: Annotated[bool, option("--keep-shipped", help="Commit the session without re-evaluating or "
                                                                "replacing any shipped model.")] = False,
) -> None:
    """Check what a job returned and put it into the campaigns (and the shipped models), all or nothing.

    Every returned file is checked before anything changes; a candidate replaces a shipped model only when
    its re-evaluation here confirms its number and it beats the shipped weights on the same items. A
    refusal is one line, and changes nothing."""
    from tools.campaigns.commit import CommitOptions, commit

    opts = CommitOptions(data_dir, clustering_data, subset, keep_shipped)
    lines = commit(returned, campaigns, pretrained, opts, say=say)
    for line in lines:
        say(line)


@app.command("status")
def status_cmd(
    campaigns: Campaigns = Path("campaigns"),
    wall: Annotated[float, positive_number(help="Seconds of the next job, for its plan.")] = WALL_S,
    files: Files = FILES,
) -> None:
    """Show where each campaign stands against the paper, and what the next job would do."""
    from tools.campaigns.status import campaign_status

    _print_status(campaign_status(campaigns, wall, files))


def _print_status(status: Status) -> None:
    for c in status.campaigns:
        ours = "none yet" if c.ours is None else f"{c.ours:.4f}"
        paper = "" if c.paper is None else f" (paper {c.paper:.4f})"
        say(f"{c.name}: {c.metric} {ours}{paper}; {c.done}; {c.sessions} session(s)")
        if c.order is None:
            say("  next job: not run (met the paper, or waiting for another campaign)")
        else:
            mode = "the trainer's default" if c.flags is None else \
                " ".join(f for f in c.flags if f != "--step") or "eager"
            # the clustering table reserves nothing: it runs a group of runs when what is left holds one
            when = f"on what the campaigns before it leave (a group of its runs needs {status.table.group_s:.0f} s)" \
                if c.name == "clustering" else f"for about {c.share_s:.0f} s"
            say(f"  next job: runs it {_ordinal(c.order)} (gap {c.gap:.3f}) {when}, step mode {mode}")
    if status.waiting:
        say(f"  waiting: {', '.join(status.waiting)} (a job returns at most {status.files} files, too few for every "
            "campaign's; of those that return checkpoints, the one with more sessions runs in a later job)")
    say(f"step timings: {status.timing_from or 'none measured yet (the next job measures them)'}")
    t = status.table
    fit = "the card's memory not known yet" if t.fit is None else \
        f"{t.fit} fit on {status.card} by memory (the largest run about {t.run_gib:.1f} GiB)"
    jobs = "a group of runs does not fit in one job" if t.jobs is None else f"{t.jobs} job(s)"
    say(f"the clustering table: {t.runs_left} of {t.runs} runs left; {fit}; {t.side} side by side, "
        f"{t.minutes_per_run:g} net min each ({t.group_s:.0f} s a group): {jobs} of {t.wall:.0f} s with the card "
        "to itself")
    _print_cpu_plan(status)
    say("the paper's tables (GPU minutes: what the row's campaign still needs):")
    for r in status.rows:
        ours = "none yet" if r.ours is None else f"{r.ours:.4f}"
        step = "" if r.step_s is None else f", step {r.step_s * 1e3:.1f} ms"
        left = "" if r.minutes_left is None else f", {r.minutes_left:.0f} GPU min left"
        name = f"{r.model} ({r.code}){'' if r.dataset is None else ' on ' + r.dataset}"
        say(f"  {r.table}: {name}: paper {r.paper:g}, ours {ours}{step}{left}; {r.note}")


def _print_cpu_plan(status: Status) -> None:
    """The clustering table on a CPU (`run --device cpu`): each row's measured cost and the CPU hours it needs."""
    measured = f"cost measured on {status.cpu_cost_from}" if status.cpu_cost_from else \
        "cost not measured yet: benchmarks/table2_cpu_cost.py"
    say(f"the clustering table on a CPU (campaigns/clustering-cpu; {measured}), rows in the order the CPU job "
        "runs them:")
    for r in status.cpu:
        say(cpu_plan_line(r))


def cpu_plan_line(r) -> str:
    """One row of the CPU plan: its measured cost, its seeds, and its CPU hours for three seeds at the protocol
    and to a flat validation curve (``r``: a :class:`tools.campaigns.cpu.CpuRow`)."""
    cost = ", ".join(f"{s:.0f} s an epoch on {t} thread{'s' if t > 1 else ''}" for t, s in sorted(r.epoch_s.items()))
    epochs = "" if r.epochs_per_run is None else f" ({r.epochs_per_run:.0f} epochs in 60 net min on 1 thread)"
    done = f"{r.done} of 3 seeds done" + (f" (val loss {', '.join(f'{v:.4f}' for v in r.losses)}; epochs "
                                          f"{', '.join(map(str, r.epochs))})" if r.done else "")
    if r.in_progress:
        done += f"; in progress: {r.in_progress}"
    if r.hours_flat is not None:
        flat = f"; to a flat curve: {r.hours_flat:.1f} CPU h for 3 seeds"
    elif r.hours_flat_more is not None:  # still improving at the end of its runs, or of a shipped model's
        flat = f"; to a flat curve: more than {r.hours_flat_more:.1f} CPU h for 3 seeds"
    else:
        flat = ""
    return (f"  {r.model} ({r.code}): {cost or 'cost not measured'}{epochs}; {done}; {r.hours_seeds:.1f} CPU h for "
            f"3 seeds at 60 net min a run, {r.hours_protocol:.1f} left{flat}; {r.note}")


def _ordinal(n: int) -> str:
    return {1: "1st", 2: "2nd", 3: "3rd"}.get(n, f"{n}th")


def _log_lines() -> None:
    """Print the job's log (the ``tools.campaigns`` logger) as time-stamped lines: on standard output, and
    what went wrong and the signal that stopped the job (its warnings) on standard error."""
    import logging
    import sys

    class Current(logging.StreamHandler):  # the stream of the moment (a test harness swaps and closes them)
        def __init__(self, name: str) -> None:
            super().__init__()
            self.name_ = name

        def emit(self, record: logging.LogRecord) -> None:
            self.stream = getattr(sys, self.name_)
            super().emit(record)

    log = Current("stdout")
    log.addFilter(lambda record: record.levelno < logging.WARNING)
    errors = Current("stderr")
    errors.setLevel(logging.WARNING)
    for handler in (log, errors):
        handler.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", datefmt="%H:%M:%S"))
    logger = logging.getLogger("tools.campaigns")
    logger.handlers[:] = [log, errors]
    logger.setLevel(logging.INFO)
    logger.propagate = False


def main() -> None:
    """`python -m tools.campaigns`: run as `swarmctl` runs (its streams, threads, signals and exit codes)."""
    from swarmctl.cli import main as run_as_swarmctl

    run_as_swarmctl(lambda: app)
