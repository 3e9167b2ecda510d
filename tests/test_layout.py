"""Import rules of the house style that a test can hold: figures and configs load without torch."""

import subprocess
import sys

import swarmctl


def test_plots_and_results_import_without_torch():
    code = ("import sys\n"
            "import swarmctl.plots.curves, swarmctl.plots.entropy, swarmctl.plots.frontier, swarmctl.plots.samples\n"
            "import swarmctl.plots.shuffle, swarmctl.studies.report, swarmctl.studies.results\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_lazy_top_level_names():
    assert swarmctl.create_model(swarmctl.ModelConfig(name="set-linear")).symmetry == "equivariant"
    assert "swarm" in swarmctl.list_models()
