"""The image example's data: JPEGs it generates once, and a CPU pipeline that decodes them.

`ensure_images` writes `count` JPEGs of `size` x `size` pixels, each a deterministic function
of (seed, index): a class colour under noise, so a small CNN can learn the class and the JPEG
decoder has real work (noise does not compress). Files are written atomically (temp file,
rename) and existing ones are kept, so a second call, or a relaunched job, costs nothing.

`build_loader` is an ordinary DataLoader: each worker decodes, random-crops (7/8 of the side)
and randomly flips with torch's RNG, so the pipeline is CPU-bound on decoding and is
deterministic under `torch.manual_seed` (DataLoader seeds its workers from it). With a
`MinioCache` the file bytes are read through `synergy.cache.CachedFileDataset` (the decoded
tensors never are: augmentation stays random per epoch).
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from synergy.cache import CachedFileDataset, MinioCache

#: Classes of the generated images; the class of image i is i % CLASSES.
CLASSES = 4
#: Side of the random crop, as a fraction of the image side.
CROP_FRACTION = 0.875
_COLOURS = np.array([[200, 40, 40], [40, 200, 40], [40, 40, 200], [200, 200, 40]], dtype=np.float32)


def label_of(index: int) -> int:
    """The class of generated image number `index`."""
    return index % CLASSES


def index_of(path: str | os.PathLike[str]) -> int:
    """The image number in a generated file's name (``000042.jpg`` -> 42)."""
    return int(Path(path).stem)


def image_dir(data_dir: Path, size: int, seed: int) -> Path:
    """Where `ensure_images` keeps the JPEGs of one (size, seed): other sizes never mix in."""
    return Path(data_dir) / f"jpeg-{size}px-seed{seed}"


def _render(index: int, size: int, seed: int) -> Image.Image:
    rng = np.random.default_rng([seed, index])
    noise = rng.integers(0, 256, (size, size, 3)).astype(np.float32)
    pixels = 0.55 * noise + 0.45 * _COLOURS[label_of(index)]
    return Image.fromarray(pixels.clip(0, 255).astype(np.uint8), "RGB")


def ensure_images(data_dir: Path, count: int, size: int, seed: int = 0) -> list[Path]:
    """The paths of `count` generated JPEGs (side `size`), writing the ones that are missing."""
    if count < 1 or size < 8:
        raise ValueError(f"need count >= 1 and size >= 8, got count={count} size={size}")
    folder = image_dir(data_dir, size, seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{i:06d}.jpg" for i in range(count)]
    for i, path in enumerate(paths):
        if path.exists():
            continue
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        _render(i, size, seed).save(tmp, format="JPEG", quality=90)
        os.replace(tmp, path)  # atomic: a reader or a killed writer never sees half a file
    return paths


class DecodeCropFlip:
    """JPEG bytes -> float tensor (3, crop, crop) in [0, 1]: decode, random crop, random flip.

    A class (not a closure) so that DataLoader workers started with spawn can pickle it."""

    def __call__(self, data: bytes) -> torch.Tensor:
        img = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        h, w, _ = img.shape
        crop = max(1, int(min(h, w) * CROP_FRACTION))
        top = int(torch.randint(0, h - crop + 1, ()).item())
        left = int(torch.randint(0, w - crop + 1, ()).item())
        patch = img[top:top + crop, left:left + crop]
        if torch.rand(()).item() < 0.5:
            patch = patch[:, ::-1]
        return torch.from_numpy(np.ascontiguousarray(patch)).permute(2, 0, 1).float().div_(255.0)


class _FileBytes(Dataset):
    """Sample i is `transform` of the bytes of `paths[i]`, read from disk (no cache)."""

    def __init__(self, paths: Sequence[str], transform: DecodeCropFlip) -> None:
        self.paths = list(paths)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.transform(Path(self.paths[index]).read_bytes())


class Labelled(Dataset):
    """(image tensor, class) pairs over a dataset of image tensors of generated files."""

    def __init__(self, images: Any, paths: Sequence[str]) -> None:
        self.images = images
        self.labels = [label_of(index_of(p)) for p in paths]

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.images[index], self.labels[index]


def build_loader(files: Sequence[str | os.PathLike[str]], batch_size: int, workers: int,
                 cache: MinioCache | None = None, shuffle: bool = True) -> DataLoader:
    """A shuffling DataLoader of (images, classes) over `files`, decoded in `workers` processes."""
    paths = [os.fspath(f) for f in files]
    transform = DecodeCropFlip()
    images = CachedFileDataset(paths, cache, transform=transform) if cache is not None else _FileBytes(paths, transform)
    return DataLoader(Labelled(images, paths), batch_size=batch_size, shuffle=shuffle, num_workers=workers,
                      persistent_workers=False)
