"""Generated faults in IDX image files and their .gz: load_images refuses them with a DataError, and
commands that read them fail in at most 3 lines with exit 1, leaving no file behind (no half-unpacked
IDX) and every input as it was. IDX files carry no checksum, so changed pixel bytes cannot be told
from real ones: byte flips here hit headers, labels and gzip streams."""

from __future__ import annotations

import gzip
import random
import shutil
import struct

import numpy as np
import pytest
import torch
from conftest import write_fake_mnist
from faults import Fault, assert_clean_failure, cases, cli, snapshot, truncate

from swarmctl.data.images import IDX_FILES, load_images
from swarmctl.errors import DataError

N_TRAIN, N_TEST = 40, 20


def _raw(root):
    return root / "MNIST" / "raw"


def _idx(data: np.ndarray, magic: int) -> bytes:
    return struct.pack(f">I{data.ndim}I", magic, *data.shape) + data.astype(np.uint8).tobytes()


def _pick(rng, kind=None):
    names = [n for n in IDX_FILES if kind is None or kind in n]
    return rng.choice(names)


def _on_file(rng, label, edit, kind=None):
    """A fault that rewrites one IDX file's bytes (or its .gz's content) with ``edit(bytes) -> bytes``."""
    name = _pick(rng, kind)

    def apply(raw_dir):
        path = raw_dir / name
        if path.is_file():
            path.write_bytes(edit(path.read_bytes()))
        else:
            gz = raw_dir / f"{name}.gz"
            gz.write_bytes(gzip.compress(edit(gzip.decompress(gz.read_bytes())), mtime=0))
    return Fault(f"{name}: {label}", apply)


# ---- fault families: IDX content (applied to the file, or inside its .gz) ------------------------------

def truncated_idx(rng):
    keep = rng.random()
    return _on_file(rng, f"truncated to {keep:.2f}", lambda b: b[: int(len(b) * keep)])


def header_flip(rng):
    byte, bit = rng.randrange(8), rng.randrange(8)  # magic number and first dimension
    return _on_file(rng, f"header byte {byte} bit {bit}",
                    lambda b: b[:byte] + bytes([b[byte] ^ (1 << bit)]) + b[byte + 1:])


def dims_flip(rng):
    byte, bit = rng.randrange(8, 16), rng.randrange(8)  # rows and columns
    return _on_file(rng, f"dims byte {byte} bit {bit}",
                    lambda b: b[:byte] + bytes([b[byte] ^ (1 << bit)]) + b[byte + 1:], kind="images")


def random_bytes(rng):
    n, seed = rng.choice([0, 3, 100, 5000, 40000]), rng.randrange(2**32)
    return _on_file(rng, f"{n} random bytes", lambda b: random.Random(seed).randbytes(n))


def appended_bytes(rng):
    n = rng.randint(1, 100)
    return _on_file(rng, f"{n} bytes appended", lambda b: b + bytes(n))


def label_out_of_range(rng):
    value, where = rng.randint(10, 255), rng.random()

    def edit(b):
        i = 8 + int(where * (len(b) - 8))
        return b[:i] + bytes([value]) + b[i + 1:]
    return _on_file(rng, f"a label = {value}", edit, kind="labels")


def fewer_labels(rng):
    k = rng.randint(1, 10)

    def edit(b):
        labels = np.frombuffer(b[8:], np.uint8)[:-k]
        return _idx(labels, 0x0801)
    return _on_file(rng, f"{k} labels fewer", edit, kind="labels")


def other_image_size(rng):
    size = rng.choice([14, 27, 29, 32])

    def edit(b):
        n = struct.unpack(">I", b[4:8])[0]
        return _idx(np.zeros((n, size, size), np.uint8), 0x0803)
    return _on_file(rng, f"{size}x{size} images", edit, kind="images")


def swapped_kind(rng):
    """An images file holding labels, or the other way round (each a valid IDX file of its own)."""
    return _on_file(rng, "holds the other kind", lambda b: _idx(np.zeros(N_TRAIN, np.uint8), 0x0801)
                    if b[3] == 3 else _idx(np.zeros((N_TRAIN, 28, 28), np.uint8), 0x0803))


def missing_file(rng):
    name = _pick(rng)

    def apply(raw_dir):
        for path in (raw_dir / name, raw_dir / f"{name}.gz"):
            path.unlink(missing_ok=True)
    return Fault(f"{name} missing", apply)


# ---- fault families for the compressed files only ------------------------------------------------------

def gz_bytes(fault_family):
    def family(rng):
        name, inner = _pick(rng), fault_family(rng)
        return Fault(f"{name}.gz: {inner.name}", lambda raw_dir: inner.apply(raw_dir / f"{name}.gz"))
    family.__name__ = f"gz_{fault_family.__name__}"
    return family


def gz_flip(rng):
    name, where, bit = _pick(rng), rng.random(), rng.randrange(8)

    def apply(raw_dir):
        gz = raw_dir / f"{name}.gz"
        data = bytearray(gz.read_bytes())
        data[int(where * len(data))] ^= 1 << bit
        gz.write_bytes(bytes(data))
    return Fault(f"{name}.gz: bit flip", apply)


CONTENT = {fn.__name__: fn for fn in (truncated_idx, header_flip, dims_flip, random_bytes, appended_bytes,
                                      label_out_of_range, fewer_labels, other_image_size, swapped_kind, missing_file)}
GZ_ONLY = {"gz_truncate": gz_bytes(truncate), "gz_flip": gz_flip}
FAMILIES = {**{f"raw_{k}": v for k, v in CONTENT.items()}, **{f"gz_{k}": v for k, v in CONTENT.items()}, **GZ_ONLY}


@pytest.fixture(scope="module")
def originals(tmp_path_factory):
    """The fake dataset as unpacked files and as .gz files, and its content."""
    root = tmp_path_factory.mktemp("images")
    write_fake_mnist(root / "raw", n_train=N_TRAIN, n_test=N_TEST)
    write_fake_mnist(root / "gz", n_train=N_TRAIN, n_test=N_TEST, gz=True)
    content = {train: load_images("mnist", root / "raw", train=train, download=False) for train in (True, False)}
    return root, content


def _check(originals, tmp_path, family, seed, commands):
    base, content = originals
    root = tmp_path / "case"
    images = root / "images"
    shutil.copytree(base / ("gz" if family.startswith("gz_") else "raw"), images)
    fault = FAMILIES[family](random.Random(f"idx-{family}-{seed}"))
    fault.apply(_raw(images))
    before = snapshot(root)
    try:
        for train in (True, False):
            got = load_images("mnist", images, train=train, download=False)
    except DataError as exc:
        assert "\n" not in str(exc)
        assert snapshot(root) == before, f"{fault.name}: files left behind"
    else:
        assert family == "gz_flip", f"{fault.name}: accepted"  # a flip in the gzip header's mtime or flags
        for train in (True, False):
            got = load_images("mnist", images, train=train, download=False)
            assert torch.equal(got.images, content[train].images) and torch.equal(got.labels, content[train].labels)
        return
    for args in commands(images, root):
        before = snapshot(root)
        assert_clean_failure(cli(*args), root, before)


def _train(images, root):
    return ["train", "swarm-image", "--dataset", "mnist", "--data-dir", images, "--runs-dir", root / "runs",
            "--hidden", 4, "--iters", 1, "--batch-size", 20, "--max-epochs", 1, "--device", "cpu"]


@pytest.mark.parametrize(("family", "seed"), cases(FAMILIES, range(1)))
def test_image_faults_fail_in_one_line(originals, tmp_path, family, seed):
    _check(originals, tmp_path, family, seed, lambda images, root: [_train(images, root)])


@pytest.fixture(scope="module")
def image_run(originals, tmp_path_factory):
    from swarmctl.config import DataConfig, ModelConfig, TrainConfig
    from swarmctl.runs import start_run

    runs = tmp_path_factory.mktemp("image-runs")
    start_run(ModelConfig(name="swarm-image", dim_hidden=4, n_iter=1, dataset="mnist"),
              TrainConfig(batch_size=20, max_epochs=1, device="cpu"),
              DataConfig(path=str(originals[0] / "raw"), dataset="mnist"), runs, "img")
    return runs / "img"


@pytest.mark.parametrize(("family", "seed"), cases(FAMILIES, range(1, 6)))
@pytest.mark.slow
def test_image_faults_fail_in_one_line_many(originals, image_run, tmp_path, family, seed):
    def commands(images, root):
        run = root / "img"
        shutil.copytree(image_run, run)
        return [_train(images, root), ["eval", run, "--data-dir", images, "--device", "cpu"]]
    _check(originals, tmp_path, family, seed, commands)


def test_a_good_gz_restored_after_a_bad_one_works(originals, tmp_path):
    base, content = originals
    images = tmp_path / "images"
    shutil.copytree(base / "gz", images)
    gz = _raw(images) / "train-images-idx3-ubyte.gz"
    good = gz.read_bytes()
    gz.write_bytes(good[: len(good) // 2])
    with pytest.raises(DataError, match="train-images-idx3-ubyte.gz is corrupt or truncated"):
        load_images("mnist", images, train=True, download=False)
    assert sorted(p.name for p in _raw(images).iterdir()) == sorted(f"{n}.gz" for n in IDX_FILES)
    gz.write_bytes(good)
    got = load_images("mnist", images, train=True, download=False)
    assert torch.equal(got.images, content[True].images)


def test_an_invalid_idx_beside_a_good_gz_is_replaced(originals, tmp_path):
    # e.g. the 0-byte file an older swarmctl left after a failed unpack
    base, content = originals
    images = tmp_path / "images"
    shutil.copytree(base / "gz", images)
    (_raw(images) / "t10k-labels-idx1-ubyte").write_bytes(b"")
    got = load_images("mnist", images, train=False, download=False)
    assert torch.equal(got.labels, content[False].labels)
    assert (_raw(images) / "t10k-labels-idx1-ubyte").stat().st_size == 8 + N_TEST


def test_a_folder_that_cannot_be_written_is_one_line(originals, tmp_path, monkeypatch):
    # a read-only data folder (simulated: the suite may run as root, who can write anywhere)
    import errno

    import swarmctl.data.images as images_module

    def refuse(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    images = tmp_path / "images"
    shutil.copytree(originals[0] / "gz", images)
    monkeypatch.setattr(images_module.tempfile, "mkstemp", refuse)
    with pytest.raises(DataError, match="cannot unpack .*Permission denied.*make its folder writable"):
        load_images("mnist", images, train=True, download=False)
