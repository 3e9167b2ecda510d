"""Bidirectional-LSTM baselines over the entity sequence, unsorted and sorted by the first
coordinate (arXiv:1906.09400, Sec. 4.1)."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.func import functional_call
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from swarmctl.config import ModelConfig
from swarmctl.layers.pooling import check_set_input, zero_padded
from swarmctl.models.registry import register_model

_WEIGHTS = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")


class BiLSTM(nn.Module):
    """BiLSTM (n_layers, dim_hidden per direction) + a linear map 2*dim_hidden -> dim_out per entity.

    With ``sort_by_first=True`` the entities of each set are read in ascending order of their first
    coordinate and the outputs are put back in the input order, which makes the model
    permutation-equivariant. Unsorted, the output depends on the entity order.

    Departure from the authors' code: padded entities are moved to the end and excluded as packed
    sequences would exclude them, so padding never changes real outputs (the authors fed padding through
    the LSTM). On the CPU the same numbers come without packing (:meth:`_padded`: PyTorch's CPU LSTM reads
    packed sequences 6 to 20 times slower than a padded batch); on CUDA the packed sequences stay.

    x (B, N, D_in), mask (B, N) bool (True = present) -> (B, N, D_out).
    """

    def __init__(self, dim_in: int, dim_out: int, dim_hidden: int, n_layers: int, sort_by_first: bool = False):
        super().__init__()
        self.lstm = nn.LSTM(dim_in, dim_hidden, n_layers, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * dim_hidden, dim_out)
        self.sort_by_first = sort_by_first
        self.symmetry = "equivariant" if sort_by_first else "order-dependent"
        # one-layer, one-direction LSTMs that run with self.lstm's weights: kept in a tuple, so that they add
        # no parameter and no state_dict key (their own weights are never used)
        self._one_layer = (nn.LSTM(dim_in, dim_hidden, batch_first=True),
                           nn.LSTM(2 * dim_hidden, dim_hidden, batch_first=True))

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        check_set_input(x, mask, self.lstm.input_size, "BiLSTM")
        B, N, D = x.shape
        if B == 0 or N == 0:  # nothing to read (packing refuses it): the outputs of no entity
            return self.head(x.new_zeros(B, N, self.head.in_features))
        if mask is None:
            mask = torch.ones(B, N, dtype=torch.bool, device=x.device)
        else:  # an empty set is read as one zero entity (packing needs one), never as what its padding holds
            x = zero_padded(x, mask)
        key = x[..., 0].masked_fill(~mask, float("inf")) if self.sort_by_first else (~mask).to(x.dtype)
        order = torch.argsort(key, dim=1, stable=True)  # (B, N): real entities (sorted or in order), padding last
        xs = torch.gather(x, 1, order.unsqueeze(-1).expand(B, N, D))
        lengths = mask.sum(dim=1).clamp_min(1)  # an empty set: one zero entity, as packing needs one
        out = self._packed(xs, lengths) if xs.is_cuda else self._padded(xs, lengths)  # (B, N, 2H)
        ys = self.head(out)
        return torch.empty_like(ys).scatter_(1, order.unsqueeze(-1).expand_as(ys), ys)

    def _packed(self, xs: Tensor, lengths: Tensor) -> Tensor:
        packed = pack_padded_sequence(xs, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        return pad_packed_sequence(out, batch_first=True, total_length=xs.shape[1])[0]

    def _padded(self, xs: Tensor, lengths: Tensor) -> Tensor:
        """What ``_packed`` gives, from padded batches: ``xs`` (B, N, D) with each set's ``lengths`` real
        entities first. With padding last, the forward direction reads each set as it is; the reverse one
        reads it reversed within its own length, and its outputs are reversed back. Each layer's directions
        run as a one-layer LSTM with this LSTM's own weights, so parameters and checkpoints are the same."""
        B, N, _ = xs.shape
        t = torch.arange(N, device=xs.device)
        real = (t < lengths.unsqueeze(1)).unsqueeze(-1)  # (B, N, 1)
        # reversal within each set's length, padding left in place (its own inverse)
        flip = torch.where(t < lengths.unsqueeze(1), lengths.unsqueeze(1) - 1 - t, t).unsqueeze(-1)
        h = torch.where(real, xs, 0.0)  # padding's NaN would reach the gradients through 0 * NaN
        for k in range(self.lstm.num_layers):
            one = self._one_layer[min(k, 1)]
            forward, reverse = ({f"{w}_l0": getattr(self.lstm, f"{w}_l{k}{suffix}") for w in _WEIGHTS}
                                for suffix in ("", "_reverse"))
            fwd = functional_call(one, forward, (h,))[0]
            bwd = functional_call(one, reverse, (torch.gather(h, 1, flip.expand_as(h)),))[0]
            h = torch.cat([fwd, torch.gather(bwd, 1, flip.expand_as(bwd))], dim=-1)
        return torch.where(real, h, 0.0)


@register_model(
    "lstm",
    code=("dim_hidden", "n_layers"),
    defaults={"dim_hidden": 128, "n_layers": 3},
    summary="BiLSTM, input order",
)
def build_lstm(cfg: ModelConfig) -> BiLSTM:
    return BiLSTM(cfg.dim_in, cfg.dim_out, cfg.dim_hidden, cfg.n_layers)


@register_model(
    "lstm-sorted",
    code=("dim_hidden", "n_layers"),
    defaults={"dim_hidden": 64, "n_layers": 3},
    summary="BiLSTM, sorted by x[0]",
)
def build_lstm_sorted(cfg: ModelConfig) -> BiLSTM:
    return BiLSTM(cfg.dim_in, cfg.dim_out, cfg.dim_hidden, cfg.n_layers, sort_by_first=True)
