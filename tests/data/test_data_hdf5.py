import h5py
import numpy as np
import pytest

from swarmctl.data.hdf5 import read_dataset, read_split, write_dataset
from swarmctl.errors import DataError


def test_round_trip_keeps_every_array(tiny_h5, tmp_path):
    splits, info = read_dataset(tiny_h5)
    assert set(splits) == {"train", "val"} and len(splits["train"]) == 18 and len(splits["val"]) == 6
    assert info["seed"] == 0 and info["generator"]["k_max"] == 4 and info["schema_version"] == 2
    out = tmp_path / "copy.h5"
    write_dataset(out, splits, kind="clustering", seed=0, generator=info["generator"])
    again, info2 = read_dataset(out)
    assert info2["checksum"] == info["checksum"]
    np.testing.assert_array_equal(again["val"].points, splits["val"].points)


def test_refuses_to_overwrite_without_force(tiny_h5):
    splits, info = read_dataset(tiny_h5)
    with pytest.raises(DataError, match="`force`"):
        write_dataset(tiny_h5, splits, kind="clustering", seed=0, generator={})
    write_dataset(tiny_h5, splits, kind="clustering", seed=0, generator={}, force=True)
    assert [p.name for p in tiny_h5.parent.iterdir()] == [tiny_h5.name]  # no temporary file left


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="no such dataset file"):
        read_dataset(tmp_path / "nope.h5")


def test_not_hdf5(tmp_path):
    p = tmp_path / "x.h5"
    p.write_text("hello")
    with pytest.raises(DataError, match="not an HDF5 file"):
        read_dataset(p)


def test_hdf5_that_is_not_a_swarmctl_dataset(tmp_path):
    p = tmp_path / "x.h5"
    with h5py.File(p, "w") as f:
        f["a"] = [1, 2]
    with pytest.raises(DataError, match="not a swarmctl dataset"):
        read_dataset(p)


def test_wrong_schema_version(tiny_h5):
    with h5py.File(tiny_h5, "a") as f:
        f.attrs["schema_version"] = 99
    with pytest.raises(DataError, match="schema version 99"):
        read_dataset(tiny_h5)


def test_checksum_mismatch(tiny_h5):
    with h5py.File(tiny_h5, "a") as f:
        f["train/points"][0, 0] += 1.0
    with pytest.raises(DataError, match="checksum"):
        read_dataset(tiny_h5)


def _rewrite(path, mutate):
    splits, info = read_dataset(path)
    mutate(splits)
    write_dataset(path, splits, kind="clustering", seed=0, generator=info["generator"], force=True)


def test_non_finite_points_are_rejected(tiny_h5):
    def poison(splits):
        splits["val"].points[3, 1] = np.nan
    _rewrite(tiny_h5, poison)
    with pytest.raises(DataError, match="split .val., task 0 has NaN"):
        read_dataset(tiny_h5)


def test_one_entity_sets_are_rejected(tiny_h5):
    def shrink(splits):
        t = splits["train"].select(np.arange(3))
        object.__setattr__(t, "offsets", np.array([0, 1, t.offsets[2], t.offsets[3]]))
        splits["train"] = t
    _rewrite(tiny_h5, shrink)
    with pytest.raises(DataError, match="task 0 has 1 entities"):
        read_dataset(tiny_h5)


def test_unknown_split(tiny_h5):
    with pytest.raises(DataError, match="no split 'test'"):
        read_split(tiny_h5, "test")


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_a_data_path_that_is_not_a_file_is_named_for_what_it_is(tmp_path, kind):
    """`train --data DIR` names a folder as a folder (not as a missing file whose fix, gen-data --out DIR,
    gen-data would refuse); a FIFO is not waited on."""
    import os

    from swarmctl.errors import SwarmctlError

    path = tmp_path / "d.h5"
    path.mkdir() if kind == "folder" else os.mkfifo(path)
    with pytest.raises(SwarmctlError, match="folder" if kind == "folder" else "FIFO"):
        read_dataset(path)
