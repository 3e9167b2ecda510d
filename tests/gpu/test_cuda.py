"""The CUDA path against the CPU: run on a GPU machine with `pytest -m gpu` (skipped without CUDA)."""

import contextlib
import warnings

import pytest
import torch

from swarmctl import ModelConfig, create_model, list_models
from swarmctl.config import DataConfig, TrainConfig
from swarmctl.runs import start_run
from swarmctl.tasks.hungarian import hungarian_ce
from swarmctl.testing import random_sets

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def strict_float32_between_tests():
    """Each test starts from strict float32 matrix products and no sync checking, and gets back whatever it
    changed, so a tolerance or a check that holds alone holds in any order."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
    if torch.cuda.is_available():
        with warnings.catch_warnings():  # PyTorch warns (once) that sync checking is a prototype
            warnings.simplefilter("ignore")
            torch.cuda.set_sync_debug_mode("default")


@contextlib.contextmanager
def no_host_sync():
    """Inside, any operation that makes the host wait for the device raises. PyTorch warns that this
    checking is a prototype; the warning is no failure (the suite turns warnings into errors), and the mode
    is reset however the block ends."""
    torch.cuda.synchronize()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Synchronization debug mode is a prototype")
            torch.cuda.set_sync_debug_mode("error")
        yield
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.cuda.set_sync_debug_mode("default")


CUDA = torch.device("cuda")
SET_MODELS = list_models("clustering") + list_models("mog")
TINY = {"dim_hidden": 16, "n_iter": 3, "n_layers": 1, "n_inducing": 4, "n_heads": 2}


def _pair(name: str, **cfg) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    cpu = create_model(ModelConfig(name=name, **{**TINY, **cfg})).eval()
    gpu = create_model(ModelConfig(name=name, **{**TINY, **cfg})).eval()
    gpu.load_state_dict(cpu.state_dict())
    return cpu, gpu.to(CUDA)


@pytest.mark.parametrize("name", SET_MODELS)
def test_cuda_forward_matches_the_cpu(name):
    cpu, gpu = _pair(name)
    x, mask = random_sets(4, 37)
    with torch.no_grad():
        want = cpu(x, mask)
        got = gpu(x.to(CUDA), mask.to(CUDA)).cpu()
    # TF32 matrix products on the GPU (10-bit mantissa): agreement to about 1e-3 relative
    torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)


def test_cuda_gradients_match_the_cpu():
    cpu, gpu = _pair("swarm", n_iter=5)
    x, mask = random_sets(3, 50)
    labels = torch.randint(0, 10, (3, 50))
    for model, dev in ((cpu, "cpu"), (gpu, CUDA)):
        model.train()
        hungarian_ce(model(x.to(dev), mask.to(dev)), labels.to(dev), mask.to(dev)).loss.backward()
    for (name, p), q in zip(cpu.named_parameters(), gpu.parameters(), strict=True):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=5e-2, atol=5e-3, msg=name)


@pytest.mark.parametrize("name", ["swarm", "set-transformer"])
def test_bf16_autocast_loss_is_finite_and_close_to_float32(name):
    _, gpu = _pair(name)
    x, mask = random_sets(8, 200)
    x, mask = x.to(CUDA), mask.to(CUDA)
    labels = torch.randint(0, 10, (8, 200), device=CUDA)
    with torch.no_grad():
        full = hungarian_ce(gpu(x, mask), labels, mask).loss
        with torch.autocast("cuda", dtype=torch.bfloat16):
            half = hungarian_ce(gpu(x, mask), labels, mask).loss
    assert torch.isfinite(half)
    assert abs(half.item() - full.item()) < 0.02 * abs(full.item())


def test_sampler_runs_on_cuda_and_is_seeded():
    torch.manual_seed(0)
    model = create_model(ModelConfig(name="swarm-image", dim_hidden=16, n_iter=3, dataset="mnist")).to(CUDA).eval()
    y = torch.arange(4, device=CUDA)
    gen = torch.Generator(device=CUDA).manual_seed(0)
    images = model.sample(y, 1.0, gen, incremental=True)
    assert images.shape == (4, 1, 28, 28) and images.device.type == "cuda" and images.dtype == torch.uint8
    again = model.sample(y, 1.0, torch.Generator(device=CUDA).manual_seed(0), incremental=True)
    assert torch.equal(images, again)  # the same seed gives the same images on the device


def test_training_on_cuda_writes_a_finite_resumable_run(tmp_path, tiny_h5):
    cfg = ModelConfig(name="swarm", dim_hidden=16, n_iter=3)
    res = start_run(cfg, TrainConfig(batch_size=4, max_epochs=2, device="cuda"), DataConfig(path=str(tiny_h5)),
                    tmp_path, "gpu")
    assert res.epochs == 2 and res.stop_reason == "max epochs"
    assert torch.isfinite(torch.tensor(res.best_val))
    assert (tmp_path / "gpu" / "best.pt").is_file()


@pytest.mark.parametrize("step", ["triton", "triton+graphs"])
def test_a_triton_run_on_cuda_trains_as_the_eager_run_does(tmp_path, tiny_h5, step, monkeypatch):
    """`train --step triton` (and with graphs): every iteration goes through the Triton cell (a graph replays
    what its capture recorded), and the epochs' losses are the eager run's, to TF32 rounding."""
    import json

    from swarmctl.layers import _triton
    from swarmctl.layers.swarm import SwarmLayer

    calls, iterations = [], []
    apply, states = _triton.TritonCell.apply, SwarmLayer.states
    monkeypatch.setattr(_triton.TritonCell, "apply", lambda *a: calls.append(1) or apply(*a))
    monkeypatch.setattr(SwarmLayer, "states", lambda self, *a, **k: iterations.append(self.n_iter) or
                        states(self, *a, **k))
    cfg = ModelConfig(name="swarm", dim_hidden=16, n_iter=3)
    for name in ("eager", step):
        calls.clear(), iterations.clear()
        start_run(cfg, TrainConfig(batch_size=4, max_epochs=2, device="cuda", step=name),
                  DataConfig(path=str(tiny_h5)), tmp_path, name)
        assert len(calls) == (0 if name == "eager" else sum(iterations)) and iterations, (name, len(calls))
    eager, fused = ([json.loads(x) for x in (tmp_path / n / "metrics.jsonl").read_text().splitlines()]
                    for n in ("eager", step))
    for a, b in zip(eager, fused, strict=True):
        assert a["val_loss"] == pytest.approx(b["val_loss"], rel=2e-3), (a, b)
    assert json.loads((tmp_path / step / "config.json").read_text())["train"]["triton"] is True


# ---- no host sync in a step, device MoG sampler, device Hungarian, CUDA graphs -------------------------

def test_the_device_hungarian_loss_and_gradients_equal_scipys_on_the_cpu():
    gen = torch.Generator().manual_seed(5)
    labels = torch.randint(0, 6, (50, 80), generator=gen)
    mask = torch.rand(50, 80, generator=gen) < 0.9
    base = torch.randn(50, 80, 10, generator=gen) * 2
    out = []
    for device in ("cpu", CUDA):
        logits = base.detach().clone().to(device).requires_grad_(True)  # a leaf on each device
        res = hungarian_ce(logits, labels.to(device), mask.to(device))
        res.loss.backward()
        out.append((res.per_task.detach().cpu(), logits.grad.cpu()))
    torch.testing.assert_close(out[1][0], out[0][0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out[1][1], out[0][1], rtol=1e-5, atol=1e-7)


def _mog_batches(n, seed=0):
    import numpy as np

    from swarmctl.data.mog import sample_mog_batch_torch

    return [sample_mog_batch_torch(np.random.default_rng([seed, i]), 10, device=CUDA) for i in range(n)]


def test_mog_tasks_drawn_on_cuda_are_seeded_and_need_no_host_sync():
    with no_host_sync():  # any host sync in the draws raises
        a, again = _mog_batches(3), _mog_batches(3)
    for x, y in zip(a, again, strict=True):
        assert x.x.device.type == "cuda" and torch.equal(x.x, y.x) and torch.equal(x.labels, y.labels)


def _graphed_against_eager(name, batches, loss_fn, lr_change_at=None, reload_at=None, **cfg):
    from swarmctl.training.steps import TrainStep

    torch.manual_seed(0)
    models = [create_model(ModelConfig(name=name, **{**TINY, **cfg})).to(CUDA) for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    opts = [torch.optim.Adam(m.parameters(), lr=0.01) for m in models]
    steps = [TrainStep(m, o, loss_fn, CUDA, graphs=g) for m, o, g in zip(models, opts, (False, True), strict=True)]
    assert steps[1].graphs and not steps[0].graphs
    snapshot = None
    losses = [[], []]
    for i, b in enumerate(batches):
        if i == lr_change_at:
            for o in opts:
                for g in o.param_groups:
                    g["lr"] = 0.003
        if i == 3:
            snapshot = [o.state_dict() for o in opts]
        if i == reload_at:  # what a backtrack does
            import copy

            for o, s in zip(opts, snapshot, strict=True):
                o.load_state_dict(copy.deepcopy(s))
        for k in range(2):
            losses[k].append(steps[k](b).item())
    assert len(steps[1]._graphs) >= 1  # the graphed path was used
    torch.testing.assert_close(torch.tensor(losses[1]), torch.tensor(losses[0]), rtol=1e-4, atol=1e-5)
    for p, q in zip(models[0].parameters(), models[1].parameters(), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5)


def test_graphed_mog_steps_equal_eager_steps():
    """Two bucket shapes, a learning-rate change and a reloaded optimizer state (backtracking) on the way."""
    from swarmctl.tasks.mog import mog_loss

    batches = _mog_batches(40)
    shapes = {tuple(b.x.shape) for b in batches}
    assert len(shapes) >= 2
    _graphed_against_eager("swarm-mog", batches, mog_loss, lr_change_at=20, reload_at=30)


@pytest.mark.parametrize("pooling", ["mean", "causal"])
def test_graphed_mog_steps_with_the_triton_cell_equal_eager_steps(pooling):
    from swarmctl.layers.swarm import triton_cell
    from swarmctl.tasks.mog import mog_loss

    with triton_cell():
        _graphed_against_eager("swarm-mog", _mog_batches(40), mog_loss, lr_change_at=20, reload_at=30, pooling=pooling)


def test_graphed_clustering_steps_equal_eager_steps():
    from swarmctl.data.dataset import ClusteringBatch
    from swarmctl.tasks.clustering import clustering_loss
    gen = torch.Generator().manual_seed(0)
    x, mask = random_sets(6, 40)
    batches = [ClusteringBatch((x + 0.1 * torch.randn(x.shape, generator=gen)).to(CUDA),
                               torch.randint(0, 4, (6, 40), generator=gen).to(CUDA), mask.to(CUDA),
                               torch.arange(6).to(CUDA)) for _ in range(8)]
    _graphed_against_eager("swarm", batches, clustering_loss)


@pytest.mark.parametrize("triton", [False, True])
def test_a_clustering_step_on_cuda_needs_no_host_sync(triton):
    from swarmctl.layers.swarm import triton_cell
    from swarmctl.tasks.clustering import clustering_loss
    from swarmctl.training.steps import TrainStep

    model = create_model(ModelConfig(name="swarm", **TINY)).to(CUDA)
    step = TrainStep(model, torch.optim.Adam(model.parameters(), lr=0.01), clustering_loss, CUDA)
    x, mask = random_sets(6, 40)
    from swarmctl.data.dataset import ClusteringBatch
    batch = ClusteringBatch(x.to(CUDA), torch.randint(0, 4, (6, 40)).to(CUDA), mask.to(CUDA), torch.arange(6).to(CUDA))
    with triton_cell(triton):
        step(batch)  # first step: lazy initialisations (and the Triton kernels' compilation)
        with no_host_sync():
            loss = step(batch)
    assert torch.isfinite(loss)


def test_a_mog_run_with_cuda_graphs_trains_and_resumes(tmp_path):
    cfg = ModelConfig(name="swarm-mog", dim_hidden=16, n_iter=3)
    train = TrainConfig(lr=0.01, batch_size=10, max_epochs=2, steps_per_epoch=12, val_batches=2, device="cuda",
                        step="graphs")
    res = start_run(cfg, train, DataConfig(path=None), tmp_path, "g")
    assert res.epochs == 2 and torch.isfinite(torch.tensor(res.best_val))
    from swarmctl.runs import resume_run

    again = resume_run("g", tmp_path, max_epochs=3)
    assert again.epochs == 3


def test_image_batches_cut_on_cuda_equal_the_host_batches():
    from swarmctl.data.images import ImageSet, shuffled_batches

    data = ImageSet(torch.randint(0, 256, (120, 1, 28, 28), dtype=torch.uint8), torch.randint(0, 10, (120,)))
    host = shuffled_batches(data, 50, seed=0, epoch=1)
    placed = host.on(CUDA)
    for i in range(len(host)):
        assert torch.equal(placed[i].x.cpu(), host[i].x) and torch.equal(placed[i].y.cpu(), host[i].y)


# ---- a CUDA run: the TF32 setting left as found, Adam's step counts, graphed updates and padded shapes -----

def test_a_training_run_on_cuda_leaves_the_tf32_setting_as_it_found_it(tmp_path, tiny_h5):
    torch.backends.cuda.matmul.allow_tf32 = False
    cfg = ModelConfig(name="swarm", dim_hidden=16, n_iter=3)
    start_run(cfg, TrainConfig(batch_size=4, max_epochs=1, device="cuda"), DataConfig(path=str(tiny_h5)), tmp_path,
              "tf32")
    assert torch.backends.cuda.matmul.allow_tf32 is False


def test_a_resumed_eager_run_keeps_adams_step_counts_on_the_host(tmp_path):
    """A checkpoint loaded onto the GPU puts Adam's step counts there; plain Adam then reads each one from the
    device every step (a host sync per parameter). A resumed eager run must have them on the host, and a
    graphed one on the device."""
    from swarmctl.training.steps import TrainStep

    model = create_model(ModelConfig(name="swarm-mog", **TINY)).to(CUDA)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    from swarmctl.tasks.mog import mog_loss

    batch = _mog_batches(1)[0]
    TrainStep(model, opt, mog_loss, CUDA)(batch)
    path = tmp_path / "opt.pt"
    torch.save(opt.state_dict(), path)
    for graphs, where in ((False, "cpu"), (True, "cuda")):
        fresh = torch.optim.Adam(model.parameters(), lr=0.01)
        fresh.load_state_dict(torch.load(path, map_location=CUDA, weights_only=True))
        step = TrainStep(model, fresh, mog_loss, CUDA, graphs=graphs)
        step(batch)
        assert {s["step"].device.type for s in fresh.state.values()} == {where}, graphs


def test_every_graphed_call_is_one_adam_update_on_cuda():
    from swarmctl.tasks.mog import mog_loss
    from swarmctl.training.steps import TrainStep

    model = create_model(ModelConfig(name="swarm-mog", **TINY)).to(CUDA)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    step = TrainStep(model, opt, mog_loss, CUDA, graphs=True)
    batch = _mog_batches(1)[0]
    for i in range(6):  # two warm-up steps, the capture, three replays
        step(batch)
        counts = {s["step"].item() for s in opt.state.values()}
        assert counts == {float(i + 1)}, (i, counts)
    assert len(step._graphs) == 1


def test_graphed_clustering_training_captures_its_padded_shapes(tmp_path):
    from swarmctl.data.clustering_generator import ClusteringParams
    from swarmctl.data.hdf5 import generate_dataset

    path = tmp_path / "d.h5"
    generate_dataset(path, ClusteringParams(n_tasks=300, n_min=100, n_max=1000), seed=0)
    cfg = ModelConfig(name="swarm", dim_hidden=16, n_iter=3)
    res = start_run(cfg, TrainConfig(batch_size=10, max_epochs=2, device="cuda", step="graphs"),
                    DataConfig(path=str(path)), tmp_path, "graphed")
    assert res.epochs == 2 and torch.isfinite(torch.tensor(res.best_val))
