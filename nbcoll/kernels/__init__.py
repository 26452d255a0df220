"""Numba CUDA kernels, one file per family, each beside its NumPy reference and one launch function."""

from nbcoll.kernels.registry import KernelEntry, all_kernels, register

__all__ = ["KernelEntry", "all_kernels", "register"]
