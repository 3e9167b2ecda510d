"""Generated faults in what commands read back besides datasets and checkpoints: malformed study results
for every --replot, damaged or special run files for report, mathtext and non-Latin text on its way to a
figure, and a shipped-models folder (SWARMCTL_PRETRAINED) that is no folder (torchrun's variables:
test_environment.py). Each ends in one line (or a warning and a result
without the bad part), with its exit code and no file left or changed."""

from __future__ import annotations

import json
import random
import shutil

import numpy as np
import pytest
from conftest import tiered
from faults import assert_clean_failure, assert_no_traceback, cli, deadline, plant, snapshot

from swarmctl.plots.curves import plot_curves
from swarmctl.plots.entropy import plot_class_maps, plot_entropy_map
from swarmctl.plots.frontier import plot_frontier
from swarmctl.plots.shuffle import plot_shuffle_variance
from swarmctl.plots.style import save_figure
from swarmctl.studies.report import ConfigSummary, FrontierPanel
from swarmctl.studies.results import EntropyMapResult, ShuffleVarianceResult, save_result

# mathtext, CJK, Greek; the last holds them all: an escaped dollar, CJK glyphs the font lacks, and a pair of dollars
# around mathtext that does not parse
NAMES = [r"$\frac{", r"$\frac{$", "$x$", "a$b$c", r"\$5", "运行-名前", "καλό $\\alpha$", r"运行 \$5 $\frac{$"]
EVERY_KIND = NAMES[-1]  # the default suite's one name; every name in the slow one


def _entropy_result(label="swarm (8-3-1)"):
    rng = np.random.default_rng(0)
    g = np.linspace(-3, 3, 5)
    probs = rng.dirichlet(np.ones(10), size=(5, 5))
    return EntropyMapResult(label=label, task_index=0, points=rng.normal(size=(6, 2)), labels=np.array([0, 1, 2] * 2),
                            means=rng.normal(size=(3, 2)), covs=np.stack([np.eye(2)] * 3),
                            assignment=np.array([0, 1, 2, 2, 1, 0]), grid_x=g, grid_y=g, probs=probs, seconds=1.0)


def _shuffle_result(label="swarm (8-3-1)"):
    return ShuffleVarianceResult(label=label, task_index=np.arange(3), sizes=np.array([10, 20, 30]),
                                 mean=np.array([1.0, 1.1, 1.2]), std=np.array([0.01, 0.02, 0.0]), n_shuffles=5)


# ---- malformed result files for every --replot -----------------------------------------------------------

def _fields(result):
    arrays = {k: v for k, v in vars(result).items() if isinstance(v, np.ndarray)}
    meta = {"type": type(result).__name__, **{k: v for k, v in vars(result).items() if k not in arrays}}
    return arrays, meta


def wrong_shape(arrays, meta, rng):
    key = rng.choice(sorted(arrays))
    a = arrays[key]
    variants = [a[..., None], a.reshape(-1), a[:-1], np.concatenate([a, a[:1]])]
    arrays[key] = rng.choice([v for v in variants if v.shape != a.shape])  # a 1-d array flattened is no fault


def zero_d(arrays, meta, rng):
    arrays[rng.choice(sorted(arrays))] = np.array(rng.choice([1.5, 3, 0]))


def empty(arrays, meta, rng):
    key = rng.choice(sorted(arrays))
    arrays[key] = arrays[key][:0]


def text(arrays, meta, rng):
    key = rng.choice(sorted(arrays))
    arrays[key] = np.full(arrays[key].shape, rng.choice(["a", "1.0", "nan"]))


def not_finite(arrays, meta, rng):
    key = rng.choice(sorted(k for k, v in arrays.items() if v.dtype.kind == "f"))
    a = arrays[key].copy()
    a.flat[rng.randrange(a.size)] = rng.choice([np.nan, np.inf, -np.inf])
    arrays[key] = a


def missing_field(arrays, meta, rng):
    required = {"EntropyMapResult": ("label", "task_index", *arrays), "ShuffleVarianceResult": ("label", "n_shuffles",
                                                                                               *arrays)}
    key = rng.choice(sorted(required[meta["type"]]))
    arrays.pop(key, None)
    meta.pop(key, None)


def extra_field(arrays, meta, rng):
    arrays["unexpected"] = np.zeros(3)


def bad_meta(arrays, meta, rng):
    key = rng.choice(sorted(k for k in meta if k != "type"))
    meta[key] = rng.choice([None, [1, 2], "three", -1, True, float("nan")] if key != "label" else [None, 3, [1]])


def other_study(arrays, meta, rng):
    meta["type"] = rng.choice(["EntropyMapResult", "ShuffleVarianceResult", "Nothing", 3])
    if meta["type"] == "EntropyMapResult" and "probs" in arrays:
        meta["type"] = "ShuffleVarianceResult"
    if meta["type"] == "ShuffleVarianceResult" and "n_shuffles" in meta:
        meta["type"] = "EntropyMapResult"


def meta_not_json(arrays, meta, rng):
    meta.clear()
    meta["__raw__"] = rng.choice(["not json", "[1, 2]", "3", ""])


FAMILIES = {fn.__name__: fn for fn in (wrong_shape, zero_d, empty, text, not_finite, missing_field, extra_field,
                                       bad_meta, other_study, meta_not_json)}


def _write_npz(path, arrays, meta):
    raw = meta.pop("__raw__", None)
    np.savez(path, **arrays, __meta__=np.array(raw if raw is not None else json.dumps(meta)))


@pytest.fixture
def replot(trained_runs, tmp_path):
    """A run to name, and the two --replot commands with the result file each reads."""
    runs, _ = trained_runs
    root = tmp_path / "case"
    shutil.copytree(runs / "swarm", root / "runs" / "x")
    run = root / "runs" / "x"
    return root, {
        "plot-entropy": (["plot-entropy", run, "--replot", "--out", root / "ent"], root / "ent" / "entropy.npz",
                         _entropy_result()),
        "shuffle-variance": (["shuffle-variance", run, "--replot", "--out", root / "sv"], root / "sv" / "x.npz",
                             _shuffle_result()),
    }


@pytest.mark.parametrize("command", ["plot-entropy", "shuffle-variance"])
def test_a_valid_result_replots(replot, command):
    root, commands = replot
    args, path, result = commands[command]
    save_result(result, path)
    r = cli(*args)
    assert r.exit_code == 0, r.output


def _check_replot(replot, command, family, seed):
    root, commands = replot
    args, path, result = commands[command]
    arrays, meta = _fields(result)
    FAMILIES[family](arrays, meta, random.Random(f"{command}-{family}-{seed}"))
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_npz(path, arrays, meta)
    before = snapshot(root)
    assert_clean_failure(cli(*args), root, before)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("command", ["plot-entropy", "shuffle-variance"])
def test_a_malformed_result_file_fails_in_one_line(replot, command, family):
    _check_replot(replot, command, family, 0)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1, 8))
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("command", ["plot-entropy", "shuffle-variance"])
def test_malformed_result_files_many(replot, command, family, seed):
    _check_replot(replot, command, family, seed)


# ---- report: damaged, special and diverged runs are skipped with a warning ------------------------------

@pytest.fixture
def two_runs(trained_runs, tmp_path):
    runs, _ = trained_runs
    root = tmp_path / "runs"
    for name in ("swarm", "lstm"):
        shutil.copytree(runs / name, root / name)
    return root


def _set_best(run, value):
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    for x in lines:
        x["best_val"] = value
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


# a best loss that is no number and a FIFO in place of config.json in the default suite; the other faults slow
@pytest.mark.parametrize("fault", [tiered(fault, default=fault in ("nan", "fifo config.json")) for fault in (
    "nan", "-inf", "fifo config.json", "folder config.json", "fifo metrics.jsonl", "folder metrics.jsonl")])
def test_report_skips_a_bad_run_with_a_warning(two_runs, fault):
    lstm = two_runs / "lstm"
    if fault in ("nan", "-inf"):
        _set_best(lstm, float(fault))
    else:
        kind, name = fault.split()
        plant(lstm / name, kind, lstm / "best.pt")
    with deadline():
        r = cli("report", "--runs-dir", two_runs)
    assert_no_traceback(r, code=0)
    assert "warning: skipped run" in r.output and "lstm" in r.output.split("warning:")[1], r.output
    report = (two_runs / "report.md").read_text()
    assert "| swarm |" in report and "| lstm |" not in report


# a parameter count that is no whole number and a seed out of range in the default suite; the others slow
@pytest.mark.parametrize(("field", "value"), [
    tiered(field, value, default=(field, value) in (("parameters", 2.5), ("seed", -1)))
    for field, value in (("parameters", -5), ("parameters", 0), ("parameters", 2.5), ("parameters", True),
                         ("parameters", "12"), ("parameters", None), ("parameters", 1e300), ("seed", -1),
                         ("seed", "x"), ("seed", 1.5))])
def test_report_skips_a_run_whose_config_holds_an_impossible_number(two_runs, field, value):
    """A parameter count that is no positive whole number cannot sit on the log-scale frontier (nor a seed
    that is no seed in a table): the run is skipped with a warning naming the field."""
    config = two_runs / "lstm" / "config.json"
    cfg = json.loads(config.read_text())
    cfg["run" if field == "parameters" else "train"][field] = value
    config.write_text(json.dumps(cfg))
    r = cli("report", "--runs-dir", two_runs)
    assert_no_traceback(r, code=0)
    assert "warning: skipped run" in r.output and field in r.output.split("warning:")[1], r.output
    report = (two_runs / "report.md").read_text()
    assert "| swarm |" in report and "| lstm |" not in report


@pytest.mark.parametrize("title", [tiered(n, default=n == EVERY_KIND) for n in NAMES])
def test_report_draws_any_title_literally(two_runs, title):
    r = cli("report", "--runs-dir", two_runs, "--title", title)
    assert_no_traceback(r, code=0)
    assert (two_runs / "frontier.png").is_file() and "warning" not in r.output


# ---- text that reaches matplotlib -------------------------------------------------------------------------

# five figures a name (a second each)
@pytest.mark.parametrize("name", [tiered(n, default=n == EVERY_KIND) for n in NAMES])
def test_every_figure_draws_names_literally_and_quietly(tmp_path, name):
    """Each figure draws the name as written: mathtext that does not parse is no error, an escaped dollar keeps
    its backslash, and glyphs the font lacks are boxes without a warning (pytest turns warnings into errors)."""
    records = [{"epoch": 0, "train_loss": 1.0, "val_loss": 0.9, "best_val": 0.9, "lr": 1e-3, "net_seconds": 1.0,
                "backtracked": False}]
    row = ConfigSummary(model=name, code=name, parameters=10, seeds=(0,), val_mean=1.0, val_std=0.0, epochs=1.0,
                        net_minutes=0.1, devices=("cpu",))
    figures = [plot_curves(records, title=name), plot_entropy_map(_entropy_result(name)),
               plot_class_maps(_entropy_result(name)), plot_shuffle_variance([_shuffle_result(name)]),
               plot_frontier([FrontierPanel(name, {name: [row]}, {name: 10}, {})], name)]
    for k, fig in enumerate(figures):
        assert save_figure(fig, tmp_path / f"f{k}").is_file()
    drawn = save_figure(figures[0], tmp_path / "drawn").read_bytes()  # the layout has settled after one draw
    title = figures[0].axes[0].title
    title.set_text(name)
    title.set_parse_math(False)  # the name itself, never read as mathtext: the title drawn as written
    assert save_figure(figures[0], tmp_path / "as-written").read_bytes() == drawn


def test_a_run_named_with_mathtext_and_cjk_trains_and_draws_its_curves(trained_runs, tmp_path):
    _, data = trained_runs
    name = "运行$\\frac{x"
    r = cli("train", "swarm", "--hidden", 4, "--iters", 2, "--batch-size", 8, "--max-epochs", 1, "--device", "cpu",
            "--data", data, "--runs-dir", tmp_path / "runs", "--name", name)
    assert r.exit_code == 0, r.output
    assert "warning" not in r.output and "Glyph" not in r.output
    assert (tmp_path / "runs" / name / "curves.png").is_file()


# ---- environment variables ----------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["a file", "a fifo", "missing"])
def test_a_shipped_models_folder_that_is_no_folder_names_the_fix(tmp_path, monkeypatch, where):
    target = tmp_path / "pretrained"
    if where == "a file":
        target.write_bytes(b"x")
    elif where == "a fifo":
        plant(target, "fifo", target)
    monkeypatch.setenv("SWARMCTL_PRETRAINED", str(target))
    before = snapshot(tmp_path)
    with deadline():
        r = cli("eval", "--runs-dir", tmp_path / "runs", "--device", "cpu")
    assert_clean_failure(r, tmp_path, before)
    assert "no shipped" in r.output and str(target) in r.output


# ---- option values far past int64 and float64 -------------------------------------------------------------

@pytest.mark.parametrize("size", [tiered(2**63, default=True), tiered(10**30, default=False)])
def test_plot_entropy_takes_any_size(trained_runs, tmp_path, size):
    runs, _ = trained_runs
    r = cli("plot-entropy", runs / "swarm", "--grid", 4, "--clusters", 3, "--size", size, "--device", "cpu",
            "--out", tmp_path / "ent")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "ent" / "entropy.png").is_file()


# ---- report never pools different data; a runs folder that is none is named as such ------------------------

def test_report_never_pools_runs_of_one_config_trained_on_different_data(tmp_path):
    from conftest import TINY_PARAMS

    from swarmctl.config import DataConfig, ModelConfig, TrainConfig
    from swarmctl.data.clustering_generator import ClusteringParams
    from swarmctl.data.hdf5 import generate_dataset
    from swarmctl.runs import start_run

    runs = tmp_path / "runs"
    for seed in (0, 1):
        data = tmp_path / f"data{seed}.h5"
        generate_dataset(data, ClusteringParams(**TINY_PARAMS), seed=seed)
        start_run(ModelConfig(name="swarm", dim_hidden=8, n_iter=2), TrainConfig(batch_size=6, max_epochs=1,
                  device="cpu"), DataConfig(path=str(data)), runs, f"on{seed}")
    r = cli("report", "--runs-dir", runs)
    assert_no_traceback(r, code=0)
    assert "warning:" in r.output and "different data" in r.output, r.output
    report = (runs / "report.md").read_text()
    rows = [line for line in report.splitlines() if line.startswith("| swarm |")]
    assert len(rows) == 2 and "0, 0" not in report, report  # one row per dataset, each of its one seed
    assert "data0.h5" in rows[0] + rows[1] and "data1.h5" in rows[0] + rows[1], report


@pytest.mark.parametrize("what", ["file", "empty folder"])
def test_report_on_a_runs_folder_that_holds_no_runs_says_so(tmp_path, what):
    target = tmp_path / "runs"
    if what == "file":
        target.write_text("not runs\n")
    else:
        target.mkdir()
    before = snapshot(tmp_path)
    r = cli("report", "--runs-dir", target)
    assert_clean_failure(r, tmp_path, before)
    assert "writ" not in r.output and ("no runs" in r.output or "not a runs folder" in r.output), r.output


@pytest.mark.parametrize(("scale", "centre"), [(1e-16, 1.0), (1e-300, 0.0), (1e-9, 1e6), (1.0, 0.0)])
def test_a_cluster_plot_spreads_the_points_over_its_axes_whatever_their_spread(scale, centre):
    """Two clusters of a tiny spread (relative to their place, or in absolute size) are drawn apart, not on
    one spot of axes that matplotlib widened to a fixed span."""
    from swarmctl.plots.clusters import plot_clusters

    rng = np.random.default_rng(0)
    values = np.concatenate([rng.normal(0, 1, (40, 2)), rng.normal(8, 1, (40, 2))]) * scale + centre
    assert len(np.unique(values[:, 0])) > 2  # float64 holds some of the spread
    fig = plot_clusters(values, ("x", "y"), np.repeat([0, 1], 40), np.ones(80), "tiny")
    ax = fig.axes[0]
    drawn = ax.collections[0].get_offsets()
    where = ax.transAxes.inverted().transform(ax.transData.transform(drawn))  # 0..1 inside the axes
    assert np.ptp(where[:, 0]) > 0.5 and np.ptp(where[:, 1]) > 0.5, (ax.get_xlim(), ax.get_ylim())


@pytest.mark.parametrize("size", [-5, 0, -(10**30)])
def test_plot_entropy_refuses_a_size_below_one_as_an_option_value(trained_runs, tmp_path, size):
    runs, _ = trained_runs
    before = snapshot(tmp_path)
    r = cli("plot-entropy", runs / "swarm", "--grid", 4, "--size", size, "--device", "cpu", "--out", tmp_path / "e")
    assert_clean_failure(r, tmp_path, before, code=2)
    assert "--size" in r.output, r.output


def test_shuffle_variance_refuses_one_shuffle_before_loading_any_model(tmp_path, monkeypatch):
    """--shuffles 1 is wrong in itself: refused (exit 2, naming the option) before a run is even looked for."""
    import swarmctl.runs.read as read

    def never(*args, **kwargs):
        raise AssertionError("a model was loaded")
    monkeypatch.setattr(read, "load_model", never)
    before = snapshot(tmp_path)
    r = cli("shuffle-variance", "no-such-run", "--runs-dir", tmp_path, "--shuffles", 1, "--device", "cpu")
    assert_clean_failure(r, tmp_path, before, code=2)
    assert "--shuffles" in r.output, r.output


def test_shuffle_variance_help_says_each_run_is_measured_on_its_own_data():
    r = cli("shuffle-variance", "--help")
    text = " ".join(r.output.split())
    assert r.exit_code == 0 and "first run" not in text and "each run's own" in text, text
