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


def test_python_dash_m_works():
    out = subprocess.run([sys.executable, "-m", "swarmctl", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and __version__ in out.stdout
