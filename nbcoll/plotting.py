"""Loss curves drawn to a PNG file, so that a training run can be looked at after it ends.

Example::

    from nbcoll.plotting import plot_curves
    plot_curves({"train": train_losses, "test": test_losses}, "loss.png", title="digits MLP")

Matplotlib is imported only when a curve is drawn, with its file-only backend (no window, no display needed);
it is part of nbcoll's ``dev`` extra.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence

FIGURES_VARIABLE = "NBCOLL_FIGURES_DIR"
"""Set by the docs build to the folder whose pictures the site shows."""


def add_figures_option(parser: argparse.ArgumentParser, picture: str) -> None:
    """Add ``--out DIR`` (where a script writes ``picture``) to ``parser``: by default ``$NBCOLL_FIGURES_DIR``,
    so that the docs build finds the picture and shows it on the site, else the current folder.

    Example::

        >>> import argparse
        >>> from nbcoll.plotting import add_figures_option
        >>> parser = argparse.ArgumentParser()
        >>> add_figures_option(parser, "memory_per_rank.png")
        >>> parser.parse_args(["--out", "pictures"]).out
        'pictures'
    """
    parser.add_argument("--out", default=os.environ.get(FIGURES_VARIABLE, "."), help=f"where to write {picture}")


def plot_curves(
    curves: Mapping[str, Sequence[float]],
    path: str | os.PathLike,
    title: str = "",
    xlabel: str = "step",
    ylabel: str = "loss",
    log_y: bool = False,
) -> str:
    """Draw each named sequence of values as a line against its index; write a PNG to ``path``; return the path.

    Example::

        plot_curves({"loss": [2.3, 1.1, 0.6]}, "out/loss.png", log_y=True)
    """
    if not curves:
        raise ValueError("curves: expected at least one named sequence of values")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError("plot_curves needs matplotlib: pip install matplotlib (or nbcoll[dev])") from exc
    figure, axes = plt.subplots(figsize=(6, 3.5), dpi=100)
    try:
        for name, values in curves.items():
            axes.plot(range(len(values)), list(values), label=name, linewidth=1.2)
        axes.set_xlabel(xlabel)
        axes.set_ylabel(ylabel)
        if log_y:
            axes.set_yscale("log")
        if title:
            axes.set_title(title)
        axes.grid(alpha=0.3)
        axes.legend()
        figure.tight_layout()
        directory = os.path.dirname(os.fspath(path))
        if directory:
            os.makedirs(directory, exist_ok=True)
        figure.savefig(path, format="png")
    finally:
        plt.close(figure)
    return os.fspath(path)


__all__ = ["add_figures_option", "plot_curves"]
