"""A command that fails leaves nothing new behind: a run that runs out of memory before its first
checkpoint is removed (folder, config.json, lock and the runs folder it made), one that fails later keeps
its last.pt to resume from, a refused resume leaves no lock file it created, and CUDA asked for where there is
none is refused before anything is written."""

import pytest
from faults import assert_clean_failure, cli, snapshot

TINY = ["--hidden", 8, "--iters", 2, "--batch-size", 6, "--device", "cpu"]


@pytest.fixture
def failing_step(clustering_training_loss):
    """Make training step number ``n`` (1-based, over the whole command) raise MemoryError, as a batch too
    large for memory does."""
    steps = {"n": 0, "fail_at": None}

    def failing(real):
        def loss(model, batch):
            if model.training:
                steps["n"] += 1
                if steps["n"] == steps["fail_at"]:
                    raise MemoryError
            return real(model, batch)
        return loss

    clustering_training_loss(failing)

    def fail_at(n):
        steps["fail_at"] = n
    return fail_at


@pytest.mark.parametrize("runs", ["runs", "deep/er/runs"])
@pytest.mark.parametrize("name", [None, "grp/sub"])
def test_out_of_memory_before_the_first_checkpoint_leaves_nothing(tmp_path, tiny_h5, failing_step, runs, name):
    failing_step(2)
    before = snapshot(tmp_path)
    r = cli("train", "swarm", *TINY, "--data", tiny_h5, "--runs-dir", tmp_path / runs,
            *(["--name", name] if name else []))
    assert r.exit_code == 1 and "out of memory" in r.output and "Traceback" not in r.output, r.output
    assert snapshot(tmp_path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.h5"]  # no folder left either


def test_out_of_memory_into_an_existing_runs_folder_keeps_the_folder(tmp_path, tiny_h5, failing_step):
    (tmp_path / "runs").mkdir()
    failing_step(1)
    r = cli("train", "swarm", *TINY, "--data", tiny_h5, "--runs-dir", tmp_path / "runs")
    assert r.exit_code == 1, r.output
    assert (tmp_path / "runs").is_dir() and list((tmp_path / "runs").iterdir()) == []


def test_out_of_memory_after_a_checkpoint_keeps_the_run_to_resume(tmp_path, tiny_h5, failing_step):
    failing_step(5)  # tiny_h5: 18 training tasks, 3 batches an epoch: epoch 1 fails
    runs = tmp_path / "runs"
    r = cli("train", "swarm", *TINY, "--max-epochs", 3, "--data", tiny_h5, "--runs-dir", runs, "--name", "a")
    assert r.exit_code == 1 and "out of memory" in r.output, r.output
    assert (runs / "a" / "last.pt").is_file() and (runs / "a" / "config.json").is_file()
    failing_step(None)
    r = cli("train", "swarm", "--resume", "a", "--runs-dir", runs)
    assert r.exit_code == 0, r.output


def test_a_refused_resume_leaves_no_lock_it_made(tmp_path, tiny_h5):
    runs = tmp_path / "runs"
    assert cli("train", "swarm", *TINY, "--max-epochs", 1, "--data", tiny_h5, "--runs-dir", runs, "--name", "a"
               ).exit_code == 0
    (runs / "a" / ".lock").unlink()  # a run copied from elsewhere has none
    before = snapshot(tmp_path)
    r = cli("train", "lstm", "--resume", "a", "--runs-dir", runs)
    assert r.exit_code == 1 and "trains model 'swarm', not 'lstm'" in r.output, r.output
    assert snapshot(tmp_path) == before and not (runs / "a" / ".lock").exists()


def test_cuda_asked_for_where_there_is_none_is_one_line_and_writes_nothing(tiny_h5, tmp_path, monkeypatch):
    """`--device cuda` is a valid value the machine cannot serve: exit 1, one line naming CUDA and the device that
    works instead, no run folder."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a machine without CUDA, wherever this runs
    before = snapshot(tmp_path)
    r = cli("train", "swarm", *TINY[:4], "--device", "cuda", "--max-epochs", 1, "--data", tiny_h5,
            "--runs-dir", tmp_path / "runs")
    assert_clean_failure(r, tmp_path, before)
    assert "CUDA is not available" in r.output and "cpu" in r.output, r.output
