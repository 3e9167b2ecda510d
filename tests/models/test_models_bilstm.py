"""The BiLSTM baselines read padded batches on the CPU (no packed sequences) and give what packed sequences
give: the same outputs and gradients, whatever the padding holds, with the same parameters."""

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from swarmctl.models.bilstm import BiLSTM
from swarmctl.testing import assert_masked_no_influence

N = 9
LENGTHS = [N, 1, 5, 3, 8, 2]  # a full set and a set of one entity among others


def packed_reference(model: BiLSTM, x, mask):
    """The model as packed sequences read it: real entities (sorted by x[0] or in input order) first,
    the bidirectional LSTM over each set's own length only."""
    B, n, D = x.shape
    key = x[..., 0].masked_fill(~mask, float("inf")) if model.sort_by_first else (~mask).to(x.dtype)
    order = torch.argsort(key, dim=1, stable=True)
    xs = torch.gather(x, 1, order.unsqueeze(-1).expand(B, n, D))
    packed = pack_padded_sequence(xs, mask.sum(1).cpu(), batch_first=True, enforce_sorted=False)
    out, _ = pad_packed_sequence(model.lstm(packed)[0], batch_first=True, total_length=n)
    ys = model.head(out)
    return torch.empty_like(ys).scatter_(1, order.unsqueeze(-1).expand_as(ys), ys)


def case(sort_by_first: bool, dtype=torch.float64, n_layers: int = 3, seed: int = 0):
    torch.manual_seed(seed)
    model = BiLSTM(2, 3, 6, n_layers, sort_by_first=sort_by_first).to(dtype)
    lengths = torch.tensor(LENGTHS)
    perm = torch.stack([torch.randperm(N) for _ in LENGTHS])  # real entities scattered among the padding
    mask = torch.gather((torch.arange(N) < lengths[:, None]), 1, perm)
    x = torch.randn(len(LENGTHS), N, 2, dtype=dtype)
    return model, x, mask


@pytest.mark.parametrize("sort_by_first", [False, True], ids=["input-order", "sorted"])
@pytest.mark.parametrize("n_layers", [1, 3])
def test_outputs_and_gradients_equal_packed_sequences(sort_by_first, n_layers):
    model, x, mask = case(sort_by_first, n_layers=n_layers)
    grads = []
    for fn in (model, lambda x, mask: packed_reference(model, x, mask)):
        xg = x.clone().requires_grad_()
        out = fn(xg, mask)
        weight = torch.randn(out.shape, dtype=out.dtype, generator=torch.Generator().manual_seed(1))
        model.zero_grad()
        (out * mask.unsqueeze(-1) * weight).sum().backward()
        grads.append((out, xg.grad, *(p.grad.clone() for p in model.parameters())))
    got, want = grads
    torch.testing.assert_close(got[0], want[0], atol=1e-10, rtol=1e-8)  # padded outputs too (the head's bias)
    for g, w in zip(got[1:], want[1:], strict=True):
        torch.testing.assert_close(g, w, atol=1e-10, rtol=1e-8)


def test_float32_equals_packed_sequences_and_no_mask_reads_every_entity():
    model, x, mask = case(True, dtype=torch.float32)
    with torch.no_grad():
        torch.testing.assert_close(model(x, mask), packed_reference(model, x, mask), atol=1e-5, rtol=1e-5)
        full = torch.ones_like(mask)
        torch.testing.assert_close(model(x), packed_reference(model, x, full), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("sort_by_first", [False, True], ids=["input-order", "sorted"])
def test_padding_holding_nan_changes_no_real_output_nor_gradient(sort_by_first):
    model, x, mask = case(sort_by_first)
    assert_masked_no_influence(model, x, mask)
    grads = []
    for fill in (0.0, float("nan"), 1e6):
        xg = x.masked_fill(~mask.unsqueeze(-1), fill).requires_grad_()
        model.zero_grad()
        model(xg, mask)[mask].sum().backward()
        grads.append([xg.grad.masked_fill(~mask.unsqueeze(-1), 0.0), *(p.grad.clone() for p in model.parameters())])
        assert torch.isfinite(xg.grad).all() and (xg.grad[~mask] == 0).all()
    for other in grads[1:]:
        for g, w in zip(other, grads[0], strict=True):
            torch.testing.assert_close(g, w, atol=1e-10, rtol=1e-8)


def test_parameters_and_state_dict_keys_are_the_bidirectional_lstms():
    """Checkpoints written before load as they were: only the nn.LSTM's and the head's tensors."""
    model = BiLSTM(2, 3, 64, 3, sort_by_first=True)
    lstm, head = nn.LSTM(2, 64, 3, batch_first=True, bidirectional=True), nn.Linear(128, 3)
    want = [f"lstm.{k}" for k in lstm.state_dict()] + [f"head.{k}" for k in head.state_dict()]
    assert list(model.state_dict()) == want
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for m in (lstm, head) for p in m.parameters())


@pytest.mark.gpu
def test_cuda_packed_sequences_equal_the_cpu_path():
    model, x, mask = case(True)
    with torch.no_grad():
        want = model(x, mask)
        got = model.cuda()(x.cuda(), mask.cuda()).cpu()
    torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-8)
