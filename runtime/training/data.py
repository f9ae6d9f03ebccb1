"""Data for the training demo: scikit-learn's 8x8 digits when it is installed, synthetic digits otherwise.

scikit-learn is optional: `digits()` says which source it used. The synthetic set draws each
class from its own fixed random 8x8 template plus noise, so a small network can learn it.
"""

from __future__ import annotations

import numpy as np


def digits(samples: int = 1797, seed: int = 0) -> tuple[np.ndarray, np.ndarray, str]:
    """(images float32 of shape (n, 1, 8, 8) scaled to [0, 1], labels int64 of shape (n,), source name)."""
    try:
        from sklearn.datasets import load_digits  # optional extra
    except ImportError:
        return (*_synthetic(samples, seed), "synthetic 8x8 digits (scikit-learn not installed)")
    bunch = load_digits()
    images = (bunch.images / 16.0).astype(np.float32)[:, None]
    return images[:samples], bunch.target.astype(np.int64)[:samples], "scikit-learn digits"


def _synthetic(samples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    templates = rng.random((10, 8, 8)) > 0.6
    labels = rng.integers(0, 10, samples)
    images = templates[labels] * 0.8 + rng.random((samples, 8, 8)) * 0.4
    return images.astype(np.float32)[:, None], labels.astype(np.int64)


def batches(images: np.ndarray, labels: np.ndarray, batch: int, seed: int = 0):
    """Endless shuffled full batches (the step's shapes are static, so the last partial batch is dropped)."""
    rng = np.random.default_rng(seed)
    while True:
        order = rng.permutation(len(labels))
        for start in range(0, len(order) - batch + 1, batch):
            pick = order[start : start + batch]
            yield images[pick], labels[pick]
