"""Checks that a PNG file is a real plot: the expected size, and far from a blank canvas."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def assert_plot_image(path: Path, shape: tuple[int, int] | None = None, min_colors: int = 50) -> np.ndarray:
    """Read with matplotlib (no PIL needed); returns the RGB pixels (floats in [0, 1])."""
    from matplotlib import image

    assert path.exists() and path.stat().st_size > 5_000, f"{path} is missing or tiny"
    pixels = image.imread(path)[..., :3]  # drop alpha
    if shape is not None:
        assert pixels.shape[:2] == shape, f"{path} is {pixels.shape[:2]}, expected {shape}"
    assert pixels.std() > 0.05, f"{path} is nearly uniform"
    inked = (pixels.min(axis=2) < 0.9).mean()  # share of pixels clearly not white
    assert inked > 0.01, f"{path} is nearly blank ({inked:.3%} inked)"
    colors = len(np.unique((pixels * 255).astype(np.uint8).reshape(-1, 3), axis=0))
    assert colors >= min_colors, f"{path} has only {colors} distinct colors"
    return pixels
