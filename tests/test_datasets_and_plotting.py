"""The data that ships with nbcoll, and the loss-curve PNG."""

from pathlib import Path

import numpy as np
import pytest

from nbcoll.datasets import load_digits, load_karate_club, load_text
from nbcoll.plotting import plot_curves

ROOT = Path(__file__).resolve().parents[1]


def test_digits():
    images, labels = load_digits()
    assert images.shape == (1797, 64) and images.dtype == np.float32
    assert labels.shape == (1797,) and labels.dtype == np.int64
    assert images.min() == 0 and images.max() == 16 and np.all(images == np.round(images))
    counts = np.bincount(labels, minlength=10)
    assert counts.sum() == 1797 and counts.min() >= 170 and counts.max() <= 190
    np.testing.assert_array_equal(labels[:10], np.arange(10))


def test_text_is_small_and_plain():
    text = load_text()
    assert text.startswith("CHAPTER I. Down the Rabbit-Hole")
    assert 1000 < len(text.encode("utf-8")) < 100_000
    assert text.isascii()


def test_karate_club_is_the_classic_graph():
    edges, factions = load_karate_club()
    assert edges.shape == (78, 2) and edges.dtype == np.int64
    assert factions.shape == (34,) and factions.dtype == np.int64
    assert np.all(edges[:, 0] < edges[:, 1]) and len({tuple(e) for e in edges.tolist()}) == 78  # each pair once
    degree = np.bincount(edges.ravel(), minlength=34)
    assert degree.sum() == 156 and degree[0] == 16 and degree[33] == 17 and degree.min() == 1
    assert factions[0] == 0 and factions[33] == 1 and np.bincount(factions).tolist() == [17, 17]


def test_data_files_ship_in_the_package():
    pyproject = (ROOT / "pyproject.toml").read_text()  # tomllib is Python 3.11+; nbcoll supports 3.10
    line = next(line for line in pyproject.splitlines() if line.startswith('"nbcoll.datasets" = '))
    patterns = [p.strip(' "') for p in line.split("=", 1)[1].strip(" []").split(",")]
    folder = ROOT / "nbcoll" / "datasets"
    for name in (
        "digits.csv.gz",
        "alice_chapter1.txt",
        "karate_club_edges.csv",
        "karate_club_factions.csv",
        "README.md",
    ):
        assert any(Path(name).match(p) for p in patterns), name
        assert (folder / name).exists()
    licence = (folder / "README.md").read_text()
    assert "CC BY 4.0" in licence and "public domain" in licence
    assert "Zachary" in licence and "1977" in licence


def test_plot_curves_writes_a_png(tmp_path):
    path = plot_curves({"train": [3.0, 2.0, 1.5], "test": [3.1, 2.5]}, tmp_path / "sub" / "loss.png", title="t")
    assert Path(path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="curves"):
        plot_curves({}, tmp_path / "x.png")
