"""Generated images for tests: small photo-like JPEG folders (the tiny 3-class one too), written in
milliseconds."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image


def smooth_image(width: int, height: int, seed: int = 0) -> Image.Image:
    """A photo-like RGB image: upsampled noise, so JPEG and resizing behave as on real data."""
    rng = np.random.default_rng(seed)
    small = (rng.random((max(height // 8, 2), max(width // 8, 2), 3)) * 255).astype(np.uint8)
    return Image.fromarray(small).resize((width, height), Image.Resampling.BICUBIC)


def jpeg_bytes(image: Image.Image, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=options.pop("format", "JPEG"), **options)
    return buffer.getvalue()


def make_folder(root: Path, counts: dict[str, int], size: tuple[int, int] = (48, 40)) -> None:
    """``root/<class>/<i>.JPEG`` with ``counts[class]`` images each."""
    for c, (name, count) in enumerate(counts.items()):
        (root / name).mkdir(parents=True)
        for i in range(count):
            (root / name / f"{i}.JPEG").write_bytes(jpeg_bytes(smooth_image(*size, seed=10 * c + i), quality=90))


def make_tiny_folder(root: Path) -> Path:
    """An ImageFolder: 3 classes x 8 train images (6 steps of 4 per epoch); 7 val images
    (odd: a 2-way split is 4 + 3)."""
    make_folder(root / "train", {"a": 8, "b": 8, "c": 8}, size=(40, 36))
    make_folder(root / "val", {"a": 3, "b": 2, "c": 2}, size=(40, 36))
    return root
