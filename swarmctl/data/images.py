"""Image datasets for the SWARM Transformer (the paper, sec. 4.3) through torchvision's own classes:
MNIST, FashionMNIST and CIFAR-10 as uint8 tensors, with batches reshuffled every epoch."""

from __future__ import annotations

import contextlib
import gzip
import os
import socket
import struct
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from swarmctl.data.dataset import TensorBatch
from swarmctl.errors import DataError

# name -> (torchvision class name, folder torchvision reads, (channels, height, width))
DATASETS: dict[str, tuple[str, str, tuple[int, int, int]]] = {
    "mnist": ("MNIST", "MNIST/raw", (1, 28, 28)),
    "fashion-mnist": ("FashionMNIST", "FashionMNIST/raw", (1, 28, 28)),
    "cifar10": ("CIFAR10", "cifar-10-batches-py", (3, 32, 32)),
}
DOWNLOAD_TIMEOUT_S = 20
IDX_DATASETS = ("mnist", "fashion-mnist")
IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
MAX_IDX_BYTES = 256 << 20  # the largest IDX file of these datasets (train images) is 47 MiB
N_CLASSES = 10


def image_shape(dataset: str) -> tuple[int, int, int]:
    """(channels, height, width) of a supported dataset."""
    try:
        return DATASETS[dataset][2]
    except KeyError:
        raise DataError(f"unknown dataset {dataset!r}; choose one of: {', '.join(DATASETS)}") from None


@dataclass(frozen=True)
class ImageSet:
    """images (n, C, H, W) uint8 with values 0..255, labels (n,) int64."""

    images: Tensor
    labels: Tensor

    def __len__(self) -> int:
        return len(self.labels)


def _torchvision_dataset(dataset: str, root: Path, train: bool, download: bool):
    import torchvision.datasets as tvd

    cls = getattr(tvd, DATASETS[dataset][0])
    return cls(str(root), train=train, download=download)


def load_images(dataset: str, root: Path, train: bool, download: bool | None = None) -> ImageSet:
    """Load a split with torchvision from ``root``; when the files are missing, try torchvision's download
    once (not when ``download`` is False or SWARMCTL_NO_DOWNLOAD=1 is set), and fail with one line that says
    where to put the files. The files are checked before torchvision reads them (:func:`_prepare_idx`)."""
    if download is None:
        download = os.environ.get("SWARMCTL_NO_DOWNLOAD", "") not in ("1", "true", "yes")
    shape = image_shape(dataset)
    root = Path(root)
    folder = root / DATASETS[dataset][1]
    if dataset in IDX_DATASETS:
        _prepare_idx(folder, shape[1:])
    try:
        ds = _torchvision_dataset(dataset, root, train, download=False)
    except RuntimeError:
        if not download:
            raise DataError(_missing(dataset, root)) from None
        old = socket.getdefaulttimeout()
        socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)
        try:
            ds = _torchvision_dataset(dataset, root, train, download=True)
        except Exception:
            raise DataError(_missing(dataset, root) + " (download failed: offline?)") from None
        finally:
            socket.setdefaulttimeout(old)
        if dataset in IDX_DATASETS:
            _prepare_idx(folder, shape[1:])  # check what the download wrote
    except Exception as exc:  # what torchvision raises for files it cannot parse
        raise DataError(f"{folder}: torchvision cannot read the {dataset} files ({type(exc).__name__}); "
                        "replace them with the original files") from None
    data = ds.data
    images = torch.as_tensor(np.asarray(data)) if not isinstance(data, Tensor) else data
    if images.dim() == 3:  # (n, H, W) -> (n, 1, H, W)
        images = images.unsqueeze(1)
    elif images.dim() == 4:  # CIFAR: (n, H, W, C) -> (n, C, H, W)
        images = images.permute(0, 3, 1, 2)
    labels = torch.as_tensor(np.asarray(ds.targets), dtype=torch.int64)
    split = "train" if train else "test"
    if tuple(images.shape[1:]) != shape or len(images) == 0:
        raise DataError(f"{folder}: the {split} images have shape {tuple(images.shape)}, expected (n, "
                        f"{', '.join(map(str, shape))}) with n >= 1; replace the files with the originals")
    if labels.shape != (len(images),):
        raise DataError(f"{folder}: {len(images)} {split} images but {labels.numel()} labels; "
                        "replace the files with the originals")
    outside = (labels < 0) | (labels >= N_CLASSES)
    if outside.any():
        raise DataError(f"{folder}: a {split} label is {int(labels[outside][0])}, outside 0..{N_CLASSES - 1}; "
                        "replace the files with the originals")
    return ImageSet(images.to(torch.uint8).contiguous(), labels)


def _idx_problem(path: Path, images: bool, hw: tuple[int, int]) -> tuple[int, str]:
    """Check an IDX file's magic number, dimensions and size from its header and length: (number of
    items, "") when it is valid, else (0, what is wrong)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(16)
    ndim = 3 if images else 1
    if len(head) < 4 * (ndim + 1):
        return 0, f"is truncated ({size} bytes, shorter than an IDX header)"
    magic, *dims = struct.unpack(f">{ndim + 1}I", head[: 4 * (ndim + 1)])
    want = 0x0800 + ndim  # unsigned bytes, ndim dimensions
    if magic != want:
        return 0, f"is not an IDX {'image' if images else 'label'} file (magic {magic:#010x}, expected {want:#010x})"
    if images and tuple(dims[1:]) != hw:
        return 0, f"holds {dims[1]}x{dims[2]} images, expected {hw[0]}x{hw[1]}"
    expected = 4 * (ndim + 1) + int(np.prod(dims, dtype=np.int64))
    if size != expected:
        return 0, f"is {'truncated' if size < expected else 'too long'} ({size:,} bytes, its header says {expected:,})"
    if not images:
        labels = np.frombuffer(path.read_bytes()[8:], dtype=np.uint8)
        if len(labels) and labels.max() >= N_CLASSES:
            return 0, f"holds label {int(labels.max())}, outside 0..{N_CLASSES - 1}"
    return dims[0], ""


def _prepare_idx(folder: Path, hw: tuple[int, int]) -> None:
    """Check the four IDX files, unpacking each missing or invalid ``X`` that has an ``X.gz`` to a
    temporary file first, which replaces ``X`` only when all four check out. A file missing altogether is
    left for torchvision to report."""
    if not all((folder / name).is_file() or (folder / f"{name}.gz").is_file() for name in IDX_FILES):
        return  # torchvision names what is missing (or downloads it); nothing is unpacked meanwhile
    todo = [name for name in IDX_FILES if (folder / f"{name}.gz").is_file()
            and (not (folder / name).is_file() or _idx_problem(folder / name, "images" in name, hw)[1])]
    source = {name: folder / name for name in IDX_FILES}  # where each file's checked content is now
    try:
        for name in todo:
            try:
                fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
            except OSError as exc:
                raise _cannot_unpack(folder / f"{name}.gz", exc) from None
            os.close(fd)
            source[name] = Path(tmp)
            _unpack_idx(folder / f"{name}.gz", tmp, "images" in name, hw)
        count = {}
        for name in IDX_FILES:  # unpacked files were checked already
            count[name], problem = _idx_problem(source[name], "images" in name, hw)
            if problem:
                raise DataError(f"{source[name]} {problem}; replace it with the original file (or its .gz)")
        for images, labels in zip(IDX_FILES[::2], IDX_FILES[1::2], strict=True):
            if count[images] != count[labels]:
                raise DataError(f"{folder}: {images} holds {count[images]:,} images but {labels} {count[labels]:,} "
                                "labels; replace them with the original files")
        for name in todo:
            try:
                os.chmod(source[name], 0o644)
                os.replace(source[name], folder / name)
            except OSError as exc:
                raise _cannot_unpack(folder / f"{name}.gz", exc) from None
    finally:
        for name in todo:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(source[name])


def _unpack_idx(gz: Path, tmp: str, images: bool, hw: tuple[int, int]) -> None:
    """Unpack ``gz`` into ``tmp`` and check that it holds a valid IDX file."""
    try:
        with gzip.open(gz, "rb") as src, open(tmp, "wb") as dst:
            while chunk := src.read(1 << 20):
                if dst.tell() + len(chunk) > MAX_IDX_BYTES:
                    raise DataError(f"{gz} unpacks to more than {MAX_IDX_BYTES >> 20} MiB, too large for an IDX "
                                    "file of this dataset; replace it with the original file")
                dst.write(chunk)
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise DataError(f"{gz} is corrupt or truncated ({type(exc).__name__}); replace it with the original file") \
            from None
    except OSError as exc:  # opening or writing the files
        raise _cannot_unpack(gz, exc) from None
    problem = _idx_problem(Path(tmp), images, hw)[1]
    if problem:
        raise DataError(f"{gz} unpacks to a file that {problem}; replace it with the original file")


def _cannot_unpack(gz: Path, exc: OSError) -> DataError:
    return DataError(f"cannot unpack {gz} beside it ({exc.strerror or type(exc).__name__}); make its folder "
                     "writable, or unpack the .gz files there yourself")


def _missing(dataset: str, root: Path) -> str:
    folder = root / DATASETS[dataset][1]
    what = "the four IDX files (train/t10k images and labels, .gz or unpacked)" if dataset != "cifar10" else \
        "the CIFAR-10 python batches (data_batch_1..5, test_batch, batches.meta)"
    cifar = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch", "batches.meta"]
    if dataset == "cifar10" and all((folder / name).is_file() for name in cifar):
        return f"the CIFAR-10 batches in {folder}/ fail torchvision's MD5 check (damaged or not the originals); " \
            "replace them with the original files"
    return f"no {dataset} files under {root}: put {what} in {folder}/ or name their folder with `data_dir`"


@dataclass(frozen=True)
class ImageBatch(TensorBatch):
    """x (B, C, H, W) int64 pixel values 0..255, y (B,) class labels."""

    x: Tensor
    y: Tensor


class ImageBatches:
    """Consecutive batches of a fixed permutation of an ImageSet (identity when ``perm`` is None)."""

    def __init__(self, data: ImageSet, batch_size: int, perm: Tensor | None = None) -> None:
        self.data, self.batch_size, self.perm = data, batch_size, perm

    def __len__(self) -> int:
        return -(-len(self.data) // self.batch_size)

    def on(self, device: torch.device) -> ImageBatches:
        """The same batches cut from a copy of the images on ``device`` (made once per image set), so a
        training step on an accelerator waits for no host-to-device copy."""
        if torch.device(device).type == "cpu":
            return self
        data = _device_copy(self.data, torch.device(device))
        return ImageBatches(data, self.batch_size, None if self.perm is None else self.perm.to(device))

    def __getitem__(self, i: int) -> ImageBatch:
        if not 0 <= i < len(self):
            raise IndexError(i)
        idx = torch.arange(i * self.batch_size, min((i + 1) * self.batch_size, len(self.data)),
                           device=self.data.images.device)
        if self.perm is not None:
            idx = self.perm[idx]
        return ImageBatch(self.data.images[idx].long(), self.data.labels[idx])


_DEVICE_COPIES: dict[tuple[int, str], tuple[ImageSet, ImageSet]] = {}  # (id, device) -> (original, copy)


def _device_copy(data: ImageSet, device: torch.device) -> ImageSet:
    key = (id(data.images), str(device))
    if key not in _DEVICE_COPIES or _DEVICE_COPIES[key][0] is not data:
        if len(_DEVICE_COPIES) >= 4:
            _DEVICE_COPIES.clear()
        _DEVICE_COPIES[key] = (data, ImageSet(data.images.to(device), data.labels.to(device)))
    return _DEVICE_COPIES[key][1]


def shuffled_batches(data: ImageSet, batch_size: int, seed: int, epoch: int) -> ImageBatches:
    """The batches of one epoch: images reshuffled by (seed, epoch), reproducible on resume."""
    gen = torch.Generator().manual_seed(int(np.random.SeedSequence([seed, epoch]).generate_state(1)[0]))
    return ImageBatches(data, batch_size, torch.randperm(len(data), generator=gen))
