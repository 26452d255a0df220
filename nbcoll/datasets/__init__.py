"""Small data sets that ship with nbcoll, for tutorials and tests: nothing is downloaded.

Example::

    images, labels = nbcoll.datasets.load_digits()       # (1797, 64) float32 in [0, 16], (1797,) int64
    text = nbcoll.datasets.load_text()                    # a few paragraphs of public-domain prose
    edges, factions = nbcoll.datasets.load_karate_club()  # (78, 2) int64 member pairs, (34,) int64 in {0, 1}

Sources and licences are in ``README.md`` beside this file.
"""

from __future__ import annotations

import gzip
from importlib import resources

import numpy as np

DIGITS_FILE = "digits.csv.gz"
TEXT_FILE = "alice_chapter1.txt"
KARATE_EDGES_FILE = "karate_club_edges.csv"
KARATE_FACTIONS_FILE = "karate_club_factions.csv"


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


def load_karate_club() -> tuple[np.ndarray, np.ndarray]:
    """Zachary's karate club: the friendships of 34 members and the faction each joined when the club split.

    ``edges`` has shape ``(78, 2)``, int64: each row is a pair of members ``(a, b)`` with ``a < b`` who met outside
    the club (the graph is undirected: each friendship is listed once). ``factions`` has shape ``(34,)``, int64:
    0 for the members who followed the instructor (Mr. Hi, member 0), 1 for those who stayed with the officers
    (the administrator is member 33). W. W. Zachary, "An information flow model for conflict and fission in small
    groups", Journal of Anthropological Research 33 (1977) 452-473; members are numbered from 0 here, from 1 there.

    Example:

    >>> edges, factions = load_karate_club()
    >>> edges.shape, factions.shape
    ((78, 2), (34,))
    >>> degree = np.bincount(edges.ravel(), minlength=34)
    >>> int(degree[33]), int(degree[0])
    (17, 16)
    """
    package = resources.files(__name__)
    with package.joinpath(KARATE_EDGES_FILE).open("r", encoding="utf-8") as text:
        edges = np.loadtxt(text, delimiter=",", skiprows=1, dtype=np.int64)
    with package.joinpath(KARATE_FACTIONS_FILE).open("r", encoding="utf-8") as text:
        members = np.loadtxt(text, delimiter=",", skiprows=1, dtype=np.int64)
    factions = np.empty(len(members), np.int64)
    factions[members[:, 0]] = members[:, 1]
    return edges.reshape(-1, 2), factions


__all__ = ["load_digits", "load_karate_club", "load_text"]
