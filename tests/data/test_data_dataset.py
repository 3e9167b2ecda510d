import numpy as np
import torch

from swarmctl.data.dataset import bucketed_batches, epoch_order
from swarmctl.data.hdf5 import read_split


def test_batches_are_size_bucketed_padded_and_masked(tiny_h5):
    tasks, _ = read_split(tiny_h5, "train")
    batches = bucketed_batches(tasks, 5)
    assert [len(b) for b in batches] == [5, 5, 5, 3]
    sizes = [b.mask.sum(1) for b in batches]
    flat = torch.cat(sizes)
    assert (flat[1:] >= flat[:-1]).all()  # sorted by size
    for b in batches:
        assert b.x.shape[1] == int(b.mask.sum(1).max())  # padded to the largest of the batch only
        assert (b.x[~b.mask] == 0).all() and (b.labels[~b.mask] == 0).all()
        for row, t in enumerate(b.index.tolist()):
            pts, lab = tasks.task(t)
            np.testing.assert_array_equal(b.x[row, : len(pts)].numpy(), pts)
            np.testing.assert_array_equal(b.labels[row, : len(lab)].numpy(), lab)


def test_epoch_order_is_a_permutation_fixed_by_seed_and_epoch():
    a = epoch_order(20, seed=1, epoch=3)
    assert sorted(a) == list(range(20))
    assert a == epoch_order(20, seed=1, epoch=3)
    assert a != epoch_order(20, seed=1, epoch=4)
