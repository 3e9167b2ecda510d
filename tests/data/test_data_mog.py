"""The device sampler of MoG training tasks against the NumPy sampler: the same distribution (N,
weights, means, noise, labels given the weights), reproducible draws, padded buckets. Two-sample KS tests
at fixed seeds: p-values are deterministic, and each check is shown to reject a deliberately wrong sampler."""

import numpy as np
import pytest
import torch
from scipy.stats import ks_2samp

from swarmctl.data.mog import N_BUCKET, FreshBatches, MogParams, padded_size, sample_mog_batch, sample_mog_batch_torch

BATCHES = 300  # x 10 tasks per sampler


def _features(batches):
    """The quantities the checks compare, pooled over tasks."""
    n, w, m, noise, resid = [], [], [], [], []
    for b in batches:
        N = int(b.mask[0].sum())
        x, labels = b.x[:, :N].double(), b.labels[:, :N]
        centre = b.means.gather(1, labels.unsqueeze(-1).expand(-1, -1, 2))
        n.append(N)
        w.append(b.weights.flatten())
        m.append(b.means.flatten())
        noise.append((x - centre)[:, :40].flatten())  # 40 points per task: ~240,000 values
        counts = torch.nn.functional.one_hot(labels, 4).sum(1).double()  # (B, K)
        resid.append(((counts / N - b.weights) / (b.weights * (1 - b.weights) / N).sqrt()).flatten())
    cat = lambda parts: torch.cat(parts).numpy()  # noqa: E731
    return {"N": np.array(n), "weights": cat(w), "means": cat(m), "noise": cat(noise), "labels": cat(resid)}


def _numpy_draws():
    return [sample_mog_batch(np.random.default_rng([11, i]), 10) for i in range(BATCHES)]


def _device_draws(distort=None):
    out = []
    for i in range(BATCHES):
        b = sample_mog_batch_torch(np.random.default_rng([12, i]), 10)
        out.append(distort(b, i) if distort else b)
    return out


def _p_values(a, b):
    return {k: ks_2samp(a[k], b[k]).pvalue for k in a}


@pytest.fixture(scope="module")
def reference():
    return _features(_numpy_draws())


def test_the_device_sampler_draws_the_numpy_samplers_distribution(reference):
    p = _p_values(reference, _features(_device_draws()))
    assert min(p.values()) > 1e-3, p  # at these fixed seeds every p-value is far above it (printed on failure)


def _wider_noise(b, i):
    N = int(b.mask[0].sum())
    centre = b.means.gather(1, b.labels.unsqueeze(-1).expand(-1, -1, 2)).float()
    return type(b)(centre + 1.05 * (b.x - centre), b.mask, b.means, b.weights, b.sigma, b.labels) if N else b


def _wider_means(b, i):
    return type(b)(b.x, b.mask, b.means * 1.1, b.weights, b.sigma, b.labels)


def _peaked_weights(b, i):  # not Dirichlet(1, 1, 1, 1): labels still follow the weights they were drawn with
    w = b.weights.square()
    return type(b)(b.x, b.mask, b.means, w / w.sum(1, keepdim=True), b.sigma, b.labels)


def _uniform_labels(b, i):  # labels ignore the weights
    labels = torch.randint(0, 4, b.labels.shape, generator=torch.Generator().manual_seed(i))
    return type(b)(b.x, b.mask, b.means, b.weights, b.sigma, labels)


@pytest.mark.parametrize(("distort", "check"), [(_wider_noise, "noise"), (_wider_means, "means"),
                                                (_peaked_weights, "weights"), (_uniform_labels, "labels")])
def test_each_check_rejects_a_deliberately_wrong_sampler(reference, distort, check):
    """The power of the test above: 5 % wider noise, 10 % wider means, non-flat weights, labels ignoring the
    weights are each rejected by their check at the same seeds."""
    assert _p_values(reference, _features(_device_draws(distort)))[check] < 1e-6


def test_device_draws_are_reproducible_and_padded_to_a_bucket():
    a = sample_mog_batch_torch(np.random.default_rng([3, 0, 5, 7]), 10)
    again = sample_mog_batch_torch(np.random.default_rng([3, 0, 5, 7]), 10)
    other = sample_mog_batch_torch(np.random.default_rng([3, 0, 5, 8]), 10)
    for name in ("x", "mask", "means", "weights", "labels"):
        assert torch.equal(getattr(a, name), getattr(again, name)), name
    assert not torch.equal(a.means, other.means)
    N = int(np.random.default_rng([3, 0, 5, 7]).integers(100, 500))  # the NumPy sampler's N for the same key
    assert a.x.shape == (10, padded_size(N), 2) and a.x.shape[1] % N_BUCKET == 0
    assert (a.mask.sum(1) == N).all() and (a.x[~a.mask] == 0).all() and (a.labels[~a.mask] == 0).all()


def test_fresh_batches_on_a_device_keep_the_schedule():
    """A resumed run sees the same tasks: the sequence drawn on a device depends on (seed, stream, epoch,
    index) only, and has the same N per batch as the NumPy sequence."""
    host = FreshBatches(4, 10, seed=2, stream=0, epoch=3, params=MogParams())
    dev = FreshBatches(4, 10, 2, 0, 3, MogParams(), device="cpu")  # the device sampler, run on the CPU
    assert host.on("cpu") is not None and host.on("cpu").device is None  # the CPU keeps the NumPy sampler
    for i in range(4):
        assert int(dev[i].mask[0].sum()) == host[i].x.shape[1]
        assert torch.equal(dev[i].x, FreshBatches(4, 10, 2, 0, 3, MogParams(), device="cpu")[i].x)
