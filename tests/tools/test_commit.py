"""`python -m tools.campaigns commit` against hostile returned folders: every refusal is one line on stderr with exit 1
and leaves campaigns/ and the shipped models byte for byte as they were; a good session goes in whole,
and a shipped model is replaced only by a candidate that its own re-evaluation confirms."""

import copy
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import fresh_campaigns, fresh_progress, write_fake_mnist

from tools.campaigns.commit.reevaluate import tolerance

REPO = Path(__file__).resolve().parents[2]

CARD = "device: cpu (no CUDA); torch test; python test"
CLUSTER_RUN = "swarm-192-10-1-s0"  # the table's name; smoke sizes (8-2-1) inside, as a --smoke job trains
MOG_RUN = "swarm-mog-1"
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 32
DATE = "2026-01-01 00:00 UTC"


# ---- what a good session returns, built once --------------------------------------------------------------

def _noisy(src, dest):
    """``src`` with every weight zero: the same model, predicting uniform classes or sub-pixel values (worse
    than the trained one: ln 10 per point, ln 256 per sub-pixel)."""
    from swarmctl.training.checkpoint import Checkpoint, load_checkpoint, save_checkpoint

    ck = load_checkpoint(src)
    weights = {k: torch.zeros_like(v) if v.is_floating_point() else v for k, v in ck.model.items()}
    dest.parent.mkdir(parents=True, exist_ok=True)
    save_checkpoint(dest, Checkpoint(ck.task, ck.config, ck.state, weights, ck.optimizer))
    return dest


def _evaluate(checkpoint, runs):
    from swarmctl.runs import evaluate_run, open_run

    return evaluate_run(open_run(str(checkpoint), runs, "cpu"))


def fake_checkpoint(path, model_cfg, task, data_cfg, train_cfg=None, name="fake"):
    """A valid checkpoint of an untrained model (no optimizer state), without training."""
    from swarmctl import create_model
    from swarmctl.config import TrainConfig, to_dict
    from swarmctl.models import complete_config, count_parameters, paper_code
    from swarmctl.training.checkpoint import Checkpoint, TrainState, save_checkpoint

    model_cfg = complete_config(model_cfg)
    model = create_model(model_cfg)
    config = {"model": to_dict(model_cfg), "train": to_dict(train_cfg or TrainConfig()), "data": to_dict(data_cfg),
              "run": {"name": name, "task": task, "parameters": count_parameters(model), "code": paper_code(model_cfg),
                      "device": "cpu", "world_size": 1}}
    state = {"epoch": 1, "cursor": 0, "best_epoch": 0, "lr": 1e-3, "best_val": 1.0, "net_seconds": 1.0,
             "history": [1.0]}
    path.parent.mkdir(parents=True, exist_ok=True)
    save_checkpoint(path, Checkpoint(task, config, TrainState.from_dict(state), model.state_dict(), None))
    return config


@pytest.fixture(scope="session")
def assets(tmp_path_factory):
    """Tiny trained runs (swarm-image 8-2-1 on fake MNIST, swarm 8-2-1 on a tiny clustering file), their
    evaluations, worse (noisy) copies, and shipped models made from the noisy copies."""
    from swarmctl.config import DataConfig, ModelConfig, TrainConfig
    from swarmctl.data.clustering_generator import ClusteringParams
    from swarmctl.data.hdf5 import generate_dataset
    from swarmctl.runs import start_run
    from swarmctl.tasks import get_task
    from tools.campaigns.shipping import export_weights

    root = tmp_path_factory.mktemp("commit-assets")
    images = write_fake_mnist(root / "images")
    data = root / "clustering.h5"
    generate_dataset(data, ClusteringParams(n_tasks=40, val_fraction=0.25, k_min=2, k_max=4, n_min=8, n_max=20), 0)
    runs = root / "runs"
    start_run(ModelConfig(name="swarm-image", dim_hidden=8, n_iter=2, n_layers=1, dataset="mnist"),
              get_task("image").train_config(batch_size=20, max_epochs=2, device="cpu"),
              DataConfig(path=str(images), dataset="mnist"), runs, "mnist")
    start_run(ModelConfig(name="swarm", dim_hidden=8, n_iter=2, n_layers=1),
              TrainConfig(batch_size=8, max_epochs=2, device="cpu"), DataConfig(path=str(data)), runs, CLUSTER_RUN)
    a = SimpleNamespace(root=root, images=images, data=data, runs=runs, mnist=runs / "mnist",
                        cluster=runs / CLUSTER_RUN)
    a.mnist_eval = _evaluate(a.mnist / "best.pt", runs)
    a.cluster_eval = _evaluate(a.cluster / "best.pt", runs)
    a.weights = root / "weights.pt"
    export_weights(a.cluster / "best.pt", a.weights)
    a.mnist_noisy = _noisy(a.mnist / "best.pt", root / "noisy-mnist" / "best.pt")
    a.mnist_noisy_eval = _evaluate(a.mnist_noisy, runs)
    cluster_noisy = _noisy(a.cluster / "best.pt", root / "noisy-cluster" / "best.pt")
    a.cluster_noisy_eval = _evaluate(cluster_noisy, runs)
    a.weights_noisy = root / "weights-noisy.pt"
    export_weights(cluster_noisy, a.weights_noisy)
    assert a.mnist_noisy_eval["loss"] > a.mnist_eval["loss"] and a.cluster_noisy_eval["loss"] > a.cluster_eval["loss"]
    a.pretrained = root / "pretrained"  # the shipped models: the noisy copies, with their honest numbers
    export_weights(a.mnist_noisy, a.pretrained / "swarm-image-8-2-1-mnist.pt",
                   record={"eval": _scored(a.mnist_noisy_eval), "paper": {"bits_per_dim": 0.89}})
    export_weights(cluster_noisy, a.pretrained / "swarm-8-2-1-clustering.pt",
                   record={"eval": _scored(a.cluster_noisy_eval), "paper": {"loss": 0.416}})
    a.mog_config = fake_checkpoint(root / "mog.pt", ModelConfig(name="swarm-mog", dim_hidden=8, n_iter=2, n_layers=1),
                                   "mog", DataConfig(), get_task("mog").train_config(), name=MOG_RUN)
    return a


def _scored(res):
    return {k: v for k, v in res.items() if k != "checkpoint"}


def _dump(obj):
    return json.dumps(obj, indent=2).encode()


def good_spec(a):
    """What a job returns after continuing clustering, mog and mnist once (a dict a test may edit):
    session.json, the archives' members, the returned checkpoints."""
    current = {n: fresh_progress(n) for n in ("clustering", "mog", "mnist")}
    bits, loss = a.mnist_eval["bits_per_dim"], a.cluster_eval["loss"]
    mnist = {**current["mnist"], "best_bits_per_dim": bits, "epochs": 2, "net_minutes": 0.01,
             "sessions": [{"date": DATE, "card": CARD, "wall_seconds": 100.0, "epochs": [0, 2],
                           "test_bits_per_dim": bits, "median_epoch_s": 0.1, "train_exit": 0, "eval_exit": 0}]}
    clustering = {**current["clustering"],
                  "runs": {CLUSTER_RUN: {"model": "swarm", "code": "192-10-1", "seed": 0, "eval_loss": loss,
                                         "epochs": 1, "net_minutes": 0.01, "median_epoch_s": 0.5}},
                  "sessions": [{"date": DATE, "card": CARD, "wall_seconds": 50.0, "runs": [CLUSTER_RUN]}]}
    mog = {**current["mog"], "best_log_likelihood": -2.0,
           "sessions": [{"date": DATE, "card": CARD, "wall_seconds": 60.0, "run": MOG_RUN, "epochs": 2,
                         "test_log_likelihood": -2.0, "train_exit": 0, "eval_exit": 0}]}
    metrics = (a.mnist / "metrics.jsonl").read_bytes()
    run = f"clustering/runs/{CLUSTER_RUN}"
    archives = {
        "mnist": {"mnist/progress.json": _dump(mnist), "mnist/config.json": (a.mnist / "config.json").read_bytes(),
                  "mnist/metrics.jsonl": metrics, "mnist/eval-test.json": _dump(a.mnist_eval),
                  "mnist/curves.png": PNG, "mnist/samples.png": PNG, "mnist/train.txt": b"log\n"},
        "clustering": {"clustering/progress.json": _dump(clustering),
                       f"{run}/config.json": (a.cluster / "config.json").read_bytes(),
                       f"{run}/metrics.jsonl": (a.cluster / "metrics.jsonl").read_bytes(),
                       f"{run}/eval-val.json": _dump(a.cluster_eval), f"{run}/curves.png": PNG,
                       f"{run}/weights.pt": a.weights.read_bytes(), f"clustering/train-{CLUSTER_RUN}.txt": b"log\n"},
        "mog": {"mog/progress.json": _dump(mog), f"mog/runs/{MOG_RUN}/config.json": _dump(a.mog_config),
                f"mog/runs/{MOG_RUN}/eval-test.json": _dump({"model": "swarm-mog", "code": "8-2-1", "split": "test",
                                                              "tasks": 20, "log_likelihood": -2.0,
                                                              "oracle_log_likelihood": -1.4})},
    }
    session = {"card": CARD, "wall": 550.0, "gpu_tests_exit": 0,
               "plan": [{"campaign": "clustering", "gap": 1.0}, {"campaign": "mnist", "gap": 0.21},
                        {"campaign": "mog", "gap": 0.22}],
               "timing_measured": True,
               "timing": {"clustering_s_per_epoch": {"eager": 2.0}, "mog_ms_per_step": {"eager": 16.4},
                          "image_s_per_epoch": {"eager": 30.0}, "loss": {}},
               "flags": {"clustering": [], "mog": [], "image": []},
               "seconds": {"clustering": 50.0, "mnist": 100.0, "mog": 60.0}}
    files = {"mnist-last.pt": (a.mnist / "last.pt").read_bytes(), "mnist-best.pt": (a.mnist / "best.pt").read_bytes(),
             "gpu-tests.txt": b"5 skipped\n", "bench.txt": b"timings\n"}
    return {"session": session, "archives": archives, "files": files}


def _tar(members):
    """gzip tar bytes: a folder entry for every parent, then each member (bytes: a regular file; a TarInfo
    to add as it is)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        folders = sorted({str(Path(n).parents[i]) for n in members if isinstance(members[n], bytes)
                          for i in range(len(Path(n).parents) - 1)})
        for folder in folders:
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name, content in members.items():
            if isinstance(content, tarfile.TarInfo):
                tar.addfile(content)
                continue
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(content), 0o644
            tar.addfile(info, io.BytesIO(content))
    return buf.getvalue()


def write_out(spec, out):
    out.mkdir(parents=True, exist_ok=True)
    session = spec["session"]
    (out / "session.json").write_bytes(session if isinstance(session, bytes) else _dump(session))
    for name, members in spec["archives"].items():
        (out / f"{name}.tgz").write_bytes(members if isinstance(members, bytes) else _tar(members))
    for name, content in spec["files"].items():
        (out / name).write_bytes(content)
    return out


@pytest.fixture
def repo(tmp_path, assets):
    """A repository's campaigns/ (the committed progress files) and shipped models (the noisy ones)."""
    import shutil

    root = tmp_path / "repo"
    fresh_campaigns(root / "campaigns")
    shutil.copytree(assets.pretrained, root / "pretrained")
    return root


def tree_hash(root):
    """Every path under ``root`` with its kind and content (links by target, never followed)."""
    import hashlib

    h = hashlib.sha256()
    for folder, dirs, files in os.walk(root, followlinks=False):
        dirs.sort()
        for name in sorted(dirs + files):
            path = Path(folder) / name
            h.update(str(path.relative_to(root)).encode() + b"\0")
            if path.is_symlink():
                h.update(b"L" + os.readlink(path).encode())
            elif path.is_file():
                h.update(b"F" + path.read_bytes())
            else:
                h.update(b"D")
    return h.hexdigest()


@pytest.fixture
def commit(repo):
    """Run `python -m tools.campaigns commit` in-process on a returned folder: (exit code, stdout, stderr). An
    exception that escapes the command is a traceback: the test fails with it."""
    from typer.testing import CliRunner

    from tools.campaigns.cli import app

    def run(out, *extra):
        argv = ["commit", str(out), "--campaigns", str(repo / "campaigns"), "--pretrained",
                str(repo / "pretrained"), *map(str, extra)]
        result = CliRunner().invoke(app, argv, env={"COLUMNS": "200"}, catch_exceptions=False)
        return result.exit_code, result.stdout, result.stderr
    return run


def assert_refused(result, *words):
    rc, out, err = result
    assert rc == 1, (out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert all(w in err for w in words), err
    if os.environ.get("SHOW_REFUSALS"):
        print(err.strip(), file=sys.__stderr__)


@pytest.fixture
def refused_unchanged(repo, commit):
    """Commit ``spec`` (written to a fresh folder) and check that it is refused with one line naming
    ``words`` and that nothing in the repository changed."""
    def check(spec_or_out, *words, extra=()):
        out = spec_or_out if isinstance(spec_or_out, Path) else write_out(spec_or_out, repo.parent / "out")
        before = tree_hash(repo)
        result = commit(out, *extra)
        assert_refused(result, *words)
        assert tree_hash(repo) == before
        return result
    return check


# ---- a good session -----------------------------------------------------------------------------------------

def test_commit_puts_a_good_session_in_place_and_replaces_the_worse_shipped_models(assets, repo, commit):
    out = write_out(good_spec(assets), repo.parent / "out")
    rc, stdout, err = commit(out)
    assert rc == 0, err
    camp, pre = repo / "campaigns", repo / "pretrained"
    for name in ("progress.json", "config.json", "metrics.jsonl", "eval-test.json", "curves.png", "samples.png",
                 "last.pt", "best.pt"):
        assert (camp / "mnist" / name).is_file(), name
    assert (camp / "mnist" / "last.pt").read_bytes() == (assets.mnist / "last.pt").read_bytes()
    assert not (camp / "mnist" / "train.txt").exists()  # logs stay in the returned folder
    assert (camp / "clustering" / "runs" / CLUSTER_RUN / "weights.pt").is_file()
    assert (camp / "mog" / "runs" / MOG_RUN / "eval-test.json").is_file()
    assert json.loads((camp / "timing.json").read_text())["mog_ms_per_step"] == {"eager": 16.4}
    lines = (camp / "sessions.jsonl").read_text().splitlines()
    assert len(lines) == 1
    assert json.loads(lines[0])["session_sha256"] == hashlib.sha256((out / "session.json").read_bytes()).hexdigest()
    image = json.loads((pre / "swarm-image-8-2-1-mnist.json").read_text())
    assert image["eval"]["bits_per_dim"] == assets.mnist_eval["bits_per_dim"]
    assert image["paper"] == {"bits_per_dim": 0.89} and image["commit_check"]["items"] == 20
    cluster = json.loads((pre / "swarm-8-2-1-clustering.json").read_text())
    assert cluster["eval"]["loss"] == assets.cluster_eval["loss"] and cluster["run"] == CLUSTER_RUN
    assert "swarm-image-8-2-1-mnist.pt" in stdout and "swarm-8-2-1-clustering.pt" in stdout
    assert not [p for p in repo.iterdir() if p.name.startswith(".")]  # no staging folder left behind
    from swarmctl.training.checkpoint import load_checkpoint

    assert load_checkpoint(pre / "swarm-image-8-2-1-mnist.pt").optimizer is None  # weights only, as shipped


def test_commit_of_a_second_session_continues_the_first(assets, repo, commit):
    spec = good_spec(assets)
    assert commit(write_out(spec, repo.parent / "out1"))[0] == 0
    second = copy.deepcopy(spec)
    progress = json.loads(second["archives"]["mnist"]["mnist/progress.json"])
    progress["sessions"].append({**progress["sessions"][0], "date": "2026-01-02 00:00 UTC", "epochs": [2, 2]})
    second["archives"] = {"mnist": {**spec["archives"]["mnist"], "mnist/progress.json": _dump(progress)}}
    del second["archives"]["mnist"]["mnist/samples.png"]  # ran out of time: the old samples go with the old model
    second["session"] = {**spec["session"], "wall": 551.0, "timing_measured": False,
                         "plan": [{"campaign": "mnist", "gap": 0.2}], "seconds": {"mnist": 90.0}}
    rc, stdout, err = commit(write_out(second, repo.parent / "out2"))
    assert rc == 0, err
    assert len((repo / "campaigns" / "sessions.jsonl").read_text().splitlines()) == 2
    assert "shipped model replaced" not in stdout  # the same number does not beat itself
    assert not (repo / "campaigns" / "mnist" / "samples.png").exists()


def test_commit_refuses_checkpoints_that_do_not_continue_the_committed_run(assets, repo, commit, refused_unchanged):
    spec = good_spec(assets)
    assert commit(write_out(spec, repo.parent / "out1"))[0] == 0
    other = copy.deepcopy(spec)
    _move_images(other, assets, repo.parent / "other-images")  # another run: other data
    other["session"]["wall"] = 551.0
    progress = json.loads(other["archives"]["mnist"]["mnist/progress.json"])
    progress["sessions"].append({**progress["sessions"][0], "date": "2026-01-02 00:00 UTC"})
    other["archives"]["mnist"]["mnist/progress.json"] = _dump(progress)
    other["archives"] = {"mnist": other["archives"]["mnist"]}
    other["session"]["plan"], other["session"]["seconds"] = [{"campaign": "mnist", "gap": 0.2}], {}
    refused_unchanged(write_out(other, repo.parent / "out2"), "mnist-last.pt", "continue")


def test_commit_refuses_an_evaluation_without_the_checkpoints_it_scored(assets, refused_unchanged):
    spec = good_spec(assets)
    del spec["files"]["mnist-last.pt"], spec["files"]["mnist-best.pt"]
    refused_unchanged(spec, "mnist/progress.json", "no checkpoint")


# ---- names, links, numbers and checkpoints that do not belong: refused, nothing changed -------------------

def test_commit_refuses_a_campaign_named_dotdot(assets, refused_unchanged):
    spec = good_spec(assets)
    spec["archives"] = {"..": {"progress.json": _dump({"campaign": "..", "sessions": []})}}
    spec["files"] = {"..-last.pt": (assets.mnist / "last.pt").read_bytes()}
    spec["session"]["plan"], spec["session"]["seconds"] = [], {}
    refused_unchanged(spec, "'..'")


def test_commit_refuses_an_unknown_campaign(assets, refused_unchanged):
    spec = good_spec(assets)
    spec["archives"]["cifar"] = {"cifar/progress.json": _dump({"campaign": "cifar", "sessions": []})}
    refused_unchanged(spec, "'cifar'", "clustering")


def test_commit_refuses_a_checkpoint_of_an_unknown_campaign(assets, refused_unchanged):
    spec = good_spec(assets)
    spec["files"]["cifar-best.pt"] = spec["files"]["mnist-best.pt"]
    refused_unchanged(spec, "cifar-best.pt")


@pytest.mark.parametrize("linked", ["mnist-best.pt", "mnist-last.pt", "mnist.tgz", "session.json"])
def test_commit_refuses_a_returned_file_that_is_a_link(assets, repo, refused_unchanged, linked):
    out = write_out(good_spec(assets), repo.parent / "out")
    elsewhere = repo.parent / f"elsewhere-{linked}"
    (out / linked).rename(elsewhere)
    (out / linked).symlink_to(elsewhere)
    refused_unchanged(out, linked, "link")


@pytest.mark.parametrize("loss", [float("nan"), -1.0, "0.1", float("inf"), None, True])
def test_commit_refuses_a_loss_that_is_not_a_finite_non_negative_number(assets, refused_unchanged, loss):
    spec = good_spec(assets)
    members = spec["archives"]["clustering"]
    members[f"clustering/runs/{CLUSTER_RUN}/eval-val.json"] = _dump({**assets.cluster_eval, "loss": loss})
    progress = json.loads(members["clustering/progress.json"])
    progress["runs"][CLUSTER_RUN]["eval_loss"] = loss
    members["clustering/progress.json"] = _dump(progress)
    refused_unchanged(spec, "loss")


def test_commit_refuses_bits_per_dim_that_are_nan(assets, refused_unchanged):
    spec = good_spec(assets)
    spec["archives"]["mnist"]["mnist/eval-test.json"] = _dump({**assets.mnist_eval, "bits_per_dim": float("nan")})
    refused_unchanged(spec, "eval-test.json", "bits_per_dim")


def _big_clustering_record(pretrained, loss=0.9):
    """A shipped 192-10-1 SWARM record (no weights file) with a worse recorded loss."""
    (pretrained / "swarm-192-10-1-clustering.json").write_text(json.dumps(
        {"file": "swarm-192-10-1-clustering.pt", "model": "swarm", "code": "192-10-1", "task": "clustering",
         "dataset": None, "eval": {"loss": loss}}))


def test_commit_refuses_weights_of_another_size_than_their_config(assets, repo, refused_unchanged):
    _big_clustering_record(repo / "pretrained")
    spec = good_spec(assets)
    members = spec["archives"]["clustering"]
    run = f"clustering/runs/{CLUSTER_RUN}"
    config = json.loads(members[f"{run}/config.json"])
    config["model"].update(dim_hidden=192, n_iter=10)
    config["run"]["code"] = "192-10-1"
    members[f"{run}/config.json"] = _dump(config)
    members[f"{run}/eval-val.json"] = _dump({**assets.cluster_eval, "code": "192-10-1", "loss": 0.1})
    progress = json.loads(members["clustering/progress.json"])
    progress["runs"][CLUSTER_RUN]["eval_loss"] = 0.1
    members["clustering/progress.json"] = _dump(progress)
    refused_unchanged(spec, "weights.pt")


def test_a_refusal_names_the_returned_file_not_where_the_commit_unpacked_it(assets, repo, refused_unchanged):
    """A returned run config that is JSON but not a run's (a learning rate below zero): the refusal names the
    file as it came back (its place in clustering.tgz), never the commit's temporary folder."""
    spec = good_spec(assets)
    members = spec["archives"]["clustering"]
    name = f"clustering/runs/{CLUSTER_RUN}/config.json"
    config = json.loads(members[name])
    config["train"]["lr"] = -1.0
    members[name] = _dump(config)
    _, _, err = refused_unchanged(spec, name, "damaged")
    assert "-commit-" not in err and "unpacked" not in err and str(repo) not in err, err


def test_commit_refuses_a_mog_checkpoint_as_the_clustering_model(assets, repo, refused_unchanged):
    spec = good_spec(assets)
    spec["archives"]["clustering"][f"clustering/runs/{CLUSTER_RUN}/weights.pt"] = (assets.root / "mog.pt").read_bytes()
    refused_unchanged(spec, "weights.pt")


def test_commit_refuses_a_clustering_checkpoint_as_the_image_model(assets, refused_unchanged):
    spec = good_spec(assets)
    spec["files"]["mnist-best.pt"] = (assets.cluster / "best.pt").read_bytes()
    refused_unchanged(spec, "mnist-best.pt")


def _weights_only(assets):
    return (assets.pretrained / "swarm-image-8-2-1-mnist.pt").read_bytes()


@pytest.mark.parametrize("content", [lambda a: b"garbage", lambda a: b"", _weights_only,
                                     lambda a: (a.cluster / "last.pt").read_bytes()],
                         ids=["garbage", "empty", "no-optimizer", "another-run"])
def test_commit_refuses_a_last_checkpoint_the_next_session_cannot_resume(assets, refused_unchanged, content):
    spec = good_spec(assets)
    spec["files"]["mnist-last.pt"] = content(assets)
    refused_unchanged(spec, "mnist-last.pt")


def test_commit_refuses_a_checkpoint_without_its_archive(assets, refused_unchanged):
    spec = good_spec(assets)
    del spec["archives"]["mnist"]
    refused_unchanged(spec, "mnist.tgz")


def test_commit_changes_nothing_when_a_later_archive_is_corrupt(assets, refused_unchanged):
    spec = good_spec(assets)
    spec["archives"]["mog"] = _tar(spec["archives"]["mog"])[:-40]  # truncated: clustering and mnist come first
    refused_unchanged(spec, "mog.tgz")


def test_commit_refuses_the_same_session_twice(assets, repo, commit, refused_unchanged):
    out = write_out(good_spec(assets), repo.parent / "out")
    assert commit(out)[0] == 0
    refused_unchanged(out, "already committed")


def test_commit_refuses_progress_that_drops_committed_sessions(assets, repo, commit, refused_unchanged):
    """A second session started from the campaigns before the first was committed: its progress.json would
    drop the first session's record."""
    spec = good_spec(assets)
    assert commit(write_out(spec, repo.parent / "out1"))[0] == 0
    stale = {"session": {**spec["session"], "plan": [{"campaign": "mnist", "gap": 0.21}], "seconds": {"mnist": 9.0}},
             "archives": {"mnist": dict(spec["archives"]["mnist"])}, "files": spec["files"]}
    progress = json.loads(stale["archives"]["mnist"]["mnist/progress.json"])
    progress["sessions"][0]["date"] = "2026-01-01 00:05 UTC"
    stale["archives"]["mnist"]["mnist/progress.json"] = _dump(progress)
    refused_unchanged(write_out(stale, repo.parent / "out2"), "does not continue")


def test_commit_takes_a_job_of_the_version_before_a_new_train_option(assets, repo, commit):
    """A job already running when a train option was added returns config.json without the field (the
    checkpoints, read by this version, have its default): the same run, committed."""
    spec = good_spec(assets)
    config = json.loads(spec["archives"]["mnist"]["mnist/config.json"])
    assert config["train"]["lr_decay_epoch"] is None  # its default: as if it were new
    del config["train"]["lr_decay_epoch"]
    spec["archives"]["mnist"]["mnist/config.json"] = _dump(config)
    rc, _, err = commit(write_out(spec, repo.parent / "out"))
    assert rc == 0, err


def test_commit_refuses_a_smoke_job_into_campaigns_that_hold_real_jobs(assets, repo, commit, refused_unchanged):
    """`campaign run --smoke` tries the job on a CPU with tiny models: committed beside a card's sessions it would
    replace the card's step timings (and carried runs) with a CPU's. A trial folder of smoke jobs takes it."""
    spec = good_spec(assets)
    assert commit(write_out(spec, repo.parent / "out1"))[0] == 0
    smoke = copy.deepcopy(spec)
    smoke["session"] = {**spec["session"], "smoke": True, "wall": 300.0, "plan": [], "seconds": {},
                        "timing": {**spec["session"]["timing"], "smoke": True}}
    smoke["archives"], smoke["files"] = {}, {}
    refused_unchanged(write_out(smoke, repo.parent / "out2"), "--smoke", "trial folder")
    older = copy.deepcopy(smoke)  # written before session.json said so: its CPU card or smoke timings tell
    del older["session"]["smoke"]
    refused_unchanged(write_out(older, repo.parent / "out3"), "--smoke")
    trial = fresh_campaigns(repo.parent / "trial")
    rc, _, err = commit(write_out(smoke, repo.parent / "out4"), "--campaigns", trial)
    assert rc == 0, err
    assert json.loads((trial / "sessions.jsonl").read_text())["smoke"] is True


# ---- malformed JSON and archive members -------------------------------------------------------------------

SESSIONS = {
    "not-json": b"{card",
    "a-list": b"[]",
    "card-a-number": {"card": 5},
    "timing-a-string": {"timing_measured": True, "timing": "fast"},
    "timing-nan": {"timing_measured": True, "timing": {"mog_ms_per_step": {"eager": float("nan")}}},
    "timing-measured-a-string": {"timing_measured": "yes"},
    "seconds-of-an-unknown-campaign": {"seconds": {"cifar": 1.0}},
    "plan-not-a-list": {"plan": {"campaign": "mnist"}},
    "flags-not-lists": {"flags": {"image": "--compile"}},
    "exit-a-string": {"gpu_tests_exit": "0"},
    "smoke-a-string": {"smoke": "no"},
    "probes-a-list": {"timing_measured": True, "timing": {"compile_probes": []}},
    "probe-of-no-task": {"timing_measured": True, "timing": {"compile_probes": {"cifar": {"finished": True}}}},
    "probe-seconds-text": {"timing_measured": True,
                           "timing": {"compile_probes": {"mog": {"finished": True, "warmup_s": "x"}}}},
    "probe-finished-text": {"timing_measured": True, "timing": {"compile_probe": {"task": "mog", "finished": "yes"}}},
    "probe-negative": {"timing_measured": True, "timing": {"compile_probe": {"task": "mog", "compile_s": -1.0}}},
    "bad-utf8": b'{"card": "\xff"}',
}


@pytest.mark.parametrize("edit", SESSIONS.values(), ids=SESSIONS.keys())
def test_commit_refuses_a_malformed_session_json(assets, refused_unchanged, edit):
    spec = good_spec(assets)
    spec["session"] = edit if isinstance(edit, bytes) else {**spec["session"], **edit}
    refused_unchanged(spec, "session.json")


PROGRESS = {
    "not-json": b"{",
    "a-list": b"[]",
    "other-campaign": {"campaign": "mog"},
    "sessions-a-string": {"sessions": "x"},
    "best-nan": {"best_bits_per_dim": float("nan")},
    "best-a-string": {"best_bits_per_dim": "0.5"},
    "best-negative": {"best_bits_per_dim": -1.0},
    "best-forged": {"best_bits_per_dim": 0.5},
    "epochs-a-float": {"epochs": 2.5},
}


@pytest.mark.parametrize("edit", PROGRESS.values(), ids=PROGRESS.keys())
def test_commit_refuses_a_malformed_progress_json(assets, refused_unchanged, edit):
    spec = good_spec(assets)
    members = spec["archives"]["mnist"]
    progress = json.loads(members["mnist/progress.json"])
    members["mnist/progress.json"] = edit if isinstance(edit, bytes) else _dump({**progress, **edit})
    refused_unchanged(spec, "progress.json")


CLUSTER_PROGRESS = {
    "runs-a-list": {"runs": []},
    "run-loss-a-string": {"runs": {CLUSTER_RUN: {"model": "swarm", "code": "8-2-1", "seed": 0, "eval_loss": "x"}}},
    "run-not-returned": {"runs": {"lstm-128-3-s0": {"model": "lstm", "code": "128-3", "seed": 0, "eval_loss": 1.0}}},
    "side-by-side-zero": {"side_by_side": 0},
}


@pytest.mark.parametrize("edit", CLUSTER_PROGRESS.values(), ids=CLUSTER_PROGRESS.keys())
def test_commit_refuses_a_malformed_clustering_progress(assets, refused_unchanged, edit):
    spec = good_spec(assets)
    members = spec["archives"]["clustering"]
    members["clustering/progress.json"] = _dump({**json.loads(members["clustering/progress.json"]), **edit})
    refused_unchanged(spec, "clustering")


def _member(name, kind, **fields):
    info = tarfile.TarInfo(name)
    info.type = kind
    for key, value in fields.items():
        setattr(info, key, value)
    return info


MEMBERS = {
    "dotdot": {"mnist/../../evil.txt": b"x"},
    "absolute": {"/tmp/evil.txt": b"x"},
    "outside-the-folder": {"clustering/progress.json": b"{}"},
    "symlink-outside": {"mnist/link": _member("mnist/link", tarfile.SYMTYPE, linkname="/etc/passwd")},
    "symlink-inside": {"mnist/link": _member("mnist/link", tarfile.SYMTYPE, linkname="progress.json")},
    "hardlink": {"mnist/hard": _member("mnist/hard", tarfile.LNKTYPE, linkname="/etc/passwd")},
    "fifo": {"mnist/fifo": _member("mnist/fifo", tarfile.FIFOTYPE)},
    "device": {"mnist/dev": _member("mnist/dev", tarfile.CHRTYPE, devmajor=1, devminor=3)},
    "dot-part": {"mnist/./progress.json": b"{}"},
    "duplicate": {"dup": _member("mnist/progress.json", tarfile.REGTYPE)},
    "control-character": {"mnist/a\nb.txt": b"x"},
}


@pytest.mark.parametrize("extra", MEMBERS.values(), ids=MEMBERS.keys())
def test_commit_refuses_archive_members_that_leave_the_folder_or_link(assets, refused_unchanged, extra):
    spec = good_spec(assets)
    spec["archives"]["mnist"] = {**spec["archives"]["mnist"], **extra}
    refused_unchanged(spec, "mnist.tgz")


def test_commit_refuses_a_file_in_place_of_a_folder_member(assets, refused_unchanged):
    spec = good_spec(assets)
    members = spec["archives"]["clustering"]
    spec["archives"]["clustering"] = {**members, "clustering/runs/x": b"not a run folder"}
    refused_unchanged(spec, "clustering")


def test_commit_refuses_a_linked_campaign_folder(assets, repo, refused_unchanged):
    camp = repo / "campaigns"
    (camp / "mnist").rename(repo.parent / "mnist-elsewhere")
    (camp / "mnist").symlink_to(repo.parent / "mnist-elsewhere")
    refused_unchanged(good_spec(assets), "link")


# ---- the re-evaluation of a candidate shipped model ------------------------------------------------------

def test_commit_refuses_a_returned_number_its_reevaluation_contradicts(assets, refused_unchanged):
    spec = good_spec(assets)
    forged = {**assets.mnist_eval, "loss": assets.mnist_eval["loss"] * 0.9,
              "bits_per_dim": assets.mnist_eval["bits_per_dim"] * 0.9}
    spec["archives"]["mnist"]["mnist/eval-test.json"] = _dump(forged)
    progress = json.loads(spec["archives"]["mnist"]["mnist/progress.json"])
    progress["best_bits_per_dim"] = progress["sessions"][0]["test_bits_per_dim"] = forged["bits_per_dim"]
    spec["archives"]["mnist"]["mnist/progress.json"] = _dump(progress)
    refused_unchanged(spec, "re-evaluat")


def test_commit_keeps_a_shipped_model_that_scores_better_on_the_same_subset(assets, repo, commit):
    """The shipped model's record claims a worse number than the candidate's, but its weights are better on
    the same images: the campaign is committed, the shipped model is kept."""
    from tools.campaigns.shipping import export_weights

    pre = repo / "pretrained"
    export_weights(assets.mnist / "best.pt", pre / "swarm-image-8-2-1-mnist.pt",
                   record={"eval": {"bits_per_dim": 99.0}})
    spec = good_spec(assets)
    spec["files"]["mnist-best.pt"] = assets.mnist_noisy.read_bytes()
    spec["archives"]["mnist"]["mnist/eval-test.json"] = _dump(assets.mnist_noisy_eval)
    progress = json.loads(spec["archives"]["mnist"]["mnist/progress.json"])
    progress["best_bits_per_dim"] = progress["sessions"][0]["test_bits_per_dim"] = assets.mnist_noisy_eval[
        "bits_per_dim"]
    spec["archives"]["mnist"]["mnist/progress.json"] = _dump(progress)
    shipped = (pre / "swarm-image-8-2-1-mnist.pt").read_bytes(), (pre / "swarm-image-8-2-1-mnist.json").read_bytes()
    rc, stdout, err = commit(write_out(spec, repo.parent / "out"))
    assert rc == 0, err
    assert ((pre / "swarm-image-8-2-1-mnist.pt").read_bytes(), (pre / "swarm-image-8-2-1-mnist.json").read_bytes()) \
        == shipped
    assert "kept" in stdout and "swarm-image-8-2-1-mnist.pt" in stdout
    assert (repo / "campaigns" / "mnist" / "best.pt").read_bytes() == assets.mnist_noisy.read_bytes()


def _other_data(pretrained, loss=0.0):
    """The shipped clustering record as if trained on an older generator's data: another data checksum
    and a number from that data (better than anything here)."""
    path = pretrained / "swarm-8-2-1-clustering.json"
    record = json.loads(path.read_text())
    record["config"]["data"]["checksum"] = "0" * 64
    record["eval"]["loss"] = loss
    path.write_text(json.dumps(record))


def test_commit_compares_with_a_shipped_model_of_other_data_on_the_same_items(assets, repo, commit):
    _other_data(repo / "pretrained")
    rc, stdout, err = commit(write_out(good_spec(assets), repo.parent / "out"))
    assert rc == 0, err
    assert "swarm-8-2-1-clustering.pt: loss 0.0, on other data ->" in stdout
    record = json.loads((repo / "pretrained" / "swarm-8-2-1-clustering.json").read_text())
    assert record["config"]["data"]["checksum"] == json.loads((assets.cluster / "config.json").read_text())[
        "data"]["checksum"]


def test_commit_keeps_a_shipped_model_of_other_data_without_its_weights(assets, repo, commit):
    _other_data(repo / "pretrained")
    (repo / "pretrained" / "swarm-8-2-1-clustering.pt").unlink()
    before = (repo / "pretrained" / "swarm-8-2-1-clustering.json").read_bytes()
    rc, stdout, err = commit(write_out(good_spec(assets), repo.parent / "out"))
    assert rc == 0, err
    assert "swarm-8-2-1-clustering.pt kept: it was trained on other data" in stdout
    assert (repo / "pretrained" / "swarm-8-2-1-clustering.json").read_bytes() == before


def _move_images(spec, assets, where):
    """The returned image run re-saved as if it had trained on files in ``where`` (absent here)."""
    from swarmctl.training.checkpoint import Checkpoint, load_checkpoint, save_checkpoint

    for name in ("mnist-last.pt", "mnist-best.pt"):
        ck = load_checkpoint(assets.mnist / name.split("-")[1])
        config = {**ck.config, "data": {**ck.config["data"], "path": str(where)}}
        path = assets.root / "moved" / name
        path.parent.mkdir(exist_ok=True)
        save_checkpoint(path, Checkpoint(ck.task, config, ck.state, ck.model, ck.optimizer))
        spec["files"][name] = path.read_bytes()
    spec["archives"]["mnist"]["mnist/config.json"] = _dump(config)


def test_commit_without_the_test_images_refuses_unless_told_to_keep_the_shipped_model(assets, repo, commit,
                                                                                       refused_unchanged):
    spec = good_spec(assets)
    _move_images(spec, assets, repo.parent / "no-such-folder")
    out = write_out(spec, repo.parent / "out")
    refused_unchanged(out, "--data-dir", "--keep-shipped")
    shipped = (repo / "pretrained" / "swarm-image-8-2-1-mnist.json").read_bytes()
    rc, stdout, err = commit(out, "--keep-shipped")
    assert rc == 0, err
    assert (repo / "pretrained" / "swarm-image-8-2-1-mnist.json").read_bytes() == shipped
    assert (repo / "campaigns" / "mnist" / "best.pt").is_file()


def test_commit_finds_the_test_images_where_data_dir_says(assets, repo, commit):
    spec = good_spec(assets)
    _move_images(spec, assets, repo.parent / "no-such-folder")
    rc, stdout, err = commit(write_out(spec, repo.parent / "out"), "--data-dir", assets.images)
    assert rc == 0, err
    assert "swarm-image-8-2-1-mnist.pt" in stdout


def test_commit_without_the_clustering_data_refuses(assets, repo, refused_unchanged):
    spec = good_spec(assets)
    refused_unchanged(spec, "--clustering-data", extra=("--clustering-data", repo.parent / "nothing.h5"))


def test_agreement_tolerance_follows_the_subset(assets):
    """A few standard errors of the subset's own per-item losses, shrinking to the numeric tolerance when
    the subset is the whole split."""
    losses = torch.tensor([1.0, 2.0, 3.0, 4.0] * 25, dtype=torch.float64)  # mean 2.5, std 1.13
    wide = tolerance(losses, population=10_000)
    assert 0.4 < wide < 0.5  # 4 x 1.13 / 10
    assert tolerance(losses, population=100) < 0.01  # the whole split: only rounding is left
    assert tolerance(losses, population=400) < wide


# ---- all or nothing --------------------------------------------------------------------------------------------

def test_commit_puts_everything_back_when_a_move_fails(assets, repo, commit, monkeypatch):
    """The sixth file moved into the repository fails to take its name (a full disk): the files moved before
    it are put back as they were."""
    out = write_out(good_spec(assets), repo.parent / "out")
    before = tree_hash(repo)
    real, moved = os.replace, []

    def flaky(src, dest):
        if repo in Path(dest).parents and len(moved) < 6:
            moved.append(dest)
            if len(moved) == 6:
                raise OSError(28, "No space left on device", str(dest))
        real(src, dest)

    monkeypatch.setattr(os, "replace", flaky)
    assert_refused(commit(out), "no space left")
    assert len(moved) == 6 and tree_hash(repo) == before


# ---- the command and the Makefile ----------------------------------------------------------------------------

@pytest.mark.slow  # a fresh interpreter imports torch: about 2 s
def test_the_command_refuses_with_one_line_and_no_traceback(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "session.json").write_text("{")
    res = subprocess.run([sys.executable, "-m", "tools.campaigns", "commit", str(tmp_path / "out"),
                          "--campaigns", str(tmp_path / "c"), "--pretrained", str(tmp_path / "p")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "session.json" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize("folder", ["returned files", "it's \"odd\"; touch pwned `touch pwned2`"])
def test_make_campaign_commit_passes_FROM_as_one_argument(tmp_path, folder):
    """The recipe quotes FROM: a folder with spaces or shell characters reaches the command as one argument,
    and nothing in it runs."""
    (tmp_path / "pyproject.toml").write_text("")
    venv = tmp_path / ".venv"
    (venv / "bin").mkdir(parents=True)
    fake = venv / "bin" / "python"
    fake.write_text("#!/bin/sh\nprintf '%s\\n' \"$@\" > args.txt\nexit 1\n")  # records its arguments, then stops make
    fake.chmod(0o755)
    (venv / ".swarmctl-installed").write_text("")
    os.utime(tmp_path / "pyproject.toml", (0, 0))
    res = subprocess.run(["make", "-s", "-f", str(REPO / "Makefile"), "-C", str(tmp_path), "campaign-commit",
                          f"FROM={folder}"], capture_output=True, text=True, timeout=60)
    assert res.returncode != 0  # the fake script's exit 1 stops make before git
    args = (tmp_path / "args.txt").read_text().splitlines()
    assert args[:3] == ["-m", "tools.campaigns", "commit"] and args[3:] == [folder], res.stdout + res.stderr
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()


# ---- the MoG run carried across jobs: its last.pt in parts ------------------------------------------------------

@pytest.fixture(scope="session")
def mog_run(tmp_path_factory):
    """A tiny trained MoG run (8-2-1, 3 steps an epoch), its last.pt with Adam state, and one more epoch of it."""
    import shutil

    from swarmctl.config import DataConfig, ModelConfig
    from swarmctl.runs import resume_run, start_run
    from swarmctl.tasks import get_task

    runs = tmp_path_factory.mktemp("mog-run")
    start_run(ModelConfig(name="swarm-mog", dim_hidden=8, n_iter=2, n_layers=1),
              get_task("mog").train_config(steps_per_epoch=3, val_batches=2, max_epochs=2, device="cpu"),
              DataConfig(), runs, MOG_RUN)
    first = runs / "first"
    shutil.copytree(runs / MOG_RUN, first)
    resume_run(MOG_RUN, runs, max_epochs=3)
    return SimpleNamespace(first=first, second=runs / MOG_RUN)


def mog_parts_spec(run, epochs=(0, 2), date=DATE, committed=None, limit=None):
    """What a job returns after training the carried MoG run ``run`` (a folder): mog.tgz with its run's
    files, progress and the parts' manifest, and the parts of its last.pt (split in 3 unless ``limit``)."""
    import tempfile

    from tools.campaigns import parts

    last = (run / "last.pt").read_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "mog-last.pt").write_bytes(last)
        manifest = parts.split(Path(tmp) / "mog-last.pt", Path(tmp), limit or -(-len(last) // 3))
        files = {f: (Path(tmp) / f).read_bytes() for f, _, _ in manifest.parts}
    base = committed or fresh_progress("mog")
    ll = -3.0 - epochs[1] / 100
    progress = {**base, "best_log_likelihood": max(ll, base.get("best_log_likelihood", -99.0)), "run": MOG_RUN,
                "epoch": epochs[1],
                "sessions": [*base["sessions"], {"date": date, "card": CARD, "wall_seconds": 60.0, "run": MOG_RUN,
                                                 "epochs": list(epochs), "test_log_likelihood": ll,
                                                 "parts": len(files), "train_exit": 0, "eval_exit": 0}]}
    config = json.loads((run / "config.json").read_text())
    scored = {"model": "swarm-mog", "code": "8-2-1", "split": "test", "tasks": 20, "log_likelihood": ll,
              "oracle_log_likelihood": -1.4, "epoch": epochs[1] - 1}
    prefix = f"mog/runs/{MOG_RUN}"
    archive = {"mog/progress.json": _dump(progress), f"{prefix}/config.json": _dump(config),
               f"{prefix}/metrics.jsonl": (run / "metrics.jsonl").read_bytes(),
               f"{prefix}/eval-test.json": _dump(scored),
               "mog/mog-last.pt.parts.json": manifest.to_json().encode()}
    session = {"card": CARD, "wall": 550.0 + 10 * epochs[0] + epochs[1], "plan": [{"campaign": "mog", "gap": 0.5}],
               "timing_measured": False, "flags": {"mog": ["--step", "eager"]}, "seconds": {"mog": 60.0}}
    logs = _tar({"logs/bench.txt": b"x"})
    return {"session": session, "archives": {"mog": archive}, "files": {**files, "logs.tgz": logs}}


def test_commit_joins_the_mog_parts_and_keeps_them_in_parts(mog_run, repo, commit):
    """The parts come back, are joined and checked, and campaigns/mog holds last.pt again in parts (each
    under a job's file limit) beside the run's files; the logs archive is not a campaign."""
    from tools.campaigns import parts

    rc, stdout, err = commit(write_out(mog_parts_spec(mog_run.first), repo.parent / "out"))
    assert rc == 0, err
    mog = repo / "campaigns" / "mog"
    assert parts.joined_bytes(mog / "last.pt.parts.json") == (mog_run.first / "last.pt").read_bytes()
    assert all(p.stat().st_size < 16 * 2**20 for p in mog.glob("last.pt.part*"))
    progress = json.loads((mog / "progress.json").read_text())
    assert (progress["run"], progress["epoch"]) == (MOG_RUN, 2)
    assert (mog / "runs" / MOG_RUN / "metrics.jsonl").read_bytes() == (mog_run.first / "metrics.jsonl").read_bytes()


def test_commit_of_the_next_job_continues_the_carried_run(mog_run, repo, commit, refused_unchanged):
    """The second job continued the committed last.pt (epoch 2 -> 3): its run folder and parts replace the
    committed ones; a job that returns the older checkpoint again is behind the committed one."""
    from tools.campaigns import parts

    assert commit(write_out(mog_parts_spec(mog_run.first), repo.parent / "out1"))[0] == 0
    committed = json.loads((repo / "campaigns" / "mog" / "progress.json").read_text())
    second = mog_parts_spec(mog_run.second, (2, 3), "2026-01-02 00:00 UTC", committed)
    rc, _, err = commit(write_out(second, repo.parent / "out2"))
    assert rc == 0, err
    mog = repo / "campaigns" / "mog"
    assert parts.joined_bytes(mog / "last.pt.parts.json") == (mog_run.second / "last.pt").read_bytes()
    assert json.loads((mog / "progress.json").read_text())["epoch"] == 3
    committed = json.loads((mog / "progress.json").read_text())
    refused_unchanged(write_out(mog_parts_spec(mog_run.first, (3, 2), "2026-01-03 00:00 UTC", committed),
                                repo.parent / "out3"), "behind the committed")


def _flip(data):
    return data[:100] + bytes([data[100] ^ 1]) + data[101:]


MOG_PART_DAMAGE = {
    "missing": (lambda files: files.pop("mog-last.pt.part1"), "mog-last.pt.part1", "missing"),
    "damaged": (lambda files: files.update({"mog-last.pt.part0": _flip(files["mog-last.pt.part0"])}),
                "mog-last.pt.part0", "SHA-256"),
    "truncated": (lambda files: files.update({"mog-last.pt.part2": files["mog-last.pt.part2"][:-1]}),
                  "mog-last.pt.part2", "damaged"),
    "unlisted": (lambda files: files.update({"mog-last.pt.part3": b"more"}), "mog-last.pt.part3", "does not list"),
    "swapped": (lambda files: files.update({"mog-last.pt.part0": files["mog-last.pt.part1"],
                                            "mog-last.pt.part1": files["mog-last.pt.part0"]}), "mog-last.pt.part0"),
    "another-file": (lambda files: files.update({"clustering-last.pt.part0": b"x"}), "clustering-last.pt.part0"),
}


@pytest.mark.parametrize("damage", MOG_PART_DAMAGE.values(), ids=MOG_PART_DAMAGE.keys())
def test_commit_refuses_a_missing_or_damaged_mog_part(mog_run, refused_unchanged, damage):
    spec = mog_parts_spec(mog_run.first)
    edit, *words = damage
    edit(spec["files"])
    refused_unchanged(spec, *words)


def test_commit_takes_no_part_without_its_manifest(mog_run, repo, commit):
    """A job stopped while splitting or before packing mog.tgz leaves parts without their manifest: they are
    not taken (the committed checkpoint stays), the rest of the session is committed and the commit says so."""
    spec = mog_parts_spec(mog_run.first)
    del spec["archives"]["mog"]
    spec["session"]["plan"] = []
    rc, stdout, err = commit(write_out(spec, repo.parent / "no-archive"))
    assert rc == 0 and "mog-last.pt.part0" in stdout and "not taken" in stdout, (stdout, err)
    assert not list((repo / "campaigns" / "mog").glob("last.pt*"))


def test_commit_refuses_a_linked_part(mog_run, repo, refused_unchanged):
    spec = mog_parts_spec(mog_run.first)
    out = write_out(spec, repo.parent / "linked")
    target = repo.parent / "elsewhere"
    target.write_bytes(spec["files"]["mog-last.pt.part1"])
    (out / "mog-last.pt.part1").unlink()
    (out / "mog-last.pt.part1").symlink_to(target)
    refused_unchanged(out, "mog-last.pt.part1", "symbolic link")


def test_commit_refuses_a_mog_progress_that_disagrees_with_its_checkpoint(mog_run, repo, refused_unchanged):
    """progress.json says epoch 5 for a last.pt at epoch 2; or it moves the carried run with no parts back."""
    spec = mog_parts_spec(mog_run.first)
    progress = json.loads(spec["archives"]["mog"]["mog/progress.json"])
    spec["archives"]["mog"]["mog/progress.json"] = _dump({**progress, "epoch": 5})
    refused_unchanged(spec, "epoch is 5")
    spec = mog_parts_spec(mog_run.first)
    spec["files"] = {k: v for k, v in spec["files"].items() if ".part" not in k}
    del spec["archives"]["mog"]["mog/mog-last.pt.parts.json"]
    refused_unchanged(write_out(spec, repo.parent / "no-parts"), "no mog-last.pt came back")


def test_commit_refuses_a_mog_checkpoint_without_adam_in_parts(mog_run, tmp_path, refused_unchanged):
    """The parts join into a checkpoint the next job cannot resume (no optimizer state): refused like the
    image campaign's last.pt."""
    from swarmctl.files import holding
    from swarmctl.training.checkpoint import Checkpoint, load_checkpoint, save_checkpoint

    ck = load_checkpoint(mog_run.first / "last.pt")
    stripped = tmp_path / "run"
    stripped.mkdir()
    for f in ("config.json", "metrics.jsonl"):
        (stripped / f).write_bytes((mog_run.first / f).read_bytes())
    with holding(stripped):
        save_checkpoint(stripped / "last.pt", Checkpoint(ck.task, ck.config, ck.state, ck.model, None))
    refused_unchanged(mog_parts_spec(stripped), "mog-last.pt", "optimizer")
