"""The exercises there are, and how a learner's file is found and imported (:mod:`nbcoll.exercises` re-exports
these names; the checks and the supervised runner import them from here)."""

from __future__ import annotations

import importlib.util
import itertools
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from nbcoll.exercises.device_checks import PTX_SIGNATURE as _RECV_REDUCE_SEND_SIGNATURE

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Exercise:
    """One exercise: what the learner writes (``entry``, in a file named ``NAME.py``) and which check grades it."""

    name: str
    summary: str
    entry: str  # the kernel or function the learner's file must define
    checker: str  # "module:function" under nbcoll.exercises
    tutorial: str  # the tutorial it follows
    kind: str  # "kernel", "function" or "algorithm"
    ptx_signature: str = ""  # kernels: the signature compiled to PTX for sm_90

    @property
    def starter(self) -> Path:
        return HERE / "starters" / f"{self.name}.py"

    @property
    def solution(self) -> Path:
        return HERE / "solutions" / f"{self.name}.py"


_F32 = "float32[::1]"
_F32_2D = "float32[:, ::1]"

EXERCISES: dict[str, Exercise] = {
    e.name: e
    for e in (
        Exercise(
            name="map_kernel",
            summary="a map kernel with a bounds check: out[i] = a * x[i] + b",
            entry="axpb_kernel",
            checker="kernel_checks:check_map",
            tutorial="01_first_kernel.py",
            kind="kernel",
            ptx_signature=f"void({_F32}, {_F32}, float32, float32)",
        ),
        Exercise(
            name="stencil_2d",
            summary="a 2-D stencil: out[r, c] = sum of x[r + a, c + b] * w[a, b]",
            entry="conv2d_kernel",
            checker="kernel_checks:check_stencil",
            tutorial="02_communication_patterns.py",
            kind="kernel",
            ptx_signature=f"void({_F32_2D}, {_F32_2D}, {_F32_2D})",
        ),
        Exercise(
            name="scatter_add",
            summary="scatter_add with atomics: out[index[i]] += src[i]",
            entry="scatter_add_kernel",
            checker="kernel_checks:check_scatter_add",
            tutorial="02_communication_patterns.py",
            kind="kernel",
            ptx_signature=f"void(int64[::1], {_F32}, {_F32})",
        ),
        Exercise(
            name="block_reduce",
            summary="a shared-memory tree reduction: one partial sum per block",
            entry="block_sum_kernel",
            checker="kernel_checks:check_block_reduce",
            tutorial="03_reductions.py",
            kind="kernel",
            ptx_signature=f"void({_F32}, {_F32})",
        ),
        Exercise(
            name="fused_softmax",
            summary="a fused row softmax: max, sum and divide in one kernel",
            entry="softmax_rows_kernel",
            checker="block_checks:check_fused_softmax",
            tutorial="03_reductions.py",
            kind="kernel",
            ptx_signature=f"void({_F32_2D}, {_F32_2D})",
        ),
        Exercise(
            name="tiled_matmul",
            summary="a tiled matmul through shared memory",
            entry="matmul_tiled_kernel",
            checker="block_checks:check_tiled_matmul",
            tutorial="04_tiled_matmul.py",
            kind="kernel",
            ptx_signature=f"void({_F32_2D}, {_F32_2D}, {_F32_2D})",
        ),
        Exercise(
            name="ring_all_reduce",
            summary="the ring all-reduce, written in nbcoll's primitives",
            entry="all_reduce",
            checker="algorithm_checks:check_ring_all_reduce",
            tutorial="08_ring_all_reduce.py",
            kind="algorithm",
        ),
        Exercise(
            name="tree_broadcast",
            summary="a broadcast down a binary tree, written in nbcoll's primitives",
            entry="broadcast",
            checker="algorithm_checks:check_tree_broadcast",
            tutorial="09_trees_and_algorithm_choice.py",
            kind="algorithm",
        ),
        Exercise(
            name="batched_copy",
            summary="a copy through a descriptor table (one launch, many segments)",
            entry="batched_copy_kernel",
            checker="kernel_checks:check_batched_copy",
            tutorial="10_all_gather_reduce_scatter_all_to_all.py",
            kind="kernel",
            ptx_signature=f"void({_F32}, {_F32}, int64[::1], int64[::1], int64[::1], int64)",
        ),
        Exercise(
            name="matmul_backward",
            summary="the backward of matmul: grad_a and grad_b from grad_out",
            entry="matmul_backward",
            checker="function_checks:check_matmul_backward",
            tutorial="11_autograd_from_scratch.py",
            kind="function",
        ),
        Exercise(
            name="softmax_backward",
            summary="the backward of softmax along the last axis",
            entry="softmax_backward",
            checker="function_checks:check_softmax_backward",
            tutorial="11_autograd_from_scratch.py",
            kind="function",
        ),
        Exercise(
            name="ddp_buckets",
            summary="DDP's gradient buckets: parameters grouped, last registered first",
            entry="ddp_buckets",
            checker="function_checks:check_ddp_buckets",
            tutorial="13_data_parallel.py",
            kind="function",
        ),
        Exercise(
            name="recv_reduce_send",
            summary="NCCL's recvReduceSend as a device function, run inside the ring all-reduce kernel",
            entry="recv_reduce_send",
            checker="device_checks:check_recv_reduce_send",
            tutorial="21_collective_as_one_kernel.py",
            kind="kernel",
            ptx_signature=_RECV_REDUCE_SEND_SIGNATURE,
        ),
    )
}
"""Every exercise, in the order of the tutorial path: each follows the tutorial that teaches what it needs."""


def get(name: str) -> Exercise:
    """The exercise called ``name``; a ``KeyError`` lists the ones there are."""
    if name not in EXERCISES:
        raise KeyError(f"exercise: unknown name {name!r}; expected one of {', '.join(EXERCISES)}")
    return EXERCISES[name]


def copy_starter(name: str, directory: str | Path = ".", force: bool = False) -> Path:
    """Copy the starter of ``name`` to ``directory/NAME.py``; a ``FileExistsError`` unless ``force``."""
    exercise = get(name)
    target = Path(directory) / exercise.starter.name
    if target.resolve().parent == HERE or HERE in target.resolve().parents:
        raise ValueError(f"directory: {directory} is inside the installed nbcoll package; copy to your own folder")
    if target.exists() and not force:
        raise FileExistsError(f"{target} exists; pass --force to overwrite it with a fresh starter")
    shutil.copyfile(exercise.starter, target)
    return target


_loaded = itertools.count()

PTX_CASE = "compiles to PTX for sm_90"
"""The case of a kernel's PTX compile, after every simulator case passed."""


def learner_file(path: str | Path) -> Path:
    """``path`` as a ``Path``; a ``FileNotFoundError`` if no such file exists."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"FILE: no such file {str(path)!r}")
    return path


def load_learner(path: str | Path) -> ModuleType:
    """Import the learner's file as a fresh module (a new name each time, so a second check sees the edits)."""
    path = learner_file(path)
    name = f"nbcoll_exercise_{path.stem}_{next(_loaded)}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
