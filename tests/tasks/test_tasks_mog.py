import json
import math

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal

from swarmctl.data.hdf5 import read_dataset
from swarmctl.data.mog import FreshBatches, MogParams, generate_mog_tasks, sample_mog_batch
from swarmctl.tasks.mog import mixture_log_likelihood, mog_batches, oracle_log_likelihood


def test_batches_follow_the_protocol():
    b = sample_mog_batch(np.random.default_rng(0), 10)
    B, N, _ = b.x.shape
    assert B == 10 and 100 <= N <= 499 and b.mask.all()
    assert b.means.shape == (10, 4, 2) and (b.means.abs() <= 4).all()
    torch.testing.assert_close(b.weights.sum(1), torch.ones(10, dtype=torch.float64))
    resid = b.x.double() - torch.gather(b.means, 1, b.labels.unsqueeze(-1).expand(-1, -1, 2))
    assert abs(resid.std().item() - 0.3) < 0.02  # noise sigma 0.3 around the generating mean


def test_fresh_batches_are_reproducible_and_new_every_epoch():
    a = FreshBatches(3, 10, seed=1, stream=0, epoch=0, params=MogParams())
    again = FreshBatches(3, 10, seed=1, stream=0, epoch=0, params=MogParams())
    later = FreshBatches(3, 10, seed=1, stream=0, epoch=1, params=MogParams())
    torch.testing.assert_close(a[2].x, again[2].x)
    assert a[2].x.shape != later[2].x.shape or not torch.equal(a[2].x, later[2].x)
    with pytest.raises(IndexError):
        a[3]


def test_log_likelihood_equals_a_direct_scipy_computation():
    b = sample_mog_batch(np.random.default_rng(3), 4)
    got = oracle_log_likelihood(b).numpy()
    for t in range(4):
        x = b.x[t].double().numpy()
        dens = sum(b.weights[t, k].item() * multivariate_normal(b.means[t, k].numpy(), 0.09 * np.eye(2)).pdf(x)
                   for k in range(4))
        assert got[t] == pytest.approx(np.log(dens).mean(), rel=1e-9)


def test_diagonal_stds_and_padding_in_the_likelihood():
    x = torch.tensor([[[0.0, 0.0], [1.0, 2.0], [9.0, 9.0]]], dtype=torch.float64)
    mask = torch.tensor([[True, True, False]])
    means = torch.tensor([[[0.0, 0.0], [1.0, 1.0]]], dtype=torch.float64)
    stds = torch.tensor([[[1.0, 2.0], [0.5, 0.5]]], dtype=torch.float64)
    logw = torch.log(torch.tensor([[0.3, 0.7]], dtype=torch.float64))
    want = np.mean([np.log(0.3 * multivariate_normal([0, 0], np.diag([1, 4])).pdf(p)
                           + 0.7 * multivariate_normal([1, 1], np.diag([0.25, 0.25])).pdf(p))
                    for p in ([0, 0], [1, 2])])
    assert mixture_log_likelihood(x, mask, means, stds, logw).item() == pytest.approx(want, rel=1e-12)


def test_oracle_log_likelihood_is_about_minus_1_4755():
    tasks = generate_mog_tasks(200, 10, seed=5)
    ll = np.mean([oracle_log_likelihood(b).mean().item() * len(b) for b in mog_batches(tasks, 10)]) / 10
    assert ll == pytest.approx(-1.4755, abs=0.03)  # oracle -1.4755 +- 0.0005 (Monte Carlo); SE ~ 0.005


def test_cli_mog_end_to_end(tmp_path, cli):
    test_set = tmp_path / "mog.h5"
    assert cli("gen-data", "--kind", "mog4", "--tasks", 30, "--out", test_set).exit_code == 0
    splits, info = read_dataset(test_set)
    assert info["kind"] == "mog" and len(splits["test"]) == 30
    runs = tmp_path / "runs"
    r = cli("train", "swarm-mog", "--hidden", 8, "--iters", 3, "--max-epochs", 3, "--steps-per-epoch", 4,
            "--val-batches", 2, "--lr-decay-epoch", 2, "--runs-dir", runs)
    assert r.exit_code == 0, r.output
    run = runs / "swarm-mog-8-3-1-s0"
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [x["lr"] for x in records] == pytest.approx([0.01, 0.01, 0.001])
    assert [x["batches"] for x in records] == [4, 4, 4]
    r = cli("eval", "swarm-mog-8-3-1-s0", "--runs-dir", runs, "--data", test_set)
    assert r.exit_code == 0, r.output
    res = json.loads((run / "eval-test.json").read_text())
    assert res["tasks"] == 30 and math.isfinite(res["log_likelihood"])
    assert res["log_likelihood"] < res["oracle_log_likelihood"] < -1.0
    # a clustering file is refused with one line, leaving nothing behind
    before = sorted(p for p in tmp_path.rglob("*"))
    r = cli("train", "swarm-mog", "--data", test_set, "--runs-dir", runs)
    assert r.exit_code == 2 and "drawn fresh" in r.output  # an option the task does not take
    assert sorted(p for p in tmp_path.rglob("*")) == before


def test_a_padded_step_equals_the_unpadded_step():
    """The device sampler pads N to a bucket: the loss, its gradients and the Adam update on the padded
    batch equal those on the same tasks without padding, to float rounding."""
    from swarmctl import ModelConfig, create_model
    from swarmctl.data.mog import MogBatch, sample_mog_batch_torch
    from swarmctl.tasks.mog import mog_loss

    padded = sample_mog_batch_torch(np.random.default_rng([4, 1]), 6)
    N = int(padded.mask[0].sum())
    assert padded.x.shape[1] > N  # this key draws N off a bucket edge
    plain = MogBatch(padded.x[:, :N].clone(), padded.mask[:, :N].clone(), padded.means, padded.weights, padded.sigma,
                     padded.labels[:, :N].clone())
    model = create_model(ModelConfig(name="swarm-mog", dim_hidden=16, n_iter=3))
    twin = create_model(ModelConfig(name="swarm-mog", dim_hidden=16, n_iter=3))
    twin.load_state_dict(model.state_dict())
    losses = []
    for m, batch in ((model, padded), (twin, plain)):
        opt = torch.optim.Adam(m.parameters(), lr=0.01)
        loss = mog_loss(m, batch)
        loss.mean().backward()
        opt.step()
        losses.append(loss.detach())
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(model.named_parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6, msg=name)
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)


def test_swarm_mog_reads_its_mixture_off_in_float32_under_bf16_autocast():
    """`train --step amp`: the parameters come out in float32, and one that the output bias dominates is not
    rounded to bf16 (spacing 1/64 at 3) nor scaled by a bf16-rounded 1/n in the mean over the points."""
    from swarmctl import ModelConfig, create_model

    torch.manual_seed(0)
    model = create_model(ModelConfig(name="swarm-mog", dim_hidden=16, n_iter=2)).eval()
    with torch.no_grad():
        model.swarm.output.weight.mul_(1e-3)
        model.swarm.output.bias.copy_(3.0 + torch.linspace(0.001, 0.019, model.swarm.output.bias.numel()))
    b = sample_mog_batch(np.random.default_rng(0), 3)
    mask = b.mask.clone()
    mask[0, 150:] = False  # 1/n for n with no exact bf16 reciprocal
    with torch.no_grad():
        full = model(b.x, mask)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            half = model(b.x, mask)
    assert half.dtype == torch.float32
    assert (half - full).abs().max().item() < 1e-4  # bf16 here: up to 0.008 from rounding the parameters
    for dtype in (torch.bfloat16, torch.float64):  # a model cast as a whole keeps its dtype
        with torch.no_grad():
            assert model.to(dtype)(b.x.to(dtype), mask).dtype == dtype


def test_a_collapsed_standard_deviation_keeps_the_loss_and_its_gradients_finite():
    """A std logit of -50 (softplus 2e-22: where training at a large step drove a component) made
    ((x - mu) / sigma)^2 overflow float32 and the gradient inf * 0 = NaN; the predicted std has a floor."""
    from swarmctl import ModelConfig, create_model
    from swarmctl.tasks.mog import mog_loss

    torch.manual_seed(0)
    model = create_model(ModelConfig(name="swarm-mog", dim_hidden=8, n_iter=2))
    with torch.no_grad():
        model.swarm.output.bias.view(4, 5)[1, 2:4] = -50.0  # component 1's two std logits
    batch = sample_mog_batch(np.random.default_rng(0), 3)
    loss = mog_loss(model, batch).mean()
    loss.backward()
    assert math.isfinite(loss.item())
    for name, p in model.named_parameters():
        assert torch.isfinite(p.grad).all(), name


@pytest.mark.slow
def test_a_seeded_run_that_went_non_finite_at_a_large_step_stays_finite():
    """swarm-mog (64-5-1), Adam lr 0.3, seed 3: a component's std collapsed and the gradient of step 5 was NaN
    (benchmarks/mog_divergence.py); with the floor the same steps stay finite."""
    from swarmctl import ModelConfig, create_model
    from swarmctl.tasks.mog import mog_loss

    torch.manual_seed(3)
    model = create_model(ModelConfig(name="swarm-mog", dim_hidden=64, n_iter=5))
    opt = torch.optim.Adam(model.parameters(), lr=0.3)
    batches = FreshBatches(8, 10, 3, 0, 0, MogParams())
    for i in range(len(batches)):
        loss = mog_loss(model, batches[i]).mean()
        opt.zero_grad()
        loss.backward()
        assert math.isfinite(loss.item()), i
        for name, p in model.named_parameters():
            assert torch.isfinite(p.grad).all(), (i, name)
        opt.step()
