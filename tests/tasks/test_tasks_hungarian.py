import itertools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.stats import multivariate_normal

from swarmctl.tasks import hungarian
from swarmctl.tasks.hungarian import (
    device_assignments,
    hungarian_ce,
    matched_accuracy,
    matching_matrices,
    optimal_assignments,
    oracle_logits,
)


def brute_force_loss(logits, labels, mask):
    """min over all relabellings of the per-task mean CE, by enumeration."""
    C = logits.shape[-1]
    out = []
    for b in range(logits.shape[0]):
        m = mask[b]
        logp = F.log_softmax(logits[b][m].double(), -1)
        y = labels[b][m]
        out.append(min(-logp[torch.arange(len(y)), torch.tensor(p)[y]].mean().item()
                       for p in itertools.permutations(range(C))))
    return torch.tensor(out, dtype=torch.float64)


def test_hungarian_ce_equals_brute_force_over_permutations():
    C = 5  # 120 relabellings
    logits = torch.randn(4, 12, C) * 3
    labels = torch.randint(0, 4, (4, 12))
    mask = torch.ones(4, 12, dtype=torch.bool)
    mask[1, 9:] = False
    mask[3, 5:] = False
    got = hungarian_ce(logits, labels, mask).per_task
    torch.testing.assert_close(got.double(), brute_force_loss(logits, labels, mask), atol=1e-5, rtol=1e-5)


def test_uniform_logits_give_log_10():
    labels = torch.randint(0, 7, (3, 50))
    mask = torch.ones(3, 50, dtype=torch.bool)
    loss = hungarian_ce(torch.zeros(3, 50, 10), labels, mask).loss
    assert loss.item() == pytest.approx(math.log(10), abs=1e-6)


def test_confident_correct_logits_under_any_relabelling_give_zero():
    labels = torch.randint(0, 10, (4, 40))
    mask = torch.rand(4, 40) < 0.8
    mask[:, 0] = True
    for _ in range(3):
        relabel = torch.randperm(10)
        logits = 50.0 * F.one_hot(relabel[labels], 10).float()
        assert hungarian_ce(logits, labels, mask).loss.item() < 1e-6
        res = hungarian_ce(logits, labels, mask)
        assert (matched_accuracy(logits, labels, mask, res.assignment) == 1).all()


def test_padding_does_not_change_the_loss():
    logits = torch.randn(2, 8, 10)
    labels = torch.randint(0, 3, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.bool)
    base = hungarian_ce(logits, labels, mask).per_task
    pad_logits = torch.cat([logits, torch.randn(2, 5, 10) * 9], 1)
    pad_labels = torch.cat([labels, torch.randint(0, 10, (2, 5))], 1)
    pad_mask = torch.cat([mask, torch.zeros(2, 5, dtype=torch.bool)], 1)
    torch.testing.assert_close(hungarian_ce(pad_logits, pad_labels, pad_mask).per_task, base)


def test_matching_matrix_is_normalised_by_real_entities():
    logits = torch.randn(1, 6, 10)
    labels = torch.tensor([[0, 0, 1, 2, 2, 2]])
    mask = torch.tensor([[True] * 4 + [False] * 2])
    M = matching_matrices(logits, labels, mask)[0]
    logp = F.log_softmax(logits[0], -1)
    torch.testing.assert_close(M[0], (logp[0] + logp[1]) / 4)
    torch.testing.assert_close(M[2], logp[3] / 4)
    assert (M[3:] == 0).all()


def test_gradient_does_not_flow_through_the_assignment():
    logits = torch.randn(2, 10, 10, requires_grad=True)
    labels = torch.randint(0, 5, (2, 10))
    mask = torch.ones(2, 10, dtype=torch.bool)
    res = hungarian_ce(logits, labels, mask)
    res.loss.backward()
    fixed = logits.detach().clone().requires_grad_(True)
    target = res.assignment.gather(1, labels)
    F.cross_entropy(fixed.reshape(-1, 10), target.reshape(-1), reduction="none").view(2, 10).mean(1).mean().backward()
    torch.testing.assert_close(logits.grad, fixed.grad)


def test_oracle_logits_are_the_true_posterior():
    rng = np.random.default_rng(0)
    K = 3
    means = np.zeros((1, 10, 2))
    covs = np.zeros((1, 10, 2, 2))
    means[0, :K] = rng.normal(size=(K, 2))
    for k in range(K):
        a = rng.normal(size=(2, 2))
        covs[0, k] = a @ a.T + 0.1 * np.eye(2)
    x = rng.normal(size=(1, 7, 2))
    got = oracle_logits(torch.from_numpy(x), torch.from_numpy(means), torch.from_numpy(covs), torch.tensor([K]))
    dens = np.stack([multivariate_normal(means[0, k], covs[0, k]).pdf(x[0]) for k in range(K)], 1)
    want = np.log(dens / dens.sum(1, keepdims=True))
    np.testing.assert_allclose(got[0, :, :K].numpy(), want, rtol=1e-9, atol=1e-9)
    assert (got[0, :, K:] < -1000).all()


# ---- the device solver (used on accelerators: no host sync per step) -----------------------------------

def _matched_value(M, perm):
    return M.double().gather(2, perm.unsqueeze(-1)).squeeze(-1).sum(1)


@pytest.mark.parametrize("C", [1, 2, 5, 10])
def test_device_assignments_reach_scipys_optimum(C):
    gen = torch.Generator().manual_seed(C)
    M = torch.randn(64, C, C, generator=gen)
    M[::3, 0] = 0.0  # absent clusters give all-zero rows: ties among their columns
    got = device_assignments(M)
    assert sorted(got[0].tolist()) == list(range(C)) and (got.sort(1).values == torch.arange(C)).all()  # permutations
    torch.testing.assert_close(_matched_value(M, got), _matched_value(M, optimal_assignments(M)), rtol=0, atol=1e-12)


def test_device_assignments_equal_brute_force():
    M = torch.randn(20, 6, 6, generator=torch.Generator().manual_seed(1))
    perms = torch.tensor(list(itertools.permutations(range(6))))  # (720, 6)
    values = M.double()[:, torch.arange(6), perms].sum(-1)  # (20, 720)
    torch.testing.assert_close(_matched_value(M, device_assignments(M)), values.max(1).values, rtol=0, atol=1e-12)


def test_the_loss_and_its_gradients_equal_with_either_solver(monkeypatch):
    """The device solver changes where the matching is computed, not the loss: same per-task loss and
    same gradient with respect to the logits as scipy's Hungarian algorithm, on clustering-like tasks."""
    gen = torch.Generator().manual_seed(5)
    labels = torch.randint(0, 6, (50, 80), generator=gen)  # clusters 6..9 absent: zero rows, tied columns
    mask = torch.rand(50, 80, generator=gen) < 0.9
    base = torch.randn(50, 80, 10, generator=gen) * 2

    def loss_and_grad():
        logits = base.clone().requires_grad_(True)
        res = hungarian_ce(logits, labels, mask)
        res.loss.backward()
        return res.per_task.detach(), logits.grad

    scipy_loss, scipy_grad = loss_and_grad()
    monkeypatch.setattr(hungarian, "optimal_assignments", device_assignments)
    dev_loss, dev_grad = loss_and_grad()
    torch.testing.assert_close(dev_loss, scipy_loss, rtol=0, atol=0)
    torch.testing.assert_close(dev_grad, scipy_grad, rtol=0, atol=0)


def test_the_matched_loss_is_computed_in_float32_under_bf16_autocast():
    """Autocast (bf16 training) must not round the matched loss: only the model's own products run in bf16.
    The matching sums were a batched matrix product, which autocast ran in bf16 (loss off by ~1e-3)."""
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(16, 300, 10, generator=gen) * 3
    labels = torch.randint(0, 10, (16, 300), generator=gen)
    mask = torch.rand(16, 300, generator=gen) < 0.8
    want = hungarian_ce(logits, labels, mask).per_task
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = hungarian_ce(logits, labels, mask).per_task
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
