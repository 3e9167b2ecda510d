"""The SWARM Transformer: parameter counts, causality through the shift, and both samplers."""

import math

import pytest
import torch

from swarmctl import ModelConfig, count_parameters, create_model
from swarmctl.errors import ConfigError
from swarmctl.models.image import SwarmTransformer, positional_features, scan_order
from swarmctl.runs import parameter_count
from swarmctl.testing import assert_causal


@pytest.mark.parametrize(("dataset", "hidden", "iters", "count"),
                         [("mnist", 256, 10, 986_880), ("fashion-mnist", 256, 10, 986_880),
                          ("cifar10", 512, 20, 3_547_904)])
def test_image_model_parameter_counts_match_protocol(dataset, hidden, iters, count):
    cfg = ModelConfig(name="swarm-image", dataset=dataset, dim_hidden=hidden, n_iter=iters)
    assert count_parameters(create_model(cfg)) == count
    assert parameter_count(cfg) == count  # counted on the meta device, its initialisers skipped


def test_positional_features_follow_the_protocol():
    f = positional_features(256, 28, 28)
    assert f.shape == (28, 28, 256)
    top = f[..., -4:]  # highest frequency = 14 = Nyquist: its sines vanish
    assert top[..., 0].abs().max() < 1e-4 and top[..., 1].abs().max() < 1e-4
    assert f[0, 0, 2] == 1.0 and f[0, 0, 3] == 1.0  # cos at the origin


def test_scan_order_is_row_column_channel():
    x = torch.arange(2 * 3 * 4).view(1, 2, 3, 4)  # (B, C, H, W)
    seq = scan_order(x)[0]
    assert seq[:4].tolist() == [x[0, 0, 0, 0], x[0, 1, 0, 0], x[0, 0, 0, 1], x[0, 1, 0, 1]]


@pytest.mark.parametrize(("channels", "layers"), [(1, 1), (3, 1), (3, 2)])
def test_image_model_is_causal_including_the_shift(channels, layers):
    model = SwarmTransformer(channels, 3, 3, 8, 3, layers).double()
    T = model.n_positions
    values = torch.randn(1, T, 8, dtype=torch.float64)
    y = torch.tensor([3])
    # logits at t must not depend on the value embedding of any sub-pixel >= t
    assert_causal(lambda v: model.forward_embedded(v, y), values, inclusive=False)


def _teacher_forced_incremental_logits(model, x, y):
    B, T = x.shape[0], model.n_positions
    seq = scan_order(x)
    codes, cls = model.position_codes(), model.class_embed(y)
    sums = [layer.causal_sums(B, x.device, codes.dtype) for layer in model.net.layers]
    out = []
    for t in range(T):
        prev = model.value_embed(seq[:, t - 1]) if t > 0 else cls.new_zeros(cls.shape)
        h = prev + codes[t] + cls
        for k, layer in enumerate(model.net.layers):
            h = layer.causal_step(model.net.act(h) if k > 0 else h, t, sums[k])
        out.append(h)
    return torch.stack(out, 1)


@pytest.mark.parametrize(("channels", "layers"), [(1, 1), (3, 2)])
def test_incremental_logits_equal_the_full_forward_pass(channels, layers):
    model = SwarmTransformer(channels, 4, 3, 16, 4, layers).eval()
    x = torch.randint(0, 256, (2, channels, 4, 3))
    y = torch.tensor([0, 9])
    with torch.no_grad():
        full = model(x, y)
    torch.testing.assert_close(_teacher_forced_incremental_logits(model, x, y), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("channels", [1, 3])
def test_samplers_give_identical_images_for_the_same_seed(channels):
    model = SwarmTransformer(channels, 4, 4, 8, 3, 1).double()
    y = torch.tensor([0, 5, 9])
    a = model.sample(y, 0.8, torch.Generator().manual_seed(1), incremental=True)
    b = model.sample(y, 0.8, torch.Generator().manual_seed(1), incremental=False)
    c = model.sample(y, 0.8, torch.Generator().manual_seed(2), incremental=True)
    assert a.dtype == torch.uint8 and a.shape == (3, channels, 4, 4)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_image_model_rejects_bad_settings():
    with pytest.raises(ConfigError, match="divisible by 4"):
        SwarmTransformer(1, 4, 4, 10, 2)
    with pytest.raises(ConfigError, match="dataset"):
        create_model(ModelConfig(name="swarm-image", dataset="imagenet"))
    with pytest.raises(ConfigError, match="temperature"):
        SwarmTransformer(1, 2, 2, 8, 2).sample(torch.tensor([0]), temperature=0)


def test_untrained_model_predicts_near_uniform_values():
    model = SwarmTransformer(1, 4, 4, 8, 2)
    x = torch.randint(0, 256, (2, 1, 4, 4))
    logits = model(x, torch.tensor([1, 2]))
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), scan_order(x).reshape(-1))
    assert abs(ce.item() - math.log(256)) < 0.5


def test_image_model_refuses_images_and_labels_of_another_shape_naming_both():
    model = SwarmTransformer(1, 4, 4, dim_hidden=8, n_iter=2)
    x, y = torch.randint(0, 256, (3, 1, 4, 4)), torch.arange(3)
    assert model(x, y).shape == (3, 16, 256)
    for bad_x, bad_y in ((torch.randint(0, 256, (3, 3, 4, 4)), y), (torch.randint(0, 256, (3, 1, 5, 4)), y),
                         (x[0], y), (x, y[:2])):
        with pytest.raises(ValueError, match=r"expects images \(B, 1, 4, 4\) and labels \(B,\); got images"):
            model(bad_x, bad_y)
