"""Image datasets for the SWARM Transformer (protocol sec. 5.1) through torchvision's own classes:
MNIST, FashionMNIST and CIFAR-10 as uint8 tensors, with batches reshuffled every epoch."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from swarmctl.errors import DataError

# name -> (torchvision class name, folder torchvision reads, (channels, height, width))
DATASETS: dict[str, tuple[str, str, tuple[int, int, int]]] = {
    "mnist": ("MNIST", "MNIST/raw", (1, 28, 28)),
    "fashion-mnist": ("FashionMNIST", "FashionMNIST/raw", (1, 28, 28)),
    "cifar10": ("CIFAR10", "cifar-10-batches-py", (3, 32, 32)),
}
DOWNLOAD_TIMEOUT_S = 20


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
    once (not when ``download`` is False or the environment sets SWARMCTL_NO_DOWNLOAD=1), and fail with one
    line that says where to put the files."""
    if download is None:
        download = os.environ.get("SWARMCTL_NO_DOWNLOAD", "") not in ("1", "true", "yes")
    image_shape(dataset)
    root = Path(root)
    _extract_gz(root / DATASETS[dataset][1])
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
    data = ds.data
    images = torch.as_tensor(np.asarray(data)) if not isinstance(data, Tensor) else data
    if images.dim() == 3:  # (n, H, W) -> (n, 1, H, W)
        images = images.unsqueeze(1)
    else:  # CIFAR: (n, H, W, C) -> (n, C, H, W)
        images = images.permute(0, 3, 1, 2)
    labels = torch.as_tensor(np.asarray(ds.targets), dtype=torch.int64)
    return ImageSet(images.to(torch.uint8).contiguous(), labels)


def _extract_gz(folder: Path) -> None:
    """torchvision reads uncompressed IDX files; unpack any ``X.gz`` whose ``X`` is missing (as its own
    download step would)."""
    from torchvision.datasets.utils import extract_archive

    if folder.name != "raw" or not folder.is_dir():
        return
    for gz in folder.glob("*-ubyte.gz"):
        if not gz.with_suffix("").exists():
            extract_archive(str(gz), str(folder))


def _missing(dataset: str, root: Path) -> str:
    folder = root / DATASETS[dataset][1]
    what = "the four IDX files (train/t10k images and labels, .gz or unpacked)" if dataset != "cifar10" else \
        "the CIFAR-10 python batches (data_batch_1..5, test_batch, batches.meta)"
    return f"no {dataset} files under {root}: put {what} in {folder}/ or pass --data-dir"


@dataclass(frozen=True)
class ImageBatch:
    """x (B, C, H, W) int64 pixel values 0..255, y (B,) class labels."""

    x: Tensor
    y: Tensor

    def to(self, device: torch.device) -> ImageBatch:
        return ImageBatch(self.x.to(device, non_blocking=True), self.y.to(device, non_blocking=True))

    def __len__(self) -> int:
        return len(self.y)


class ImageBatches:
    """Consecutive batches of a fixed permutation of an ImageSet (identity when ``perm`` is None)."""

    def __init__(self, data: ImageSet, batch_size: int, perm: Tensor | None = None) -> None:
        self.data, self.batch_size, self.perm = data, batch_size, perm

    def __len__(self) -> int:
        return -(-len(self.data) // self.batch_size)

    def __getitem__(self, i: int) -> ImageBatch:
        if not 0 <= i < len(self):
            raise IndexError(i)
        idx = torch.arange(i * self.batch_size, min((i + 1) * self.batch_size, len(self.data)))
        if self.perm is not None:
            idx = self.perm[idx]
        return ImageBatch(self.data.images[idx].long(), self.data.labels[idx])


def shuffled_batches(data: ImageSet, batch_size: int, seed: int, epoch: int) -> ImageBatches:
    """The batches of one epoch: images reshuffled by (seed, epoch), reproducible on resume."""
    gen = torch.Generator().manual_seed(int(np.random.SeedSequence([seed, epoch]).generate_state(1)[0]))
    return ImageBatches(data, batch_size, torch.randperm(len(data), generator=gen))
