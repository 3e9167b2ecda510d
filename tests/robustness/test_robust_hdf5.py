"""Generated faults in HDF5 datasets: every reader refuses them with a DataError, and every command that
reads a dataset fails in at most 3 lines with exit 1, leaving every file as it was."""

from __future__ import annotations

import json
import random
import shutil
from types import SimpleNamespace

import h5py
import numpy as np
import pytest
from faults import BYTE_FAULTS, Fault, assert_clean_failure, cases, cli, snapshot

from swarmctl.data.clustering_generator import MAX_SET_SIZE, ClusteringParams
from swarmctl.data.hdf5 import ARRAYS, content_checksum, read_dataset
from swarmctl.errors import DataError

ATTRS = ("schema_version", "kind", "generator", "seed", "swarmctl_version", "splits", "checksum")
SPLITS = ("train", "val")
K_MAX = 4  # the generator's range in the base file: 2..4 clusters


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A valid dataset and its content."""
    from swarmctl.data.hdf5 import generate_dataset

    path = tmp_path_factory.mktemp("base") / "data.h5"
    generate_dataset(path, ClusteringParams(n_tasks=24, val_fraction=0.25, k_min=2, k_max=K_MAX, n_min=8, n_max=20),
                     seed=0)
    return path, read_dataset(path)


def _edit(fn, recompute: bool = True):
    """A file edit through h5py; ``recompute`` rewrites the checksum, as another tool editing the file
    would, so that the checks after the checksum are what must catch the fault."""

    def apply(path):
        with h5py.File(path, "a") as f:
            fn(f)
            names = json.loads(f.attrs["splits"]) if recompute else []
            # an edit that removed an array or split the checksum reads is refused by the layout check,
            # before any checksum; every other edit gets a matching checksum, so the content checks must
            # catch it (a stale checksum would hide them)
            if recompute and all(n in f and all(k in f[n] for k in ARRAYS) for n in names):
                f.attrs["checksum"] = content_checksum(
                    {n: SimpleNamespace(**{k: f[n][k][()] for k in ARRAYS}) for n in names})
    return apply


def _replace(f, split, key, data, **kwargs):
    del f[split][key]
    f[split].create_dataset(key, data=data, **kwargs)


def _task_rows(f, split, rng):
    """A random task of ``split`` and its slice of points/labels."""
    off = f[split]["offsets"][()]
    t = rng.randrange(len(off) - 1)
    return t, slice(int(off[t]), int(off[t + 1]))


# ---- semantic fault families: each maps a seeded rng to one fault ------------------------------------

def delete_array(rng):
    split, key = rng.choice(SPLITS), rng.choice(ARRAYS)
    return Fault(f"delete {split}/{key}", _edit(lambda f: f[split].__delitem__(key)))


def rename_array(rng):
    split, key = rng.choice(SPLITS), rng.choice(ARRAYS)
    return Fault(f"rename {split}/{key}", _edit(lambda f: f.move(f"{split}/{key}", f"{split}/{key}_old")))


def delete_split(rng):
    split = rng.choice(SPLITS)
    return Fault(f"delete {split}", _edit(lambda f: f.__delitem__(split)))


def delete_attr(rng):
    name = rng.choice(ATTRS)
    return Fault(f"delete attr {name}", _edit(lambda f: f.attrs.__delitem__(name), recompute=False))


def rename_attr(rng):
    name = rng.choice(ATTRS)

    def fn(f):
        f.attrs[f"{name}_old"] = f.attrs[name]
        del f.attrs[name]
    return Fault(f"rename attr {name}", _edit(fn, recompute=False))


BAD_ATTRS = [("schema_version", "two"), ("schema_version", 2.5), ("schema_version", 3), ("kind", "bogus"),
             ("kind", 7), ("generator", "{not json"), ("generator", "[1, 2]"), ("seed", "zero"), ("seed", 1.5),
             ("splits", "not json"), ("splits", '"train"'), ("splits", "[]"), ("splits", '["train", "train"]'),
             ("splits", '["train", "test"]'), ("splits", "[1, 2]"), ("checksum", "abc"), ("checksum", 5),
             ("swarmctl_version", 3), ("kind", b"\xff\xfe")]


def corrupt_attr(rng):
    name, value = rng.choice(BAD_ATTRS)
    return Fault(f"attr {name}={value!r}", _edit(lambda f: f.attrs.__setitem__(name, value), recompute=False))


def wrong_dtype(rng):
    split = rng.choice(SPLITS)
    key, dtype = rng.choice([("labels", np.float64), ("offsets", np.float64), ("n_clusters", np.float32),
                             ("points", "S8"), ("means", "S4")])

    def fn(f):
        data = f[split][key][()]
        _replace(f, split, key, data.astype(dtype))
    return Fault(f"{split}/{key} as {np.dtype(dtype)}", _edit(fn))


def wrong_length(rng):
    split, key = rng.choice(SPLITS), rng.choice(ARRAYS)
    delta = rng.choice([-3, -1, 1, 2])

    def fn(f):
        data = f[split][key][()]
        if key == "offsets" and delta > 0:
            new = np.concatenate([data, data[-1] + 5 * np.arange(1, delta + 1)])
        else:
            new = data[:delta] if delta < 0 else np.concatenate([data, data[-delta:]])
        _replace(f, split, key, new)
    return Fault(f"{split}/{key} length {delta:+d}", _edit(fn))


def wrong_trailing_shape(rng):
    split = rng.choice(SPLITS)
    key = rng.choice(["points", "means", "covs", "weights", "labels"])

    def fn(f):
        data = f[split][key][()]
        if key == "labels":
            new = np.stack([data, data], 1)
        else:
            new = np.concatenate([data, data[..., :1]], -1)  # one more column, e.g. points (M, 3)
        _replace(f, split, key, new)
    return Fault(f"{split}/{key} wider", _edit(fn))


def bad_offsets(rng):
    split = rng.choice(SPLITS)
    how = rng.choice(["first-not-0", "past-end", "short-of-end", "shifted", "swapped", "one-entity", "negative"])

    def fn(f):
        off = f[split]["offsets"][()].copy()
        i = rng.randrange(1, len(off) - 1)
        if how == "first-not-0":
            off[0] = rng.choice([1, -1])
        elif how == "past-end":
            off[-1] += rng.randint(1, 50)
        elif how == "short-of-end":
            off[-1] -= 1
        elif how == "shifted":
            off += rng.randint(1, 3)
        elif how == "swapped":
            off[i], off[i + 1] = off[i + 1], off[i]
        elif how == "one-entity":
            off[i] = off[i - 1] + 1
        else:
            off[i] = -off[i]
        f[split]["offsets"][...] = off
    return Fault(f"{split} offsets {how}", _edit(fn))


def label_out_of_range(rng):
    split = rng.choice(SPLITS)

    def fn(f):
        t, rows = _task_rows(f, split, rng)
        k = int(f[split]["n_clusters"][t])
        labels = f[split]["labels"][()]
        labels[rows.start + rng.randrange(rows.stop - rows.start)] = rng.choice([k, k + 3, 10, 1000, -1])
        f[split]["labels"][...] = labels
    return Fault(f"{split} label out of range", _edit(fn))


def clusters_out_of_range(rng):
    split = rng.choice(SPLITS)
    how = rng.choice(["0", "-1", "11", "above-generator", "below-labels"])

    def fn(f):
        t, rows = _task_rows(f, split, rng)
        k = f[split]["n_clusters"][()]
        labels = f[split]["labels"][rows]
        k[t] = {"0": 0, "-1": -1, "11": 11, "above-generator": K_MAX + 1, "below-labels": int(labels.max())}[how]
        f[split]["n_clusters"][...] = k
    return Fault(f"{split} n_clusters {how}", _edit(fn))


def mixture_not_finite(rng):
    split, key = rng.choice(SPLITS), rng.choice(["means", "covs", "weights", "points"])
    value = rng.choice([np.nan, np.inf, -np.inf])

    def fn(f):
        data = f[split][key][()]
        if key == "points":
            data[rng.randrange(len(data)), rng.randrange(2)] = value
        else:
            t = rng.randrange(len(data))
            j = rng.randrange(int(f[split]["n_clusters"][t]))
            data[(t, j, *(rng.randrange(n) for n in data.shape[2:]))] = value
        f[split][key][...] = data
    return Fault(f"{split}/{key} {value}", _edit(fn))


def covariance_not_pd(rng):
    split = rng.choice(SPLITS)
    bad = rng.choice([[[1.0, 2.0], [2.0, 1.0]], [[-1.0, 0.0], [0.0, 1.0]], [[1.0, 0.5], [0.0, 1.0]],
                      [[0.0, 0.0], [0.0, 0.0]], [[1.0, 1.0], [1.0, 1.0]], [[1e200, 1e200], [1e200, 1e200]]])

    def fn(f):
        covs = f[split]["covs"][()]
        t = rng.randrange(len(covs))
        covs[t, rng.randrange(int(f[split]["n_clusters"][t]))] = bad
        f[split]["covs"][...] = covs
    return Fault(f"{split} covariance {bad}", _edit(fn))


def weights_not_distribution(rng):
    split, how = rng.choice(SPLITS), rng.choice(["negative", "doubled", "zero"])

    def fn(f):
        w = f[split]["weights"][()]
        t = rng.randrange(len(w))
        w[t] = {"negative": np.where(w[t] > 0, -w[t], 0), "doubled": 2 * w[t], "zero": 0 * w[t]}[how]
        f[split]["weights"][...] = w
    return Fault(f"{split} weights {how}", _edit(fn))


def huge_declared(rng):
    """Arrays declared far larger than memory (chunked, nothing written): refused before any read."""
    split, n = rng.choice(SPLITS), rng.choice([10**10, 10**12])

    def fn(f):
        del f[split]["points"], f[split]["labels"]
        f[split].create_dataset("points", shape=(n, 2), dtype=np.float32, chunks=(1024, 2))
        f[split].create_dataset("labels", shape=(n,), dtype=np.int64, chunks=(1024,))
        off = f[split]["offsets"][()]
        off[-1] = n
        f[split]["offsets"][...] = off
    return Fault(f"{split} declares {n:.0e} points", _edit(fn, recompute=False))


def set_too_large(rng):
    """One task larger than MAX_SET_SIZE, everything else valid and the checksum matching."""
    split, n = rng.choice(SPLITS), MAX_SET_SIZE + rng.randint(1, 100)

    def fn(f):
        covs = np.zeros((1, 10, 2, 2))
        covs[0, 0] = np.eye(2)
        arrays = {"points": np.random.default_rng(0).normal(size=(n, 2)).astype(np.float32),
                  "labels": np.zeros(n, np.int64), "offsets": np.array([0, n]), "n_clusters": np.array([K_MAX - 1]),
                  "means": np.zeros((1, 10, 2)), "covs": covs, "weights": np.eye(1, 10)}
        for key, data in arrays.items():
            _replace(f, split, key, data)
    return Fault(f"{split} one set of {n} points", _edit(fn))


SEMANTIC = {fn.__name__: fn for fn in (
    delete_array, rename_array, delete_split, delete_attr, rename_attr, corrupt_attr, wrong_dtype, wrong_length,
    wrong_trailing_shape, bad_offsets, label_out_of_range, clusters_out_of_range, mixture_not_finite,
    covariance_not_pd, weights_not_distribution, huge_declared, set_too_large)}
BYTES = {fn.__name__: fn for fn in BYTE_FAULTS}


def _mutated(base, tmp_path, family, seed):
    src, _ = base
    root = tmp_path / "case"
    root.mkdir()
    path = root / "data.h5"
    shutil.copyfile(src, path)
    fault = {**SEMANTIC, **BYTES}[family](random.Random(f"hdf5-{family}-{seed}"))
    fault.apply(path)
    return root, path, fault


def _commands(path, root, run):
    """Every command that reads a dataset, pointed at ``path``."""
    return {
        "train": ["train", "swarm", "--hidden", 4, "--iters", 2, "--batch-size", 6, "--max-epochs", 1,
                  "--device", "cpu", "--data", path, "--runs-dir", root / "runs"],
        "eval": ["eval", run, "--data", path, "--device", "cpu"],
        "plot-entropy": ["plot-entropy", run, "--data", path, "--grid", 4, "--device", "cpu"],
        "shuffle-variance": ["shuffle-variance", run, "--data", path, "--tasks", 2, "--shuffles", 2,
                             "--device", "cpu"],
    }


def _check(base, trained_runs, tmp_path, family, seed, commands):
    root, path, fault = _mutated(base, tmp_path, family, seed)
    try:
        splits, _ = read_dataset(path)
    except DataError as exc:
        assert "\n" not in str(exc)
    else:
        assert family in BYTES, f"{fault.name}: accepted"
        # a byte fault the reader accepts must have changed nothing it reads
        for name, tasks in base[1][0].items():
            for key in ARRAYS:
                np.testing.assert_array_equal(getattr(splits[name], key), getattr(tasks, key), err_msg=fault.name)
        return
    run = root / "run"
    shutil.copytree(trained_runs[0] / "swarm", run)
    all_commands = _commands(path, root, run)
    for name in commands(all_commands, random.Random(seed)):
        before = snapshot(root)
        assert_clean_failure(cli(*all_commands[name]), root, before)


@pytest.mark.parametrize(("family", "seed"), cases({**SEMANTIC, **BYTES}, range(1)))
def test_hdf5_faults_fail_in_one_line(base, trained_runs, tmp_path, family, seed):
    # fast: train and one other reader, picked by the seed
    _check(base, trained_runs, tmp_path, family, seed,
           lambda cmds, rng: ["train", rng.choice(["eval", "plot-entropy", "shuffle-variance"])])


@pytest.mark.parametrize(("family", "seed"), cases({**SEMANTIC, **BYTES}, range(1, 9)))
@pytest.mark.slow
def test_hdf5_faults_fail_in_one_line_many(base, trained_runs, tmp_path, family, seed):
    _check(base, trained_runs, tmp_path, family, seed, lambda cmds, rng: list(cmds))
