"""Small data sets that ship with nbcoll, for tutorials and tests: nothing is downloaded.

Example::

    images, labels = nbcoll.datasets.load_digits()       # (1797, 64) float32 in [0, 16], (1797,) int64
    text = nbcoll.datasets.load_text()                    # a few paragraphs of public-domain prose

Sources and licences are in ``README.md`` beside this file.
"""

from __future__ import annotations

import gzip
from importlib import resources

import numpy as np

DIGITS_FILE = "digits.csv.gz"
TEXT_FILE = "alice_chapter1.txt"


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """The 1,797 8x8 handwritten digits: ``(images, labels)``.

    ``images`` has shape ``(1797, 64)``, float32, pixel values 0..16 (reshape to ``(-1, 8, 8)`` to draw them);
    ``labels`` has shape ``(1797,)``, int64, digits 0..9. The data is the UCI "Optical Recognition of
    Handwritten Digits" test set (CC BY 4.0).

    >>> import nbcoll
    >>> images, labels = nbcoll.datasets.load_digits()
    >>> images.shape, images.dtype, labels.shape, int(labels.max())
    ((1797, 64), dtype('float32'), (1797,), 9)
    """
    with resources.files(__name__).joinpath(DIGITS_FILE).open("rb") as raw, gzip.open(raw, "rt") as text:
        table = np.loadtxt(text, delimiter=",", dtype=np.float32)
    return table[:, :64].copy(), table[:, 64].astype(np.int64)


def load_text() -> str:
    """The opening of *Alice's Adventures in Wonderland*, chapter I (Lewis Carroll, 1865; public domain).

    >>> import nbcoll
    >>> text = nbcoll.datasets.load_text()
    >>> isinstance(text, str), len(text) > 1000
    (True, True)
    """
    return resources.files(__name__).joinpath(TEXT_FILE).read_text(encoding="utf-8")


__all__ = ["load_digits", "load_text"]
