"""Hungarian-matched cross-entropy for direct amortized clustering (the paper, sec. 4.1), matched
accuracy, and the Bayes-oracle logits of the true generating mixture."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

ABSENT_LOGIT = -1e4  # logit of a class the oracle knows is absent (finite: keeps 0 * logit = 0)


def matching_matrices(logits: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
    """M[b, a, k] = (1 / n_b) * sum over real entities i with label a of log_softmax(z_i)[k].

    logits (B, N, C), labels (B, N) int, mask (B, N) bool (True = real) -> (B, C, C) float32, rows = true
    clusters, columns = output classes. The sums are plain float32 additions (a scatter-add), not a matrix
    product: under autocast a product would run in bfloat16, and on a GPU with TF32 on it would round its
    inputs to 10 mantissa bits; the matched loss is read off M, so either would bias the loss itself.
    """
    B, N, C = logits.shape
    m = mask.unsqueeze(-1).to(torch.float32)
    logp = F.log_softmax(logits.float(), dim=-1) * m  # (B, N, C), zero at padding
    rows = labels.unsqueeze(-1).expand(B, N, C)
    M = torch.zeros(B, C, C, dtype=torch.float32, device=logits.device).scatter_add(1, rows, logp)
    n_real = mask.sum(dim=1).clamp_min(1).to(torch.float32)
    return M / n_real.view(-1, 1, 1)


def optimal_assignments(M: Tensor) -> Tensor:
    """For each task the permutation maximising the matched sum: (B, C, C) -> (B, C) with
    out[b, a] = output class matched to true cluster a. No gradient.

    On the CPU: scipy's Hungarian algorithm, task by task. On an accelerator: :func:`device_assignments`,
    the same optimum solved on the device (no host sync, so the step can be queued or graph-captured).
    """
    if M.device.type != "cpu" and M.shape[-1] <= MAX_DEVICE_CLASSES:
        return device_assignments(M)
    from scipy.optimize import linear_sum_assignment  # here: its import takes half a second

    mats = M.detach().to("cpu", torch.float64).numpy()
    perms = [linear_sum_assignment(mat, maximize=True)[1] for mat in mats]
    return torch.from_numpy(np.array(perms, dtype=np.int64).reshape(mats.shape[:2])).to(M.device)


MAX_DEVICE_CLASSES = 12  # the subset table has 2^C rows: 1,024 for the 10 classes of the clustering task


@functools.lru_cache(maxsize=8)
def _subset_tables(C: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """For every subset S of the C columns (a bit mask) and column j: S without j, and whether j is in S."""
    subsets = torch.arange(1 << C, device=device).unsqueeze(1)  # (2^C, 1)
    bit = 1 << torch.arange(C, device=device)  # (C,)
    return subsets ^ bit, (subsets & bit) != 0  # (2^C, C) each


def device_assignments(M: Tensor) -> Tensor:
    """The exact maximum-weight assignment of every (C, C) matrix, batched on M's device, for C <= 12.

    Dynamic programming over column subsets, one row at a time: best[S] is the largest sum that assigns
    rows 0..k-1 to the columns in S (|S| = k); row k then takes a column j outside S. C steps of
    (B, 2^C, C) tensor operations with no data-dependent shape and no host read, in float64 like
    scipy's solver. (B, C, C) -> (B, C) long, out[b, a] = column of row a.
    """
    B, C, _ = M.shape
    without, has = _subset_tables(C, M.device)
    W = M.detach().double()
    best = torch.full((B, 1 << C), -math.inf, dtype=torch.float64, device=M.device)
    best[:, 0] = 0.0
    choices = []
    for k in range(C):
        cand = best[:, without] + W[:, k].unsqueeze(1)  # (B, 2^C, C): row k takes column j, the rest S - {j}
        best, j = cand.masked_fill(~has, -math.inf).max(dim=-1)
        choices.append(j)
    perm = torch.empty(B, C, dtype=torch.long, device=M.device)
    S = torch.full((B,), (1 << C) - 1, dtype=torch.long, device=M.device)
    for k in reversed(range(C)):  # walk back from the full set: the column row k took
        j = choices[k].gather(1, S.unsqueeze(1)).squeeze(1)
        perm[:, k] = j
        S = S ^ (1 << j)
    return perm


@dataclass(frozen=True)
class MatchedLoss:
    per_task: Tensor  # (B,) loss of each task in nats per entity
    assignment: Tensor  # (B, C) true cluster -> output class

    @property
    def loss(self) -> Tensor:
        return self.per_task.mean()


def hungarian_ce(logits: Tensor, labels: Tensor, mask: Tensor) -> MatchedLoss:
    """Cross-entropy under the best one-to-one relabelling of the output classes, per task.

    loss_b = -(1 / n_b) * sum_i log_softmax(z_i)[pi*(y_i)], pi* the optimal assignment (a constant).
    """
    M = matching_matrices(logits, labels, mask)
    perm = optimal_assignments(M)
    matched = M.gather(2, perm.unsqueeze(-1)).squeeze(-1).sum(dim=1)  # (B,)
    return MatchedLoss(per_task=-matched, assignment=perm)


def matched_accuracy(logits: Tensor, labels: Tensor, mask: Tensor, assignment: Tensor) -> Tensor:
    """Per task, the fraction of real entities whose arg-max class is the one matched to their cluster."""
    target = assignment.gather(1, labels)  # (B, N) output class expected for each entity
    correct = (logits.argmax(dim=-1) == target) & mask
    return correct.sum(dim=1).to(torch.float32) / mask.sum(dim=1).clamp_min(1)


def oracle_logits(x: Tensor, means: Tensor, covs: Tensor, n_clusters: Tensor) -> Tensor:
    """Log posterior p(cluster | x) under the true mixture (equal weights over the task's K clusters).

    x (B, N, 2), means (B, 10, 2), covs (B, 10, 2, 2), n_clusters (B,) -> (B, N, 10) in float64;
    classes >= K get a very low logit.
    """
    x, means, covs = x.double(), means.double(), covs.double()
    B, C = means.shape[:2]
    present = torch.arange(C, device=x.device).unsqueeze(0) < n_clusters.unsqueeze(1)  # (B, C)
    eye = torch.eye(2, dtype=torch.float64, device=x.device)
    covs = torch.where(present.view(B, C, 1, 1), covs, eye)  # keep absent slots invertible
    prec = torch.linalg.inv(covs)
    diff = x.unsqueeze(2) - means.unsqueeze(1)  # (B, N, C, 2)
    maha = torch.einsum("bncd,bcde,bnce->bnc", diff, prec, diff)
    logdet = torch.logdet(covs)  # (B, C)
    logpdf = -0.5 * maha - 0.5 * logdet.unsqueeze(1) - math.log(2 * math.pi)
    logpdf = logpdf.masked_fill(~present.unsqueeze(1), ABSENT_LOGIT)
    return logpdf - torch.logsumexp(logpdf, dim=-1, keepdim=True)
