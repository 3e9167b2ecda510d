"""`swarmctl cluster` end to end: every input form, the shipped model and a run, the CSV, table and figure,
and the bad inputs and options, each refused in one line with nothing written and the input unchanged."""

import csv
import hashlib
import json
import os
import re
import shutil
import threading

import h5py
import numpy as np
import pytest
from conftest import tiered
from typer.testing import CliRunner

from swarmctl.cli import app
from swarmctl.data.clustering_generator import ClusteringParams, generate_clustering
from tools.campaigns.shipping import export_weights


@pytest.fixture(scope="module")
def trained_runs(trained_runs, tmp_path_factory):
    """The session's trained runs, copied: `cluster` writes its CSV into the run's folder, which other modules'
    tests copy as it is."""
    runs, data = trained_runs
    copy = tmp_path_factory.mktemp("cluster-runs") / "runs"
    shutil.copytree(runs, copy)
    return copy, data


@pytest.fixture(scope="module")
def values():
    tasks = generate_clustering(ClusteringParams(n_tasks=2, k_min=3, k_max=3, n_min=300, n_max=300), seed=2)
    return tasks.task(0)[0].astype(np.float64) * 50 + [200.0, -10.0]  # user units, far from the training scale


def _csv(path, values, header=("lon", "lat")):
    np.savetxt(path, values, delimiter=",", header=",".join(header) if header else "", comments="")
    return path


def _read(path):
    """(header, values) of an output CSV, after its one comment line (what made the clusters)."""
    with open(path) as fh:
        assert fh.readline().startswith("# clusters by ")
        rows = list(csv.reader(fh))
    return rows[0], np.array(rows[1:], dtype=np.float64)


def _run_args(trained_runs):
    runs, _ = trained_runs
    return ["swarm", "--runs-dir", runs, "--device", "cpu"]


def test_cluster_writes_the_csv_under_the_runs_folder_prints_the_table_and_draws(cli, trained_runs, values,
                                                                                 tmp_path):
    """The CSV goes where other studies of a run write (RUN/cluster/), not beside the input."""
    points = _csv(tmp_path / "own-points.csv", values)
    r = cli("cluster", points, *_run_args(trained_runs), "--plot", tmp_path / "pts.png")
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["own-points.csv", "pts.png"]
    out = trained_runs[0] / "swarm" / "cluster" / "own-points-clusters.csv"
    assert str(out) in " ".join(r.output.split())
    header, table = _read(out)
    assert header == ["lon", "lat", "cluster", "probability", "entropy"] and len(table) == len(values)
    assert np.array_equal(table[:, :2], values)  # the user's coordinates, exactly
    cluster = table[:, 2].astype(int)
    sizes = np.bincount(cluster)
    assert cluster.min() == 0 and np.all(sizes > 0) and np.all(np.diff(sizes) <= 0)  # 0 = the largest
    assert np.all((table[:, 3] > 0) & (table[:, 3] <= 1)) and np.all(table[:, 4] >= 0)
    assert "standardized to the training scale: x' = (x - [" in r.output and "mean confidence" in r.output
    assert f"{len(sizes)} clusters in {len(values)} points" in r.output
    assert (tmp_path / "pts.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_per_coordinate_prints_one_factor_per_coordinate(cli, trained_runs, values, tmp_path):
    points = _csv(tmp_path / "pts.csv", values)
    r = cli("cluster", points, *_run_args(trained_runs), "--out", tmp_path / "a.csv")
    assert r.exit_code == 0 and "x' = (x - [" in r.output and "]) * [" not in r.output, r.output
    r = cli("cluster", points, *_run_args(trained_runs), "--per-coordinate", "--out", tmp_path / "b.csv")
    assert r.exit_code == 0 and "]) * [" in r.output, r.output


def test_no_standardize_uses_the_points_as_given(cli, trained_runs, values, tmp_path):
    points = _csv(tmp_path / "pts.csv", values)
    r = cli("cluster", points, *_run_args(trained_runs), "--no-standardize", "--out", tmp_path / "raw.csv")
    assert r.exit_code == 0 and "points used as given" in r.output, r.output
    assert _read(tmp_path / "raw.csv")[1].shape == (len(values), 5)


# every way the points reach `cluster`: the output CSV has one row per input row, in order, with the file's
# numbers to the last bit; the forms that pass something of the command line (a key, --columns, standard input,
# a named pipe as the argument) in the default suite, the others (read alike by the reader's own suite) slow
INPUT_FORMS = {"npz-key": True, "h5-key": False, "stdin": True, "fifo": True, "columns": True, "npy": False,
               "csv-header-comments": False, "whitespace-cr": False}


@pytest.mark.parametrize("form", [tiered(form, default=default) for form, default in INPUT_FORMS.items()])
def test_every_input_form_gives_one_output_row_per_input_row_in_order(trained_runs, values, tmp_path, form):
    values = values.copy()
    values[3] = values[4]  # a repeated point keeps its place too
    source, extra, stdin, read = tmp_path / f"in.{form}", [], None, threading.Event()
    lines = [f"{float(a)!r},{float(b)!r}" for a, b in values]
    if form == "npz-key":
        np.savez(tmp_path / "p.npz", other=values[:5], pts=values)
        source, extra = tmp_path / "p.npz", ["--key", "pts"]
    elif form == "h5-key":
        with h5py.File(tmp_path / "p.h5", "w") as f:
            f["a/b"], f["c"] = values, values[:3]
        source, extra = tmp_path / "p.h5", ["--key", "a/b"]
    elif form == "stdin":
        source, stdin = "-", "\n".join(lines) + "\n"
    elif form == "fifo":
        os.mkfifo(source)

        def feed():
            source.write_text("\n".join(lines) + "\n")
            if not read.wait(60):  # the command opened the pipe again and waits for a writer: an empty one ends it
                source.write_text("")

        threading.Thread(target=feed, daemon=True).start()
    elif form == "columns":
        source = _csv(tmp_path / "wide.csv", np.column_stack([values[:, 1] * 0 + 1, values]), ("id", "lon", "lat"))
        extra = ["--columns", "lon,lat"]
    elif form == "npy":
        np.save(source, values)
    elif form == "csv-header-comments":
        source.write_text("# points\n\nlon,lat\n# degrees\n" + "\n# a break\n   \n".join(lines) + "\n")
    else:
        source.write_text("\r".join(f"{float(a)!r}  {float(b)!r}" for a, b in values) + "\r", newline="")
    out = tmp_path / "out.csv"
    args = ["cluster", str(source), *map(str, _run_args(trained_runs)), "--out", str(out), *extra]
    r = CliRunner().invoke(app, args, input=stdin, env={"COLUMNS": "200"})
    read.set()
    assert r.exit_code == 0, r.output
    header, got = _read(out)
    if form == "columns":  # the column not clustered on is kept, in its place
        assert header[0] == "id" and np.all(got[:, 0] == 1)
        got = got[:, 1:]
    assert got.shape == (len(values), 5)
    assert np.array_equal(got[:, :2], values)  # the same rows, in the same order, to the last bit


def test_the_shipped_model_is_used_without_generating_its_dataset(cli, trained_runs, values, tmp_path, monkeypatch):
    runs, _ = trained_runs
    shipped = tmp_path / "pretrained"
    export_weights(runs / "swarm" / "best.pt", shipped / "swarm-tiny.pt", data_path="data/clustering-seed0.h5")
    monkeypatch.setenv("SWARMCTL_PRETRAINED", str(shipped))
    monkeypatch.chdir(tmp_path)
    _csv(tmp_path / "pts.csv", values)
    r = cli("cluster", "pts.csv", "--device", "cpu")
    assert r.exit_code == 0, r.output
    assert "the shipped swarm" in r.output and "swarm-tiny.pt" in r.output
    out = tmp_path / "runs" / "pretrained-swarm-tiny" / "cluster" / "pts-clusters.csv"  # as other studies write
    assert out.is_file() and str(out.relative_to(tmp_path)) in " ".join(r.output.split())
    assert not (tmp_path / "data").exists() and [p for p in (tmp_path / "runs").rglob("*") if p.is_file()] == [out]


def _snapshot(root):
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


def test_an_existing_output_is_overwritten_only_with_force(cli, trained_runs, values, tmp_path):
    points = _csv(tmp_path / "pts.csv", values)
    (tmp_path / "pts-clusters.csv").write_text("keep me\n")
    (tmp_path / "fig.png").write_text("keep me too\n")
    before = _snapshot(tmp_path)
    for extra in (["--out", tmp_path / "pts-clusters.csv"],
                  ["--plot", tmp_path / "fig.png", "--out", tmp_path / "new.csv"]):
        r = cli("cluster", points, *_run_args(trained_runs), *extra)
        assert r.exit_code == 1 and "exists; pass --force" in r.output, r.output
        assert _snapshot(tmp_path) == before
    r = cli("cluster", points, *_run_args(trained_runs), "--force", "--out", points)
    assert r.exit_code == 1 and "an input of this command" in r.output and _snapshot(tmp_path) == before
    r = cli("cluster", points, *_run_args(trained_runs), "--force", "--out", tmp_path / "pts-clusters.csv")
    assert r.exit_code == 0, r.output
    assert _read(tmp_path / "pts-clusters.csv")[1].shape == (len(values), 5)


# what `cluster` makes of a file the reader refuses (each kind, and its message, is in the reader's suite,
# tests/data/test_data_points.py: one in the default suite here, the others slow) and of points the model cannot take
BAD_FILES = {
    "nan": ("x,y\n1,2\n3,nan\n5,6\n", "line 3, column 2: nan is not a finite number", True),
    "three-columns": ("1,2,3\n4,5,6\n7,8,9\n", "has 3 column(s)", True),
    "one-column": ("1\n2\n3\n", "has 1 column(s)", True),
    "binary": (b"\x00\xff\xfe\x81", "neither text nor", False),
    "missing": (None, "does not exist", False),
    "device": ("/dev/null", "device file", False),  # a link to it: followed, and refused as a device
}


@pytest.mark.parametrize("case", [tiered(case, default=default) for case, (*_, default) in BAD_FILES.items()])
def test_bad_input_fails_in_one_line_with_nothing_written(cli, trained_runs, tmp_path, case):
    content, message, _ = BAD_FILES[case]
    points = tmp_path / "in.csv"
    if isinstance(content, bytes):
        points.write_bytes(content)
    elif case == "device":
        points.symlink_to(content)
    elif content is not None:
        points.write_text(content)
    before = _snapshot(tmp_path)
    r = cli("cluster", points, *_run_args(trained_runs), "--plot", tmp_path / "fig.png")
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code == 1, r.output
    assert message in " ".join(r.output.split()) and "Traceback" not in r.output and len(lines) <= 3, r.output
    assert _snapshot(tmp_path) == before  # no output, no temporary file, the input unchanged


def test_a_run_that_does_not_exist_is_named(cli, trained_runs, values, tmp_path):
    runs, _ = trained_runs
    points = _csv(tmp_path / "pts.csv", values)
    r = cli("cluster", points, "nope", "--runs-dir", runs)
    assert r.exit_code == 1 and "no run 'nope'" in r.output


@pytest.mark.parametrize(("elapsed", "shown"), [(0.5, False), (1.5, True)])
def test_the_progress_bar_appears_only_for_calls_longer_than_a_second(monkeypatch, elapsed, shown):
    import io

    from rich.console import Console

    from swarmctl.cli import _progress

    out = io.StringIO()
    monkeypatch.setattr(_progress, "console", Console(file=out, force_terminal=True, width=100))
    now = [100.0]
    monkeypatch.setattr(_progress.time, "monotonic", lambda: now[0])
    with _progress.DelayedBar("clustering the points") as bar:
        now[0] += elapsed
        bar(0.5)
        now[0] += 0.1
        bar(1.0)
    assert ("clustering the points" in out.getvalue()) == shown


# ---- what the output says about itself ------------------------------------------------------------------------

def test_points_far_from_the_training_scale_used_as_given_warn(cli, trained_runs, values, tmp_path):
    """--no-standardize on points in raw units must not collapse silently: one warning line, exit 0."""
    points = _csv(tmp_path / "pts.csv", values)
    r = cli("cluster", points, *_run_args(trained_runs), "--no-standardize")
    assert r.exit_code == 0, r.output
    warned = [line for line in r.output.splitlines() if line.startswith("warning:") and "used as given" in line]
    assert len(warned) == 1 and "standardize" in warned[0], r.output


def test_skip_bad_rows_leaves_them_out_and_says_how_many(cli, trained_runs, values, tmp_path):
    text = "id,lon,lat\n" + "".join(f"p{i},{x!r},{y!r}\n" for i, (x, y) in enumerate(values.tolist()))
    text += "bad1,,3.5\nbad2,abc,1\nbad3,1\n"  # an empty cell, text, a short row
    points = tmp_path / "pts.csv"
    points.write_text(text)
    r = cli("cluster", points, *_run_args(trained_runs), "--columns", "lon,lat", "--out", tmp_path / "o.csv")
    assert r.exit_code == 1 and "not a number" in r.output, r.output
    r = cli("cluster", points, *_run_args(trained_runs), "--columns", "lon,lat", "--skip-bad-rows", "--out",
            tmp_path / "pts-clusters.csv")
    assert r.exit_code == 0 and "skipped 3 rows" in r.output, r.output
    with open(tmp_path / "pts-clusters.csv") as fh:
        comment, header, *rows = list(csv.reader(fh))
    assert comment[0] == "# clusters by EM" and header == ["id", "lon", "lat", "cluster", "probability",
                                                                       "entropy"]
    assert [row[0] for row in rows] == [f"p{i}" for i in range(len(values))]  # the unpicked column, kept
    r = cli("cluster", points, *_run_args(trained_runs), "--columns", "lon,lat", "--skip-bad-rows", "--json",
            "--out", tmp_path / "j.csv")
    result = json.loads(r.stdout)
    assert (result["points"], result["skipped_rows"]) == (len(values), 3)  # --json says it as the summary does


def test_refine_is_on_by_default_and_can_be_turned_off(cli, trained_runs, values, tmp_path):
    points = _csv(tmp_path / "pts.csv", values)
    r = cli("cluster", points, *_run_args(trained_runs), "--out", tmp_path / "a.csv")
    text = " ".join(r.output.split())
    assert r.exit_code == 0 and "refined: EM, " in text and " clusters by BIC, from " in text, r.output
    r = cli("cluster", points, *_run_args(trained_runs), "--no-refine", "--out", tmp_path / "b.csv")
    assert r.exit_code == 0 and "refined" not in r.output, r.output


def test_the_help_says_what_the_model_was_trained_on_and_its_cap(cli):
    r = cli("cluster", "--help")
    text = " ".join(r.output.split())
    assert r.exit_code == 0
    assert "3..10" in text and "100..1,000" in text and "at most 10 clusters" in text and "inverse-Wishart" in text
    assert "1..16 clusters" in text and "at most 16 clusters" in text and "2-core CPU" in text


def test_a_shipped_model_recorded_as_clusters_default_is_used_by_cluster_alone(cli, trained_runs, values, tmp_path,
                                                                            monkeypatch):
    """A model trained for real data ships beside the paper's: `cluster` takes the one whose record says
    default_for cluster; the task's shipped model (the first record) stays the default of the others."""
    from swarmctl.runs import shipped_for

    runs, _ = trained_runs
    shipped = tmp_path / "pretrained"
    export_weights(runs / "swarm" / "best.pt", shipped / "a-paper.pt", data_path="data/clustering-seed0.h5")
    export_weights(runs / "swarm" / "best.pt", shipped / "b-broad.pt", data_path=None,
                   record={"default_for": ["cluster"]})
    monkeypatch.setenv("SWARMCTL_PRETRAINED", str(shipped))
    monkeypatch.chdir(tmp_path)
    _csv(tmp_path / "pts.csv", values)
    r = cli("cluster", "pts.csv", "--device", "cpu")
    assert r.exit_code == 0 and "b-broad.pt" in r.output, r.output
    assert shipped_for("eval").name == "a-paper.pt"


def test_the_timing_is_the_clustering_pass_without_the_warm_up(trained_runs, values, tmp_path, monkeypatch):
    """The first pass pays for loading kernels: the time reported is the pass that clusters the points."""
    import time

    from swarmctl.studies import clusters

    runs, _ = trained_runs
    real, calls, took = clusters.cluster_values, [], []

    def slow_first(*args, **kwargs):
        calls.append(len(args[2]))
        start = time.perf_counter()
        if len(calls) == 1:
            time.sleep(0.5)  # a slow first pass
        try:
            return real(*args, **kwargs)
        finally:
            took.append(time.perf_counter() - start)

    monkeypatch.setattr(clusters, "cluster_values", slow_first)
    res = clusters.cluster_file(str(_csv(tmp_path / "pts.csv", values)), "swarm", runs, device="cpu",
                                out=tmp_path / "o.csv")
    assert calls == [min(len(values), clusters.WARM_UP_POINTS), len(values)]
    # the second pass's own time, whatever the machine's load; with the first pass it would be 0.5 s more
    assert took[1] <= res.seconds < took[1] + 0.25, (res.seconds, took)


def test_in_chunks_is_said_only_when_the_set_ran_in_more_than_one_chunk(cli, trained_runs, values, tmp_path):
    points = _csv(tmp_path / "pts.csv", values)  # 300 points
    r = cli("cluster", points, *_run_args(trained_runs), "--out", tmp_path / "a.csv")
    assert r.exit_code == 0 and "in chunks" not in r.output, r.output
    r = cli("cluster", points, *_run_args(trained_runs), "--chunk-size", "100", "--out", tmp_path / "b.csv")
    assert r.exit_code == 0 and "in chunks" in r.output, r.output


# ---- exit codes: 2 for an option value wrong in itself, 1 for one the files on disk refuse ----------------------

@pytest.mark.parametrize(("args", "code", "message"), [
    (["--out", "-"], 2, "not to standard output"),  # no file named -, no CSV on standard output
    (["--columns", "lon,lon"], 2, "must not repeat a column"),
    (["--columns", "lon,,lat"], 2, "comma-separated"),
    (["--columns", "0,00"], 2, "must not repeat a column"),  # a repeat, however written
    (["--columns", "1,index:1"], 2, "must not repeat a column"),
    (["--columns", "lat,name:lat"], 2, "must not repeat a column"),
    (["--plot", "fig.jpg"], 2, "does not end in .png"),
    (["--out", "{tmp}/same.png", "--plot", "same.png"], 2, "name the same file"),  # one file, however written
    (["--per-coordinate", "--no-standardize"], 2, "give one of the two"),
    (["--clusters", "0"], 2, "'--clusters': must be >= 1"),
    (["--clusters", "301"], 2, "more than the 300 distinct points"),  # a count the file caps: exit 2 (guarantees.md)
    (["--clusters", "3", "--no-refine"], 2, "--no-refine leaves EM out"),
    (["--columns", "lon,height"], 1, "no column 'height'"),  # a name another file may have
    (["--columns", "0,5"], 1, "out of range"),
    (["--key", "pts"], 1, "leave --key out"),  # a key an .npz file may have
    (["--out", "{tmp}/pts.csv", "--force"], 1, "an input of this command"),
    (["--out", "{tmp}/folder"], 1, "is a folder"),
    (["--out", "{tmp}/pts.csv/o.csv"], 1, "is a file, not a folder"),
])
def test_an_option_wrong_in_itself_exits_2_and_one_the_files_refuse_exits_1(cli, trained_runs, values, tmp_path,
                                                                           monkeypatch, args, code, message):
    """docs/guarantees.md: 2 when the value is wrong whatever the files, 1 when it conflicts with them."""
    points = _csv(tmp_path / "pts.csv", values)
    (tmp_path / "folder").mkdir()
    monkeypatch.chdir(tmp_path)
    before = _snapshot(tmp_path)
    out = [] if "--out" in args else ["--out", tmp_path / "o.csv"]  # the run's folder holds other tests' outputs
    r = cli("cluster", points, *_run_args(trained_runs), *(a.format(tmp=tmp_path) for a in args), *out)
    assert r.exit_code == code and message in " ".join(r.output.split()), r.output
    assert len(r.output.strip().splitlines()) <= 3 and "Traceback" not in r.output, r.output
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize(("option", "fix"), [(["--threads", "2"], "`swarmctl --threads N cluster ...`"),
                                           (["--version"], "`swarmctl --version`")])
def test_an_option_of_swarmctl_itself_after_the_command_is_shown_before_it_as_it_works(cli, tmp_path, option, fix):
    """The usage line's fix works as printed: the option's value, then the command (--version: alone)."""
    r = cli("cluster", tmp_path / "pts.csv", *option)
    assert r.exit_code == 2 and " ".join(r.output.split()).endswith(f"give it before the command, {fix}"), r.output


def test_out_and_plot_naming_one_file_by_two_hard_links_exit_2_and_change_nothing(cli, trained_runs, values, tmp_path):
    points = _csv(tmp_path / "pts.csv", values)
    (tmp_path / "fig.png").write_bytes(b"the user's file")
    os.link(tmp_path / "fig.png", tmp_path / "fig.csv")  # one file, two names
    before = _snapshot(tmp_path)
    r = cli("cluster", points, *_run_args(trained_runs), "--out", tmp_path / "fig.csv", "--plot", tmp_path / "fig.png",
            "--force")
    assert r.exit_code == 2 and "name the same file" in " ".join(r.output.split()), r.output
    assert _snapshot(tmp_path) == before and os.path.samefile(tmp_path / "fig.png", tmp_path / "fig.csv")


@pytest.mark.parametrize("refine", [True, False])
def test_refining_a_large_set_the_model_sees_a_sample_and_every_point_is_clustered(cli, trained_runs, values, tmp_path,
                                                                                  monkeypatch, refine):
    from swarmctl.studies import clusters
    from swarmctl.tasks.clustering import ClusteringTask

    monkeypatch.setattr(clusters, "MODEL_POINTS", 120)  # the 300 points are a large set
    seen = []
    real = ClusteringTask.cluster_points

    def spy(self, model, values, *args, **kwargs):
        seen.append(len(values))
        return real(self, model, values, *args, **kwargs)

    monkeypatch.setattr(ClusteringTask, "cluster_points", spy)
    out = tmp_path / "a.csv"
    r = cli("cluster", _csv(tmp_path / "pts.csv", values), *_run_args(trained_runs), "--out", out,
            "--refine" if refine else "--no-refine")
    text = " ".join(r.output.split())
    assert r.exit_code == 0, r.output
    assert seen[-1] == (120 if refine else 300)
    assert ("on a sample of 120 points" in text) == refine
    header, rows = _read(out)
    assert len(rows) == 300 and np.isfinite(rows).all()


# ---- --clusters K: the user gives the number of clusters --------------------------------------------------------

@pytest.mark.parametrize("k", [1, 2, 5])
def test_clusters_k_gives_exactly_k_clusters_and_says_they_were_given(cli, trained_runs, values, tmp_path, k):
    out = tmp_path / "a.csv"
    r = cli("cluster", _csv(tmp_path / "pts.csv", values), *_run_args(trained_runs), "--clusters", str(k),
            "--out", out)
    text = " ".join(r.output.split())
    assert r.exit_code == 0, r.output
    assert len(np.unique(_read(out)[1][:, 2])) == k
    assert f"{k} cluster{'' if k == 1 else 's'} in 300 points" in text
    assert f"refined: EM at the {k} cluster{'' if k == 1 else 's'} given, from " in text


def test_clusters_k_above_the_distinct_points_counts_repeated_rows_once(cli, trained_runs, values, tmp_path):
    """300 rows of 4 distinct points: 4 clusters can be made, 5 cannot."""
    rows = np.repeat(values[:4], 75, axis=0)
    points = _csv(tmp_path / "pts.csv", rows)
    r = cli("cluster", points, *_run_args(trained_runs), "--clusters", "5", "--out", tmp_path / "a.csv")
    assert r.exit_code == 2 and "more than the 4 distinct points" in " ".join(r.output.split()), r.output
    r = cli("cluster", points, *_run_args(trained_runs), "--clusters", "4", "--out", tmp_path / "b.csv")
    assert r.exit_code == 0 and len(np.unique(_read(tmp_path / "b.csv")[1][:, 2])) == 4, r.output


# the LSTM in the slow suite: an order-dependent model given two orders is the default suite's in
# test_an_order_dependent_model_reads_the_points_sorted_and_says_so
@pytest.mark.parametrize("run", [tiered("swarm", default=True), tiered("lstm", default=False)])
def test_clusters_k_does_not_depend_on_the_order_of_the_rows(cli, trained_runs, values, tmp_path, run):
    _same_clusters_in_two_orders(cli, trained_runs, run, values, tmp_path, "--clusters", "3")


def _same_clusters_in_two_orders(cli, trained_runs, run, values, tmp_path, *args):
    """Cluster ``values`` in their order and in a shuffled one with ``run``: the same cluster and
    probabilities for every point. Returns the outputs of the two commands."""
    runs, _ = trained_runs
    perm = np.random.RandomState(0).permutation(len(values))
    got, outputs = [], []
    for name, rows in (("a", values), ("b", values[perm])):
        r = cli("cluster", _csv(tmp_path / f"{name}.csv", rows), run, "--runs-dir", runs, "--device", "cpu", *args,
                "--out", tmp_path / f"{name}-clusters.csv")
        assert r.exit_code == 0, r.output
        table = _read(tmp_path / f"{name}-clusters.csv")[1]
        got.append(table[np.lexsort(table[:, :2].T[::-1])])  # each point's row, in one order
        outputs.append(" ".join(r.output.split()))
    np.testing.assert_array_equal(got[0][:, 2], got[1][:, 2])
    np.testing.assert_allclose(got[0][:, 3:], got[1][:, 3:], rtol=1e-6, atol=1e-9)
    return outputs


def test_clusters_k_recovers_well_separated_blobs(cli, trained_runs, tmp_path):
    rs = np.random.RandomState(1)
    centres = np.array([[0.0, 0.0], [40.0, 0.0], [0.0, 40.0], [40.0, 40.0], [20.0, 80.0]])
    labels = np.repeat(np.arange(5), [90, 70, 60, 50, 40])
    out = tmp_path / "a.csv"
    r = cli("cluster", _csv(tmp_path / "blobs.csv", centres[labels] + rs.randn(len(labels), 2)),
            *_run_args(trained_runs), "--clusters", "5", "--out", out)
    assert r.exit_code == 0, r.output
    found = _read(out)[1][:, 2].astype(int)
    assert len(set(zip(found.tolist(), labels.tolist(), strict=True))) == 5  # one cluster per blob
    assert np.array_equal(np.bincount(found), [90, 70, 60, 50, 40])  # numbered by size


# ---- a model whose answer depends on the order of the points (an LSTM) ------------------------------------------

@pytest.mark.parametrize("refine", [tiered("--refine", default=True), tiered("--no-refine", default=False)])
def test_an_order_dependent_model_reads_the_points_sorted_and_says_so(cli, trained_runs, values, tmp_path, refine):
    """Two orders of the same rows give the same clusters (an order-dependent model is fed one order)."""
    for output in _same_clusters_in_two_orders(cli, trained_runs, "lstm", values, tmp_path, refine):
        assert "read them sorted by coordinate" in output, output
    r = cli("cluster", _csv(tmp_path / "c.csv", values), *_run_args(trained_runs), refine, "--out", tmp_path / "c.out")
    assert r.exit_code == 0 and "sorted by coordinate" not in r.output  # an equivariant model reads them as they come


@pytest.mark.parametrize("n", [3, 12])
def test_a_set_too_small_to_search_says_its_size_capped_the_search(cli, trained_runs, values, tmp_path, n):
    """3 points were told "the largest number of clusters it tried (1), the BIC still falling", 12 points "tried
    (2)" after a fresh fit at 1: the warning names the set's size, which capped the search."""
    r = cli("cluster", _csv(tmp_path / "few.csv", values[:n]), *_run_args(trained_runs), "--out", tmp_path / "o.csv")
    text = " ".join(r.output.split())
    assert r.exit_code == 0, r.output
    assert "the set's size capped the refinement's search for the number of clusters at 1 cluster" in text, text
    assert f"({n} points; a cluster needs 7 or more in 2 dimensions)" in text and "largest number" not in text


@pytest.mark.parametrize("extra", [["--no-refine"], [], ["--clusters", "3"]])
def test_one_wording_says_what_made_the_clusters_and_which_start_won(cli, trained_runs, values, tmp_path, monkeypatch,
                                                                     extra):
    """With --clusters 3, stdout said "from the model's 4 clusters" while the figure's title said "from a fresh
    k-means++ start": the summary line, the CSV's comment, the figure's title and --json now say it in the same
    words, naming the start that won."""

    import swarmctl.plots.clusters as plots

    titles = []
    draw = plots.plot_clusters
    monkeypatch.setattr(plots, "plot_clusters", lambda *a: titles.append(a[-1]) or draw(*a))
    points = _csv(tmp_path / "pts.csv", values)
    args = ["cluster", points, *_run_args(trained_runs), *extra, "--out", tmp_path / "o.csv", "--plot",
            tmp_path / "o.png", "--force"]
    r = cli(*args)
    assert r.exit_code == 0, r.output
    words = json.loads(cli(*args, "--json").stdout)["made_by"]
    assert titles == [f"{words} on pts.csv"] * 2, (titles, words)
    assert (tmp_path / "o.csv").read_text().splitlines()[0].startswith(f"# clusters by {words}; model swarm (")
    if not extra:
        assert words.startswith("EM, ") and " clusters by BIC, from " in words
    else:
        assert words == (f"{words.split(' alone')[0]} alone (no EM)" if extra == ["--no-refine"]
                         else f"EM at the 3 clusters given, from {words.split('given, from ')[-1]}")
    if extra != ["--no-refine"]:
        assert words.endswith(("from the model's start", "from a fresh k-means++ start")), words
        assert f"refined: {words} (the model proposed " in " ".join(r.output.split()), r.output


def test_the_summary_says_why_the_default_model_was_used(cli, trained_runs, values, tmp_path, monkeypatch):
    runs, _ = trained_runs
    shipped = tmp_path / "pretrained"
    export_weights(runs / "swarm" / "best.pt", shipped / "b-broad.pt", data_path=None,
                   record={"default_for": ["cluster"], "dataset": "a broad prior of 1..16 clusters"})
    monkeypatch.setenv("SWARMCTL_PRETRAINED", str(shipped))
    monkeypatch.chdir(tmp_path)
    _csv(tmp_path / "pts.csv", values)
    r = cli("cluster", "pts.csv", "--device", "cpu")
    text = " ".join(r.output.split())
    assert r.exit_code == 0 and "b-broad.pt" in text, r.output
    assert ("chosen as no run was named: the default for clustering files of points, as its record says; trained "
            "on a broad prior of 1..16 clusters") in text, text
    r = cli("cluster", "pts.csv", *_run_args(trained_runs), "--out", "o.csv")
    assert r.exit_code == 0 and "chosen as" not in r.output, r.output  # a model named needs no reason


@pytest.mark.slow
def test_more_blobs_than_the_models_slots_come_back_whole_without_a_warning(cli, trained_runs, tmp_path):
    """20 tight blobs, a model of 10 cluster slots: the refinement's search goes on past them (the scan of
    k-means partitions by BIC reaches 20) and finds the 20 (25 blobs came back as 3 with no warning)."""
    rs = np.random.RandomState(4)
    centres = np.array([[i * 30.0, j * 30.0] for i in range(5) for j in range(4)])
    labels = np.repeat(np.arange(20), 12)
    out = tmp_path / "o.csv"
    r = cli("cluster", _csv(tmp_path / "blobs.csv", centres[labels] + rs.randn(len(labels), 2)),
            *_run_args(trained_runs), "--out", out)
    text = " ".join(r.output.split())
    assert r.exit_code == 0 and "20 clusters in 240 points" in text, r.output
    assert "refined: EM, 20 clusters by BIC" in text, text
    assert not any(w in text for w in ("filled all", "clusters found", "capped", "still falling")), text
    found = _read(out)[1][:, 2].astype(int)
    assert len(set(zip(found.tolist(), labels.tolist(), strict=True))) == 20  # one cluster per blob


def test_the_default_csv_in_the_runs_folder_is_replaced_on_each_run(cli, trained_runs, values, tmp_path):
    """A command's default output in a run's own folder is the command's, replaced on each run (as eval's and
    plot-entropy's); only a file the user names needs --force."""
    points = _csv(tmp_path / "again.csv", values)
    out = trained_runs[0] / "swarm" / "cluster" / "again-clusters.csv"
    for _ in range(2):
        r = cli("cluster", points, *_run_args(trained_runs))
        assert r.exit_code == 0, r.output
        assert _read(out)[1].shape == (len(values), 5)
    out.write_text("stale\n")
    assert cli("cluster", points, *_run_args(trained_runs)).exit_code == 0 and _read(out)[1].shape[0] == len(values)


# ---- point files as `cluster` meets them: suggested columns, values at the ends of float64 --------------------

@pytest.mark.parametrize("header", [tiered(h, default=h == "x,x,y")
                                    for h in ["x,x,y", "a,b,c", '"1","2","3"', "x, y ,z", '"a,b",c,d', None]])
def test_the_columns_a_message_suggests_are_accepted(cli, trained_runs, tmp_path, header):
    """A file with more columns than the model takes: the --columns the message suggests works."""
    path = tmp_path / "p.csv"
    rng = np.random.default_rng(0)
    body = "\n".join(",".join(repr(float(v)) for v in row) for row in rng.normal(size=(40, 3)))
    path.write_text((header + "\n" if header else "") + body + "\n")
    args = ["cluster", path, *_run_args(trained_runs), "--out", tmp_path / "o.csv"]
    r = cli(*args)
    assert r.exit_code == 1, r.output
    suggested = re.search(r"--columns (\S+)\)", r.output).group(1)
    r = cli(*args, "--columns", suggested)
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize(("scale", "standardize"), [tiered(scale, standardize, default=scale == 1e39)
                                                    for scale in [1e20, 1e30, 1e37, 3e38, 1e39, 1e300]
                                                    for standardize in [True, False]])
def test_large_values_are_clustered_or_refused_never_nan(cli, trained_runs, tmp_path, scale, standardize):
    """--no-standardize hands the values to a float32 model as they are: beyond float32 (3.4e38) they
    would be inf and every probability NaN. The CSV holds finite numbers only, or the command refuses
    in one line with nothing written."""
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.normal(0, 1, (20, 2)), rng.normal(5, 1, (20, 2))]) * scale
    np.save(tmp_path / "p.npy", values)
    before = _snapshot(tmp_path)
    r = cli("cluster", tmp_path / "p.npy", *_run_args(trained_runs), "--out", tmp_path / "o.csv",
            *([] if standardize else ["--no-standardize"]))
    if r.exit_code == 0:
        back = np.loadtxt(tmp_path / "o.csv", delimiter=",", skiprows=2)  # comment, header
        assert np.isfinite(back[:, 2:]).all(), back[:5]
        assert np.array_equal(back[:, :2], values)
    else:
        assert r.exit_code == 1 and "Traceback" not in r.output and len(r.output.strip().splitlines()) <= 3
        assert re.search("--(no-)?standardize", r.output) and _snapshot(tmp_path) == before, r.output
    if standardize:
        assert r.exit_code == 0, r.output
    if not standardize and np.abs(values).max() > np.finfo(np.float32).max:
        assert r.exit_code == 1 and "float32" in r.output, r.output


@pytest.mark.parametrize("form", [tiered("csv", default=True), tiered("npy", default=False)])
def test_integer_coordinates_near_2_62_cluster_as_the_same_points_shifted(cli, trained_runs, tmp_path, form):
    """293 distinct integers near 2^62 (float64 holds only every 1024th there) cluster as the same points
    moved to near 0 by an exact integer: the low bits are kept until the points are centred."""
    rng = np.random.default_rng(0)
    small = np.concatenate([rng.integers(0, 150, (150, 2)), rng.integers(400, 550, (150, 2))]).astype(np.int64)
    outputs = {}
    for name, base in (("near0", 0), ("huge", 2**62)):
        big = small + base
        path = tmp_path / f"{name}.{form}"
        if form == "npy":
            np.save(path, big)
        else:
            path.write_text("x,y\n" + "".join(f"{a},{b}\n" for a, b in big.tolist()))
        r = cli("cluster", path, *_run_args(trained_runs), "--out", tmp_path / f"{name}.out.csv")
        assert r.exit_code == 0, r.output
        lines = (tmp_path / f"{name}.out.csv").read_text().splitlines()[2:]  # after the comment, the header
        outputs[name] = [line.split(",")[2] for line in lines]
        if name == "huge":  # the output carries the file's numbers exactly
            assert [tuple(map(int, line.split(",")[:2])) for line in lines] == [tuple(p) for p in big.tolist()]
    assert outputs["huge"] == outputs["near0"]


@pytest.mark.parametrize("scale", [tiered(2e307, default=True), tiered(1e200, default=False)])
def test_coordinates_near_the_end_of_float64_are_plotted_quietly(cli, trained_runs, tmp_path, scale):
    """NumPy's overflow warning (the span of the axes) and matplotlib's tick failure never reach the user."""
    rng = np.random.default_rng(0)
    path = tmp_path / "huge.csv"
    np.savetxt(path, np.concatenate([rng.normal(0, 1, (40, 2)), rng.normal(6, 1, (40, 2))]) * scale, delimiter=",")
    r = cli("cluster", path, *_run_args(trained_runs), "--out", tmp_path / "o.csv", "--plot", tmp_path / "o.png")
    assert r.exit_code == 0 and "overflow" not in r.output and "Traceback" not in r.output, r.output
    assert (tmp_path / "o.png").read_bytes()[:4] == b"\x89PNG"
