import torch

from swarmctl.layers.pooling import causal_mean, mask_weights, masked_max, masked_mean
from swarmctl.testing import random_sets


def test_masked_mean_matches_loop():
    x, mask = random_sets(4, 9, 3, dtype=torch.float64)
    got = masked_mean(x, mask)
    for b in range(4):
        torch.testing.assert_close(got[b], x[b][mask[b]].mean(0))
    torch.testing.assert_close(masked_mean(x, weights=mask_weights(mask, x.dtype)), got)


def test_masked_mean_without_mask_is_plain_mean():
    x = torch.randn(2, 5, 3)
    torch.testing.assert_close(masked_mean(x), x.mean(1))


def test_masked_max_ignores_padding():
    x, mask = random_sets(4, 9, 3, dtype=torch.float64)
    x = x.masked_fill(~mask.unsqueeze(-1), 1e6)  # padding would win the max if it counted
    got = masked_max(x, mask)
    for b in range(4):
        torch.testing.assert_close(got[b], x[b][mask[b]].amax(0))


def test_causal_mean_is_inclusive_cumulative_mean():
    x = torch.randn(2, 7, 3, dtype=torch.float64)
    got = causal_mean(x)
    for t in range(7):
        torch.testing.assert_close(got[:, t], x[:, : t + 1].mean(1))
