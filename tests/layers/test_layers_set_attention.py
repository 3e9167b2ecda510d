import math

import torch

from swarmctl.layers.set_attention import ISAB, MAB, PMA, SAB, MultiheadAttention
from swarmctl.testing import (
    assert_padding_invariant,
    assert_permutation_equivariant,
    assert_permutation_invariant,
    random_sets,
)


def test_attention_uses_per_head_scaling_and_ignores_padded_keys():
    torch.manual_seed(1)
    d, h = 8, 2
    mha = MultiheadAttention(d, h).double()
    q = torch.randn(1, 3, d, dtype=torch.float64)
    kv = torch.randn(1, 5, d, dtype=torch.float64)
    kv_mask = torch.tensor([[True, True, True, False, False]])
    got = mha(q, kv, None, kv_mask)
    # reference: explicit per-head softmax over the three real keys, scaled by sqrt(d / h)
    Q, K, V = mha.q(q)[0], mha.k(kv[:, :3])[0], mha.v(kv[:, :3])[0]
    heads = []
    for k in range(h):
        sl = slice(k * d // h, (k + 1) * d // h)
        w = torch.softmax(Q[:, sl] @ K[:, sl].T / math.sqrt(d / h), dim=-1)
        heads.append(w @ V[:, sl])
    want = mha.out(torch.cat(heads, -1))
    torch.testing.assert_close(got[0], want)


def test_padded_queries_give_zeros():
    mab = MAB(8, 2)
    x, mask = random_sets(3, 6, 8)
    out = mab(x, x, mask, mask)
    assert (out[~mask] == 0).all()


def test_set_attention_blocks_are_equivariant_and_padding_invariant():
    x, mask = random_sets(3, 10, 8, dtype=torch.float64)
    for block in (SAB(8, 2).double(), ISAB(8, 4, 2).double()):
        assert_permutation_equivariant(block, x, mask, atol=1e-10)
        assert_padding_invariant(block, x, mask, atol=1e-10)


def test_pma_is_permutation_invariant():
    pma = PMA(8, 4, 2).double()
    x, mask = random_sets(3, 10, 8, dtype=torch.float64)
    assert pma(x, mask).shape == (3, 4, 8)
    assert_permutation_invariant(pma, x, mask, atol=1e-10)
