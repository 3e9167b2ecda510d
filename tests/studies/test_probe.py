"""The probe of plot-entropy: its definition, its limits against the exact computation, and its CLI."""

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from swarmctl.cli import app
from swarmctl.config import ModelConfig
from swarmctl.data.hdf5 import read_split
from swarmctl.errors import ConfigError
from swarmctl.models import create_model
from swarmctl.plots.entropy import plot_class_maps, plot_entropy_map
from swarmctl.runs import load_model
from swarmctl.studies.entropy import compute_entropy_map
from swarmctl.studies.probe import probe_outputs, probe_supported

runner = CliRunner()


def swarm(layers=1, hidden=12, iters=4, pooling="mean"):
    model = create_model(ModelConfig(name="swarm", dim_hidden=hidden, n_iter=iters, n_layers=layers, pooling=pooling))
    with torch.no_grad():  # larger population weights than the default init, so that x* visibly matters
        for layer in model.layers:
            layer.cell.population.weight.mul_(3.0)
    return model.double().eval()


def exact_outputs(model, x, stars):
    """The paper's definition: every x* joins the set as entity N + 1."""
    sets = torch.cat([x.expand(len(stars), *x.shape), stars[:, None]], dim=1)
    with torch.no_grad():
        return model(sets, torch.ones(sets.shape[:2], dtype=torch.bool))[:, -1]


def reference_probe(model, x, star):
    """The probe's formula written out directly with the cell's Linear modules and the LSTM equations."""

    def lstm(a, c):
        i, f, o, g = a.chunk(4, dim=-1)
        i, f, o, g = torch.sigmoid(i), torch.sigmoid(f), torch.sigmoid(o), torch.tanh(g)
        c = i * g if c is None else f * c + i * g
        return o * torch.tanh(c), c

    n = len(x)
    u, s = x, star[None]
    with torch.no_grad():
        for k, layer in enumerate(model.layers):
            if k > 0:
                u, s = torch.relu(u), torch.relu(s)
            cell = layer.cell
            h, c = lstm(cell.input(u), None)
            hs, cs = lstm(cell.input(s), None)
            for _ in range(layer.n_iter - 1):
                m = h.mean(0, keepdim=True)  # the N entities alone
                pop = (n * m + hs) / (n + 1)
                hs, cs = lstm(cell.input(s) + cell.recurrent(hs) + cell.population(pop), cs)
                h, c = lstm(cell.input(u) + cell.recurrent(h) + cell.population(m), c)
            u = layer.output(torch.cat([h, c], -1))
            s = layer.output(torch.cat([hs, cs], -1))
    return s[0]


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_probe_equals_its_formula_through_every_layer(layers):
    model = swarm(layers)
    x, stars = torch.randn(9, 2, dtype=torch.float64), torch.randn(5, 2, dtype=torch.float64)
    got = probe_outputs(model, x, stars, batch=2)
    want = torch.stack([reference_probe(model, x, s) for s in stars])
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("n", "layers"), [(1, 1), (1, 3), (7, 2)])
def test_probe_is_exact_when_x_star_cannot_move_the_others(n, layers):
    """x* identical to every entity of a set of identical entities (N = 1 included): all N + 1 entities follow
    one trajectory, so ignoring x*'s influence on the others changes nothing."""
    model = swarm(layers)
    a = torch.randn(1, 2, dtype=torch.float64)
    x = a.expand(n, 2)
    torch.testing.assert_close(probe_outputs(model, x, a), exact_outputs(model, x, a), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("layers", [1, 2])
def test_probe_error_shrinks_like_one_over_n(layers):
    """Replicating a set r times keeps the others' pooled means; x*'s pull on each of the r N others, the only
    thing the probe ignores, and with it the probe's error, falls like 1 / (r N)."""
    model = swarm(layers)
    x, stars = torch.randn(4, 2, dtype=torch.float64), torch.randn(6, 2, dtype=torch.float64) * 2
    errs = []
    for r in (1, 4, 16, 64):
        xr = x.repeat(r, 1)
        errs.append((exact_outputs(model, xr, stars) - probe_outputs(model, xr, stars)).abs().max().item())
    assert errs[0] > 1e-4  # the probe is an approximation at small N ...
    for small, large in zip(errs, errs[1:], strict=False):
        assert 2.5 < small / large < 6.0  # ... whose error falls like 1/N (x4 per step)


def test_probe_only_for_swarm_with_mean_pooling():
    assert probe_supported(swarm())
    for model in (swarm(pooling="causal"), create_model(ModelConfig(name="set-transformer")).eval()):
        assert not probe_supported(model)
        with pytest.raises(ConfigError, match="`method` exact"):
            probe_outputs(model, torch.randn(3, 2), torch.randn(2, 2))


def test_entropy_map_by_probe_is_close_to_exact(trained_runs):
    runs, data = trained_runs
    model, _ = load_model(runs / "swarm" / "best.pt")
    tasks, _ = read_split(data, "val")
    probe = compute_entropy_map(model, tasks, 0, "swarm", grid=5, method="probe")
    exact = compute_entropy_map(model, tasks, 0, "swarm", grid=5, method="exact")
    assert (probe.method, exact.method) == ("probe", "exact")
    np.testing.assert_allclose(probe.probs.sum(-1), 1.0, atol=1e-9)
    np.testing.assert_array_equal(probe.assignment, exact.assignment)
    assert np.abs(probe.entropy - exact.entropy).max() < 0.05  # N is only 8..20 here
    assert "(probe)" in plot_entropy_map(probe).axes[1].get_title()
    assert "(exact)" in plot_class_maps(exact)._suptitle.get_text()
    with pytest.raises(ConfigError, match="method"):
        compute_entropy_map(model, tasks, 0, "swarm", grid=5, method="fast")


def cli(*args):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


def test_cli_method_defaults_and_errors(trained_runs, tmp_path, figures_unrendered):  # the method, not its maps
    runs, _ = trained_runs
    r = cli("plot-entropy", "swarm", "--runs-dir", runs, "--index", 0, "--grid", 4, "--out", tmp_path / "a")
    assert r.exit_code == 0, r.output
    assert ", exact," in r.output  # the default for every model: the probe is an approximation
    r = cli("plot-entropy", "swarm", "--runs-dir", runs, "--index", 0, "--grid", 4, "--method", "probe",
            "--out", tmp_path / "a2")
    assert r.exit_code == 0, r.output
    assert ", probe," in r.output
    r = cli("plot-entropy", "lstm", "--runs-dir", runs, "--index", 0, "--grid", 4, "--out", tmp_path / "b")
    assert r.exit_code == 0, r.output
    assert ", exact," in r.output
    r = cli("plot-entropy", "lstm", "--runs-dir", runs, "--index", 0, "--grid", 4, "--method", "probe",
            "--out", tmp_path / "c")
    assert r.exit_code == 2 and "--method exact" in r.output and not (tmp_path / "c").exists()
    r = cli("plot-entropy", "swarm", "--runs-dir", runs, "--grid", 4, "--method", "fast", "--out", tmp_path / "d")
    assert r.exit_code == 2 and not (tmp_path / "d").exists()


def test_probe_leaves_the_thread_count_as_it_found_it():
    threads = torch.get_num_threads()
    probe_outputs(swarm(), torch.randn(5, 2, dtype=torch.float64), torch.randn(3, 2, dtype=torch.float64))
    assert torch.get_num_threads() == threads
