"""The CUDA path against the CPU: run on a GPU machine with `pytest -m gpu` (skipped without CUDA)."""

import pytest
import torch

from swarmctl import ModelConfig, create_model, list_models
from swarmctl.config import DataConfig, TrainConfig
from swarmctl.runs import start_run
from swarmctl.tasks.hungarian import hungarian_ce
from swarmctl.testing import random_sets

pytestmark = pytest.mark.gpu

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
