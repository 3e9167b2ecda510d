import subprocess
import sys

import pytest
from typer.main import get_command

from swarmctl import __version__
from swarmctl.cli import app

COMMANDS = sorted(get_command(app).commands)


def test_version(cli):
    result = cli("--version")
    assert result.exit_code == 0 and result.output.strip() == f"swarmctl {__version__}"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command, cli):
    result = cli(command, "--help")
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


def test_models_lists_every_registered_model_with_its_default_code(cli):
    result = cli("models")
    assert result.exit_code == 0
    for name, code, params in [("swarm", "192-10-1", "301,066"), ("set-transformer", "32-60-3", "57,642"),
                               ("lstm", "128-3", "928,266"), ("set-linear-max", "96-6", "77,012")]:
        line = next(ln for ln in result.output.splitlines() if f" {name} " in ln)
        assert code in line and params in line


def test_unknown_option_exits_2(cli):
    assert cli("models", "--nope").exit_code == 2


def test_the_suite_builds_the_apps_click_command_once(cli):
    """conftest.py caches typer.main.get_command before typer.testing takes it: without, each in-process
    command of the suite rebuilt the whole command tree (24 to 125 ms)."""
    import typer.main
    import typer.testing

    cli("--version")
    before = typer.main.get_command.cache_info()
    assert typer.testing.CliRunner().invoke(app, ["--version"]).exit_code == 0
    after = typer.main.get_command.cache_info()
    assert after.hits == before.hits + 1 and after.misses == before.misses


def test_no_arguments_shows_the_help_and_exits_2(cli):
    r = cli()
    assert r.exit_code == 2 and "Usage:" in r.stderr and "Commands" in r.stderr and r.stdout == "", r.output


@pytest.mark.parametrize("command", ["gen-data", "plot-entropy"])
def test_the_unreleased_task_spelling_is_no_option(cli, command):
    """``--task`` was a hidden second name of gen-data's ``--kind`` and plot-entropy's ``--index``, never released."""
    r = cli(command, "--task", "0", "--help")
    assert r.exit_code == 2 and "No such option" in r.output, r.output


def test_python_dash_m_works():
    out = subprocess.run([sys.executable, "-m", "swarmctl", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and __version__ in out.stdout


def test_train_help_shows_the_defaults_of_every_task_family(cli):
    from swarmctl.tasks import TASKS

    text = " ".join(cli("train", "--help").output.split())  # one line: the panel wraps long help texts
    assert "Hidden units H [default: the model's]" in text
    for task in TASKS.values():
        assert f"{task.name}: {task.defaults.batch_size}" in text  # batch sizes differ between all families
        assert task.name in text.split("--lr ")[1].split("--batch-size")[0]


def test_models_fits_80_columns():
    from typer.testing import CliRunner

    from swarmctl.cli import app
    from swarmctl.models import list_models

    out = CliRunner().invoke(app, ["models"], env={"COLUMNS": "80"}).output
    tables = [line for line in out.splitlines() if line.startswith((" ", "─"))]  # prose in a pipe: whole lines
    assert tables and max(len(line) for line in tables) <= 80 and "…" not in out
    for name in list_models():
        assert any(line.split()[:1] == [name] for line in out.splitlines()), name


def test_user_text_with_brackets_is_printed_as_written(cli, tmp_path):
    result = cli("eval", "run[bold]x", "--runs-dir", tmp_path)  # rich would read [bold] as a style
    assert result.exit_code == 1 and "run[bold]x" in result.output


def test_a_machine_without_dev_null_still_starts(monkeypatch):
    """The standard streams are refilled from /dev/null only where it opens; a bare container without it
    still runs every command."""
    import os

    from swarmctl.cli import prepare

    real_open = os.open

    def no_dev_null(path, *args, **kwargs):
        if path == os.devnull:
            raise FileNotFoundError(2, "No such file or directory", path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", no_dev_null)
    prepare()  # no OSError
