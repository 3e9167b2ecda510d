import pickle

import numpy as np
import pytest
import torch
import torchvision
from conftest import write_fake_mnist

from swarmctl.data.images import load_images, shuffled_batches
from swarmctl.errors import DataError


@pytest.mark.parametrize(("dataset", "folder", "gz"),
                         [("mnist", "MNIST", False), ("fashion-mnist", "FashionMNIST", True)])
def test_idx_files_load_through_torchvision(tmp_path, dataset, folder, gz):
    write_fake_mnist(tmp_path, folder=folder, n_train=30, n_test=10, gz=gz)
    train = load_images(dataset, tmp_path, train=True, download=False)
    test = load_images(dataset, tmp_path, train=False, download=False)
    assert train.images.shape == (30, 1, 28, 28) and train.images.dtype == torch.uint8
    assert len(test) == 10 and set(train.images.unique().tolist()) <= {0, 255}
    assert train.labels.dtype == torch.int64 and train.labels.max() < 10


def test_cifar10_batches_load_through_torchvision(tmp_path, monkeypatch):
    # torchvision checks the md5 of the real batches; fake batches pass by patching that check
    monkeypatch.setattr(torchvision.datasets.cifar, "check_integrity", lambda *args, **kwargs: True)
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        entry = {"data": rng.integers(0, 256, (4, 3072), dtype=np.uint8), "labels": rng.integers(0, 10, 4).tolist()}
        (folder / name).write_bytes(pickle.dumps(entry))
    (folder / "batches.meta").write_bytes(pickle.dumps({"label_names": [str(k) for k in range(10)]}))
    train = load_images("cifar10", tmp_path, train=True, download=False)
    assert train.images.shape == (20, 3, 32, 32)
    raw = pickle.loads((folder / "data_batch_1").read_bytes())["data"][0].reshape(3, 32, 32)
    np.testing.assert_array_equal(train.images[0].numpy(), raw)  # channels first, values untouched


def test_missing_files_say_where_to_put_them(tmp_path):
    with pytest.raises(DataError, match=r"put the four IDX files .* in .*MNIST/raw/"):
        load_images("mnist", tmp_path, train=True, download=False)
    with pytest.raises(DataError, match="unknown dataset 'svhn'"):
        load_images("svhn", tmp_path, train=True)


def test_epoch_batches_are_reshuffled_reproducibly(fake_mnist):
    data = load_images("mnist", fake_mnist, train=True, download=False)
    a, again, other = (shuffled_batches(data, 16, 0, e) for e in (0, 0, 1))
    assert len(a) == 3 and len(a[2]) == 8
    assert torch.equal(a[0].y, again[0].y) and not torch.equal(a.perm, other.perm)
    assert sorted(torch.cat([a[i].y for i in range(3)]).tolist()) == sorted(data.labels.tolist())


def test_image_batches_on_a_device_keep_their_order_and_sizes():
    from swarmctl.data.images import ImageBatches, ImageSet, shuffled_batches

    data = ImageSet(torch.randint(0, 256, (120, 1, 28, 28), dtype=torch.uint8), torch.randint(0, 10, (120,)))
    host = shuffled_batches(data, 50, seed=0, epoch=1)
    assert host.on(torch.device("cpu")) is host  # the CPU path is unchanged
    placed = host.on(torch.device("meta"))  # a device without values: shapes and placement only
    assert isinstance(placed, ImageBatches) and len(placed) == len(host) == 3
    assert [tuple(placed[i].x.shape) for i in range(3)] == [tuple(host[i].x.shape) for i in range(3)]
    assert placed[0].x.device.type == "meta" and placed[0].y.device.type == "meta"
