"""Bad option values, generated, through every command: each ends with the one exit code docs/guarantees.md
gives its kind, no traceback, a message of at most 3 lines that names the option for a value wrong in itself
(exit 2), and nothing written or changed.

Two generators feed it. A walk over every option of every command, subcommands of groups included, introspected
from the app (a new option or command is covered without touching this file), gives each option values wrong for
its type: integers -1 and numbers that are not whole (8.0, 5., 1e3, 8_000, 0x10, eight), floats a non-number,
NaN and -1, choices an unknown one, paths a place under a file (a file-system problem: 1), text options what
STRINGS says. Values drawn (seeded) from kinds wrong for the option they go to come with arguments that make the
command valid otherwise: sizes <= 0, sizes too large for memory, non-finite or out-of-range floats, seeds outside
0..2^32-1, unknown names and devices, run names leaving the runs folder, and output paths under a file or onto a
folder. The default suite tries the first option of each type, and of each kind the walk does not give; the slow
one every option."""

import enum
import hashlib
import math
import random
import re
import shutil
import string
import typing
from pathlib import Path

import pytest
import typer
from conftest import tiered, write_fake_mnist

from swarmctl.cli import app
from swarmctl.config import DataConfig, ModelConfig, TrainConfig
from swarmctl.data.clustering_generator import ClusteringParams
from swarmctl.data.hdf5 import generate_dataset
from swarmctl.runs import start_run

# ---- drawn values of kinds wrong for their option, the rest of the command line valid ---------------------------

DRAWS = 3  # values per (command, option); each command run in-process takes well under a second


def _nonpositive(rng):
    return rng.choice([0, -1, -rng.randint(2, 10**6)])


def _huge(rng):
    return 10 ** rng.randint(10, 15) + rng.randint(0, 9)


def _bad_float(rng, low=0.0, high=math.inf, low_ok=False):
    """nan or inf, or a finite value outside [low, high] (outside (low, high] when not ``low_ok``)."""
    finite = [low - rng.uniform(0.001, 1e6)] + ([] if low_ok else [low]) + ([high + rng.uniform(1e-3, 1e30)]
                                                                         if math.isfinite(high) else [])
    return rng.choice(["nan", "inf", "-inf", "NaN", *[repr(v) for v in finite]])


def _seed(rng):
    return rng.choice([-rng.randint(1, 2**40), 2**32 + rng.randint(0, 2**40)])


def _word(rng):
    alphabet = string.ascii_letters + "[]/-_ "
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) + rng.choice(["", "[bold]", "[/]"])


def _device(rng):
    return rng.choice(["tpu", "gpu", "cuda:", "cuda:x", "cpu0", "CUDA", "mps0", _word(rng)])


def _run_name(rng):
    return rng.choice(["..", ".", "../x", "../../" + _word(rng).replace("/", ""), "/abs/" + _word(rng), "a/../../b"])


KINDS = {
    "nonpositive": _nonpositive,
    "huge": _huge,
    "seed": _seed,
    "word": _word,
    "device": _device,
    "run_name": _run_name,
    "positive_float": lambda rng: _bad_float(rng),
    "lr": lambda rng: _bad_float(rng, 0.0, 1.0),
    "fraction": lambda rng: _bad_float(rng, 0.0, 1.0 - 1e-9),
    "nonnegative_float": lambda rng: _bad_float(rng, 0.0, low_ok=True),
    "wishart_df": lambda rng: _bad_float(rng, 1.0),
    "out_file": lambda rng: rng.choice(["{file}/x.out", "{folder}", "{file}/a/b.out"]),
    "out_folder": lambda rng: rng.choice(["{file}/x", "{file}", "{file}/a/b"]),
}

# The exit code of each kind (swarmctl.errors): a value wrong in itself exits 2; a valid value the machine
# or the file system cannot serve (memory, an output path under a file) exits 1.
EXIT = {"nonpositive": 2, "huge": 1, "seed": 2, "word": 2, "device": 2, "run_name": 2,
        "positive_float": 2, "lr": 2, "fraction": 2, "nonnegative_float": 2, "wishart_df": 2, "out_file": 1,
        "out_folder": 1}
# (command, option, kind) whose code differs: refused by range before any memory estimate (2), or
# valid in itself but absent from the file it names (1)
EXIT_OVERRIDE = {("eval", "--split", "word"): 1,  # a split the data file does not have
                 ("sample", "--out", "out_file"): 2,  # not a .png name: wrong in itself
                 ("gen-data", "--n-max", "huge"): 2, ("plot-entropy", "--index", "huge"): 2,
                 ("plot-entropy", "--grid", "huge"): 2}

# command -> (arguments that make it valid, {option: kinds of bad values})
SWEEP = {
    "gen-data": (["--out", "{new}/data.h5", "--tasks", 20, "--n-min", 10, "--n-max", 30], {
        "--seed": ["seed"], "--tasks": ["nonpositive", "huge"], "--val-fraction": ["fraction"],
        "--k-min": ["nonpositive"], "--k-max": ["nonpositive"], "--n-min": ["nonpositive"],
        "--n-max": ["nonpositive", "huge"], "--wishart-df": ["wishart_df"], "--wishart-scale": ["positive_float"],
        "--kind": ["word"], "--out": ["out_file"]}),
    "train": (["swarm", "--data", "{data}", "--runs-dir", "{new}", "--max-epochs", 1, "--hidden", 8, "--iters", 2,
               "--device", "cpu"], {
        "--hidden": ["nonpositive", "huge"], "--iters": ["nonpositive"], "--layers": ["nonpositive"],
        "--pooling": ["word"], "--dropout": ["fraction"], "--lr": ["lr"], "--batch-size": ["nonpositive"],
        "--minutes": ["positive_float"], "--max-epochs": ["nonpositive"], "--seed": ["seed"],
        "--steps-per-epoch": ["nonpositive"], "--beta": ["nonnegative_float"],
        "--alpha": ["fraction"], "--device": ["device"], "--name": ["run_name"], "--runs-dir": ["out_folder"],
        "--dataset": ["word"]}),
    "eval": (["clu", "--runs-dir", "{runs}", "--device", "cpu", "--out", "{new}/eval.json"], {
        "--device": ["device"], "--split": ["word"], "--out": ["out_file"]}),
    "plot-entropy": (["clu", "--runs-dir", "{runs}", "--device", "cpu", "--grid", 4, "--clusters", 2,
                      "--out", "{new}/e"], {
        "--index": ["huge"], "--clusters": ["nonpositive"], "--grid": ["nonpositive", "huge"],
        "--device": ["device"], "--out": ["out_folder"]}),
    "shuffle-variance": (["clu", "--runs-dir", "{runs}", "--device", "cpu", "--tasks", 2, "--shuffles", 3,
                          "--out", "{new}/s"], {
        "--tasks": ["nonpositive"], "--shuffles": ["nonpositive"], "--seed": ["seed"], "--device": ["device"],
        "--out": ["out_folder"]}),
    "sample": (["--runs-dir", "{runs}", "--device", "cpu", "--per-class", 1, "--out", "{new}/s.png"], {
        "--per-class": ["nonpositive"], "--temperature": ["positive_float"], "--seed": ["seed"],
        "--device": ["device"], "--dataset": ["word"], "--out": ["out_file"]}),
    "report": (["--runs-dir", "{runs}", "--out", "{new}/r"], {"--out": ["out_folder"]}),
}

# The kinds the walk below does not give (a count past memory, a seed past 2^32, a run name leaving the runs
# folder, an output path under a file or onto a folder, a float past its upper bound): their first option in the
# default suite. A negative count, an unknown name or device and a float NaN or below its range are the walk's
# values, whose default cases check the same rule: every option with them in the slow suite.
UNWALKED = {"huge", "seed", "run_name", "lr", "out_file", "out_folder"}


def _drawn_cases():
    """(command, option, kind) of SWEEP, the first option of each kind of UNWALKED in the default suite."""
    out, first = [], set()
    for command, (_, options) in SWEEP.items():
        for option, kinds in options.items():
            out += [tiered(command, option, kind, default=kind in UNWALKED and kind not in first) for kind in kinds]
            first.update(kinds)
    return out


DRAWN = _drawn_cases()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A dataset, a trained clustering run ``clu`` and image run ``img``, a file and a folder to misuse as
    paths."""
    root = tmp_path_factory.mktemp("sweep")
    data = root / "data.h5"
    generate_dataset(data, ClusteringParams(n_tasks=24, val_fraction=0.25, k_min=2, k_max=4, n_min=8, n_max=20),
                     seed=0)
    runs = root / "runs"
    start_run(ModelConfig(name="swarm", dim_hidden=8, n_iter=2), TrainConfig(batch_size=6, max_epochs=1,
              device="cpu"), DataConfig(path=str(data)), runs, "clu")
    images = write_fake_mnist(root / "images")
    start_run(ModelConfig(name="swarm-image", dim_hidden=8, n_iter=2), TrainConfig(batch_size=20, max_epochs=1,
              device="cpu"), DataConfig(path=str(images), dataset="mnist"), runs, "img")
    (root / "a-file").write_text("not a folder\n")
    (root / "a-folder").mkdir()
    return root


def _snapshot(root):
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


def _fill(value, world):
    return str(value).format(data=world / "data.h5", runs=world / "runs", new=world / "new", file=world / "a-file",
                             folder=world / "a-folder")


# What a message built for the library's own eyes looks like: a parameter in backticks the command did not
# turn into its flag (`dim_hidden`), a Python tuple or list of choices (('mean', 'causal')).
_UNREAD = re.compile(r"`[a-z][a-z0-9_]*`|[(\[]'[^']*',")


@pytest.mark.parametrize(("command", "option", "kind"), DRAWN, ids=["{}{}-{}".format(*c.values) for c in DRAWN])
def test_a_bad_value_fails_in_one_line_and_changes_nothing(cli, world, command, option, kind):
    rng = random.Random(f"{command} {option} {kind}")
    base, _ = SWEEP[command]
    for _ in range(DRAWS):
        value = _fill(KINDS[kind](rng), world)
        args = [_fill(a, world) for a in base]
        if option in args:  # replace the valid value the base arguments give
            i = args.index(option)
            del args[i:i + 2]
        before = _snapshot(world)
        r = cli(command, *args, f"{option}={value}")
        lines = [line for line in r.output.splitlines() if line.strip()]
        context = f"swarmctl {command} {option}={value!r}: exit {r.exit_code}\n{r.output}"
        assert r.exit_code == EXIT_OVERRIDE.get((command, option, kind), EXIT[kind]), context
        assert "Traceback" not in r.output, context
        assert r.exception is None or isinstance(r.exception, SystemExit), context
        assert 1 <= len(lines) <= 3, context
        assert _snapshot(world) == before, context  # no new file; every input byte-identical
        assert not _UNREAD.search(r.output), context
        if r.exit_code == 2:  # a value wrong in itself: the message names the option it came through
            assert option in r.output, context


# each command in the tier that runs its drawn values: the default suite's cases are all of gen-data and train
@pytest.mark.parametrize("command", [tiered(command, default=any(c.values[0] == command and not c.marks
                                                                   for c in DRAWN)) for command in SWEEP])
def test_the_base_arguments_work(cli, world, command):
    """Each bad value above is refused for itself: the arguments it replaces one of succeed."""
    r = cli(command, *[_fill(a, world) for a in SWEEP[command][0]])
    try:
        assert r.exit_code == 0, r.output
    finally:
        shutil.rmtree(world / "new", ignore_errors=True)


# ---- the walk: every option of every command, a value wrong for its type ---------------------------------------

# text options: a value wrong for each and its code (None: free text, such as a title, has no wrong value)
STRINGS = {"--device": ("tpu", 2), "--pooling": ("no-such", 2), "--dataset": ("no-such", 2), "--shard": ("0/0", 2),
           "--columns": ("0,00", 2), "--name": ("..", 2),
           "--split": ("no-such", 1), "--key": ("no-such", 1), "--run": ("no-such", 1), "--resume": ("no-such", 1),
           "--step": ("turbo", 2), "--only": ("no-such", 2), "--probe": ("no-such", 2), "--title": None}
ARGUMENT = {("train",): "swarm"}  # a command's positional arguments, where "x" would fail first
CONTEXT = {("train", "--data-dir"): ["swarm-image"]}  # arguments for an option that applies only to some models
# every value for two options, one value (which int() itself would take) for every other option in the default
# suite; every pair in the slow one
NOT_WHOLE = ["8.0", "5.", "1e3", "8_000", "0x10", "eight"]


def _commands(command: typing.Any, path: tuple[str, ...] = ()):
    if hasattr(command, "commands"):  # a group: walk its subcommands
        for name, sub in command.commands.items():
            yield from _commands(sub, (*path, name))
    else:
        yield path, command


def _type(param: typing.Any) -> typing.Any:
    """The option's Python type (``int`` for ``int | None``), or "choice" for a choice (a Literal or an Enum)."""
    annotation = param.type_descriptor.annotation
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    kind = args[0] if args and typing.get_origin(annotation) is not typing.Literal else annotation
    if typing.get_origin(kind) is typing.Literal or (isinstance(kind, type) and issubclass(kind, enum.Enum)):
        return "choice"
    return kind


def _cases():
    out, first = [], set()
    for path, command in _commands(typer.main.get_command(app)):
        arguments = [ARGUMENT.get(path, "x") for p in command.params if p.param_type_name == "argument" and p.required]
        for param in command.params:
            if param.param_type_name != "option" or param.is_flag or param.hidden:
                continue
            flag = max((o for o in param.opts if o.startswith("--")), key=len)
            kind = _type(param)
            if kind is int:
                wrong = [("-1", 2), *((value, 2) for value in NOT_WHOLE)]
            elif kind is float:
                wrong = [("x1", 2), ("nan", 2), ("-1", 2)]
            elif kind == "choice":
                wrong = [("no-such", 2)]
            elif kind is Path:
                wrong = [("{file}/x.png", 1)]
            elif kind is str and flag in STRINGS:
                wrong = [STRINGS[flag]] if STRINGS[flag] is not None else []
            else:
                wrong = [(None, f"{kind} option {flag} of `{' '.join(path)}` is not walked: give it a wrong value")]
            args = CONTEXT.get((*path, flag), arguments)
            default = kind not in first  # the first option of each type in the default suite
            first.add(kind)
            out += [tiered(path, flag, args, value, code, default=default) for value, code in wrong]
    return out


WALK = _cases()


@pytest.mark.parametrize(("path", "flag", "args", "value", "code"), WALK,
                         ids=[f"{' '.join(c.values[0])}{c.values[1]}={c.values[3]}" for c in WALK])
def test_every_option_refuses_a_wrong_value_with_the_rules_code(cli, tmp_path, monkeypatch, path, flag, args,
                                                                value, code):
    assert value is not None, code  # an option of a type this walk does not know yet
    monkeypatch.chdir(tmp_path)  # relative defaults (runs/, campaigns/, data/) never reach the checkout
    (tmp_path / "a-file").write_text("not a folder\n")
    value = value.format(file=tmp_path / "a-file")
    r = cli(*path, *args, f"{flag}={value}")
    context = f"swarmctl {' '.join(path)} {' '.join(args)} {flag}={value}: exit {r.exit_code}\n{r.output}"
    assert r.exit_code == code, context
    assert "Traceback" not in r.output and (r.exception is None or isinstance(r.exception, SystemExit)), context
    assert 1 <= len([line for line in r.output.splitlines() if line.strip()]) <= 3, context
    if code == 2:
        assert flag in r.output, context
    if value in NOT_WHOLE:
        assert "whole number" in r.output and re.search(r"got '?" + re.escape(value), r.output), context


def test_the_walk_reaches_every_command_and_the_options_of_groups():
    walked = {case.values[0] for case in WALK}
    commands = {path for path, _ in _commands(typer.main.get_command(app))}
    assert walked == {p for p in commands if any(o.param_type_name == "option" and not o.is_flag
                                                 for o in dict(_commands(typer.main.get_command(app)))[p].params)}
    assert len(walked) >= 9


def test_every_integer_option_is_walked():
    walked = {(c.values[0], c.values[1]) for c in WALK if c.values[3] == "8_000"}
    assert {(("train",), "--hidden"), (("train",), "--max-epochs"), (("cluster",), "--chunk-size"),
            (("gen-data",), "--tasks")} <= walked


# ---- studies, replots and run arguments --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def mog_run(world):
    """A tiny MoG-parameter run ``mog`` beside ``clu``."""
    start_run(ModelConfig(name="swarm-mog", dim_hidden=8, n_iter=2), TrainConfig(batch_size=4, max_epochs=1,
              steps_per_epoch=2, val_batches=1, device="cpu"), DataConfig(path=None), world / "runs", "mog")
    return world


@pytest.mark.parametrize("args", [
    ["plot-entropy", "mog", "--grid", 4],
    ["plot-entropy", "mog", "--grid", 4, "--data", "{data}"],
    ["shuffle-variance", "mog", "--tasks", 2, "--shuffles", 3],
    ["shuffle-variance", "clu", "mog", "--tasks", 2, "--shuffles", 3, "--data", "{data}"],
])
def test_a_study_refuses_a_run_of_another_task_before_writing(cli, mog_run, args):
    before = _snapshot(mog_run)
    r = cli(*[_fill(a, mog_run) for a in args], "--runs-dir", mog_run / "runs", "--device", "cpu")
    assert r.exit_code == 1 and "needs a clustering run" in r.output and "Traceback" not in r.output, r.output
    assert len([line for line in r.output.splitlines() if line.strip()]) <= 3
    assert _snapshot(mog_run) == before


# one reader of saved study results for both (studies.results): the cheaper study in the default suite
@pytest.mark.parametrize("command", [tiered("plot-entropy", default=False), tiered("shuffle-variance", default=True)])
def test_replot_of_an_empty_or_cut_saved_result_is_one_line(cli, world, command, tmp_path):
    out = tmp_path / "out"
    r = cli(command, "clu", "--runs-dir", world / "runs", "--device", "cpu", "--out", out,
            *(["--grid", 4, "--index", 0] if command == "plot-entropy" else ["--tasks", 2, "--shuffles", 3]))
    assert r.exit_code == 0, r.output
    npz = next(out.glob("*.npz"))
    whole = npz.read_bytes()
    rng = random.Random(command)
    for cut in [0, 10, len(whole) // 2, len(whole) - 1, *(rng.randrange(len(whole)) for _ in range(3))]:
        npz.write_bytes(whole[:cut])
        before = _snapshot(tmp_path)
        r = cli(command, "clu", "--runs-dir", world / "runs", "--out", out, "--replot")
        assert r.exit_code == 1 and "Traceback" not in r.output, (cut, r.output)
        assert "study result" in r.output and len(r.output.strip().splitlines()) <= 3, (cut, r.output)
        assert _snapshot(tmp_path) == before


@pytest.mark.parametrize(("args", "instead"), [
    (["shuffle-variance", "{runs}/clu/best.pt"], "give its run folder {runs}/clu"),
    (["shuffle-variance", "clu", "{file}"], "give a run name or a run folder"),
    (["plot-entropy", "{runs}/clu/last.pt"], "give its run folder {runs}/clu, or leave out RUN for the shipped model"),
    (["plot-entropy", "{file}", "--replot"], "give a run name or a run folder"),
    (["train", "swarm", "--resume", "{runs}/clu/best.pt"], "give its run folder {runs}/clu"),
], ids=["shuffle-variance", "shuffle-variance-any-file", "plot-entropy", "plot-entropy-replot", "train-resume"])
def test_a_checkpoint_file_where_a_run_is_expected_says_so(cli, world, args, instead):
    """`eval` and `cluster` take a checkpoint file; the commands that take a run say that a file is not one,
    and what to give instead, rather than that there is no such run."""
    before = _snapshot(world)
    r = cli(*[_fill(a, world) for a in args], "--runs-dir", world / "runs", "--device", "cpu")
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    message = " ".join(r.output.split())
    assert "takes a run, not a checkpoint file" in message and _fill(instead, world) in message, message
    assert "no run" not in message and _snapshot(world) == before


# ---- messages that name the option, the task and every usable model --------------------------------------------

def test_a_bad_temperature_is_named_by_its_flag(cli, world):
    before = _snapshot(world)
    r = cli("sample", "--runs-dir", world / "runs", "--device", "cpu", "--temperature", 0, "--out", world / "new/s.png")
    assert r.exit_code == 2 and "'--temperature': must be > 0" in r.output and "the value" not in r.output, r.output
    assert _snapshot(world) == before


def test_a_run_of_another_task_is_named_with_its_article_and_every_usable_model(cli, mog_run):
    from swarmctl.models import list_models

    r = cli("sample", "--run", "clu", "--runs-dir", mog_run / "runs", "--device", "cpu")
    assert r.exit_code == 1 and "needs an image run" in r.output and "is a clustering run" in r.output, r.output
    r = cli("cluster", mog_run / "a-file", "mog", "--runs-dir", mog_run / "runs", "--device", "cpu",
            "--out", mog_run / "new" / "c.csv")
    message = " ".join(r.output.split())
    assert r.exit_code == 1 and "needs a clustering run" in message and "is a mog run" in message, message
    assert all(m in message for m in list_models("clustering")), message  # swarm, the shipped one, included


@pytest.mark.parametrize("args", [["train", "swarm", "--threads", "2"], ["cluster", "p.csv", "--threads=2"],
                                  ["report", "--threads", "2"], ["models", "--version"]])
def test_an_option_of_swarmctl_itself_after_the_command_says_where_it_goes(cli, args):
    """`swarmctl train --threads 2`: one line saying that --threads goes before the command (`swarmctl --threads 2
    train`), not click's "No such option" with options of the command's own."""
    r = cli(*args)
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert r.exit_code == 2 and len(lines) == 1, r.output
    flag = args[-2] if args[-1] == "2" else args[-1].split("=")[0]
    assert f"swarmctl {flag}" in lines[0] and "before the command" in lines[0], r.output
