"""Training as a real process: SIGKILL then resume, SIGTERM saving last.pt, and DDP over gloo."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch
import torch.multiprocessing as mp

from swarmctl.training.checkpoint import load_checkpoint

TRAIN = ["-m", "swarmctl", "train", "swarm", "--hidden", "8", "--iters", "3", "--batch-size", "3", "--device", "cpu"]
RESUME = ["-m", "swarmctl", "train", "swarm", "--device", "cpu", "--resume"]  # a resume takes no model options


def _start(tiny_h5, runs, *extra):
    env = {**os.environ, "COLUMNS": "200", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, *TRAIN, "--data", str(tiny_h5), "--runs-dir", str(runs), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _wait_for_epochs(path, n, proc, timeout=60):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.is_file() and len(path.read_text().splitlines()) >= n:
            return
        if proc.poll() is not None:
            raise AssertionError(f"training ended early: {proc.communicate()}")
        time.sleep(0.05)
    raise AssertionError("no progress")


@pytest.mark.slow  # a few processes or an interpreter: seconds of CPU; `make test-all`
def test_sigkill_then_resume_loses_at_most_the_epoch_in_progress(tiny_h5, tmp_path):
    runs = tmp_path / "runs"
    proc = _start(tiny_h5, runs, "--max-epochs", "1000")
    metrics = runs / "swarm-8-3-1-s0" / "metrics.jsonl"
    _wait_for_epochs(metrics, 3, proc)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    logged = len(metrics.read_text().splitlines())
    state = load_checkpoint(runs / "swarm-8-3-1-s0" / "last.pt").state  # complete, readable
    assert state.epoch >= logged - 1  # at most the epoch being written was lost
    target = state.epoch + 2
    out = subprocess.run([sys.executable, *RESUME, "swarm-8-3-1-s0", "--runs-dir", str(runs),
                          "--max-epochs", str(target)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    epochs = [json.loads(x)["epoch"] for x in metrics.read_text().splitlines()]
    assert epochs == list(range(target))
    assert not [p for p in metrics.parent.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.slow
def test_sigterm_saves_last_and_says_how_to_resume(tiny_h5, tmp_path):
    runs = tmp_path / "runs"
    proc = _start(tiny_h5, runs, "--max-epochs", "1000")
    _wait_for_epochs(runs / "swarm-8-3-1-s0" / "metrics.jsonl", 1, proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert "interrupted (SIGTERM)" in err and "--resume swarm-8-3-1-s0" in err and "Traceback" not in err
    assert load_checkpoint(runs / "swarm-8-3-1-s0" / "last.pt").state.stop_reason == "interrupted (SIGTERM)"


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ddp_worker(rank, world, port, data, out):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    import torch.distributed as dist

    from swarmctl import runs
    from swarmctl.config import DataConfig, ModelConfig, TrainConfig
    from swarmctl.runs import lifecycle

    captured = {}
    real_fit = lifecycle.fit

    def fit_and_keep(model, *args, **kwargs):
        captured["model"] = model
        return real_fit(model, *args, **kwargs)

    lifecycle.fit = fit_and_keep
    torch.manual_seed(rank)  # different initial weights on each rank: DDP must synchronise them
    res = runs.start_run(ModelConfig(name="swarm", dim_hidden=8, n_iter=3),
                                      TrainConfig(batch_size=3, max_epochs=2, device="cpu", seed=rank),
                                      DataConfig(path=data), out / "runs", "ddp")
    torch.save(captured["model"].state_dict(), out / f"rank{rank}.pt")
    torch.save({"epochs": res.epochs}, out / f"result{rank}.pt")
    dist.destroy_process_group()


@pytest.mark.slow  # a few processes or an interpreter: seconds of CPU; `make test-all`
def test_ddp_two_cpu_processes_end_with_equal_weights(tiny_h5, tmp_path):
    mp.spawn(_ddp_worker, args=(2, _free_port(), str(tiny_h5), tmp_path), nprocs=2, join=True)
    a, b = torch.load(tmp_path / "rank0.pt"), torch.load(tmp_path / "rank1.pt")
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)
    assert torch.load(tmp_path / "result0.pt")["epochs"] == torch.load(tmp_path / "result1.pt")["epochs"] == 2
    run = tmp_path / "runs" / "ddp"
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 2  # rank 0 alone wrote
    assert json.loads((run / "config.json").read_text())["run"]["world_size"] == 2


@pytest.mark.slow
def test_torchrun_launches_the_cli(tiny_h5, tmp_path):
    runs = tmp_path / "runs"
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port",
                          str(_free_port()), *TRAIN[0:], "--data", str(tiny_h5), "--runs-dir", str(runs),
                          "--max-epochs", "2"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert len((runs / "swarm-8-3-1-s0" / "metrics.jsonl").read_text().splitlines()) == 2
