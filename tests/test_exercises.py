"""The kernel and NumPy exercises: every reference passes its check, every starter fails it clearly, and every
mistake in tests/exercise_mistakes/ fails with a message that names it. Kernels run in this process on the
simulator; their PTX compile runs once, in one subprocess, for the whole file."""

from pathlib import Path

import pytest

from nbcoll import exercises
from nbcoll.backend import device_backend
from nbcoll.exercises import ptx

MISTAKES = Path(__file__).resolve().parent / "exercise_mistakes"
IN_PROCESS = [e.name for e in exercises.EXERCISES.values() if e.kind != "algorithm"]
KERNELS = [e.name for e in exercises.EXERCISES.values() if e.kind == "kernel"]

pytestmark = pytest.mark.skipif(
    device_backend() == "cuda", reason="the checks' messages describe the simulator (out-of-bounds errors, races)"
)

# fixture -> what the message must say (each names the mistake, not only that something is wrong)
EXPECTED = {
    "map_kernel__no_bounds_check": "missing bounds check",
    "map_kernel__thread_index_only": "blockIdx.x * blockDim.x + threadIdx.x",
    "map_kernel__bound_off_by_one": "bound check is off by one",
    "stencil_2d__swapped_axes": "row and column swapped",
    "stencil_2d__filter_off_by_one": "range(KH)",
    "block_reduce__missing_syncthreads": "cuda.syncthreads()",
    "block_reduce__no_bounds_check_on_load": "missing bounds check",
    "block_reduce__wrong_partial_slot": "partials[blockIdx.x]",
    "block_reduce__load_bound_off_by_one": "the load's bound is off by one",
    "tiled_matmul__skips_partial_tile": "the last, partial tile is skipped",
    "tiled_matmul__no_bounds_check_on_write": "missing bounds check",
    "fused_softmax__no_max_subtraction": "subtract the row's maximum",
    "fused_softmax__one_column_per_thread": "each thread must loop over columns",
    "scatter_add__no_atomic": "cuda.atomic.add",
    "scatter_add__gather_instead_of_scatter": "the index says where to write",
    "batched_copy__no_bounds_check": "missing bounds check",
    "batched_copy__segment_boundary_off_by_one": "starts[k] <= i",
    "matmul_backward__no_transpose": "grad_out @ b.T",
    "matmul_backward__grad_b_transposed": "grad_b is transposed",
    "softmax_backward__no_sum_term": "leaves out",
    "softmax_backward__wrong_axis": "wrong axis",
    "ddp_buckets__registration_order": "reverse order",
    "ddp_buckets__closes_before_adding": "add the parameter to the open bucket first",
}


@pytest.mark.parametrize("name", IN_PROCESS)
def test_reference_solution_passes(name):
    report = exercises.check(name, exercises.get(name).solution, ptx=False)
    assert report.passed, report.format()
    assert len(report.cases) >= 3
    assert report.not_run == [] and report.format().endswith(f"{name}: all cases pass"), report.format()


@pytest.mark.parametrize("name", IN_PROCESS)
def test_unchanged_starter_fails_clearly(name):
    report = exercises.check(name, exercises.get(name).starter, ptx=False)
    assert not report.passed
    text = report.format()
    assert "still empty" in text or "not written yet" in text, text


@pytest.mark.parametrize("fixture", sorted(EXPECTED))
def test_typical_mistake_fails_with_a_message_that_names_it(fixture):
    name = fixture.split("__")[0]
    report = exercises.check(name, MISTAKES / f"{fixture}.py", ptx=False)
    assert not report.passed, report.format()
    assert EXPECTED[fixture] in report.format(), report.format()


def test_every_exercise_has_two_mistakes_or_more():
    for name in exercises.EXERCISES:
        assert len(list(MISTAKES.glob(f"{name}__*.py"))) >= 2, name


def test_kernel_failure_shows_the_input_expected_actual_and_threads():
    text = exercises.check("map_kernel", MISTAKES / "map_kernel__thread_index_only.py", ptx=False).format()
    assert "input: x shape (33,)" in text and "expected" in text and "got nan" in text
    # n=33 on 2 blocks of 32: thread 32 owns the wrong element, threads 33 to 63 own none; both rows whole
    assert "block   0 | " + "." * 32 + "\n" in text and "block   1 | X" + "-" * 31 + "\n" in text, text
    assert "-: owns no element" in text


def test_the_count_is_over_every_case_and_names_the_ones_not_run():
    report = exercises.check("map_kernel", MISTAKES / "map_kernel__thread_index_only.py")  # PTX planned too
    text = report.format()
    assert report.not_run == ["n=70 (3 blocks of 32)", "n=0 (1 block of 32)", exercises.PTX_CASE], text
    assert "  ----  n=70 (3 blocks of 32)   (not run)" in text
    assert text.endswith("map_kernel: 1 of 5 cases pass (3 not run: the check stops at the first failing case)")


def test_a_reduction_draws_the_threads_that_own_no_partial_apart():
    report = exercises.check("block_reduce", MISTAKES / "block_reduce__wrong_partial_slot.py", ptx=False)
    rows = [line for line in report.first_failure.picture.splitlines() if "| " in line]
    assert rows == ["  block   0 | X" + "-" * 31, "  block   1 | X" + "-" * 31], report.format()


def test_reference_kernels_compile_to_ptx_and_simulator_only_code_does_not():
    # One subprocess for every kernel: the simulator and compile_ptx cannot share a process.
    pairs = [(name, str(exercises.get(name).solution)) for name in KERNELS]
    pairs.append(("map_kernel", str(MISTAKES / "map_kernel__python_list.py")))
    results = ptx.compile_files(pairs)
    assert [ok for _, ok, _ in results[:-1]] == [True] * len(KERNELS), results
    kernel, ok, message = results[-1]
    assert kernel == "axpb_kernel" and not ok and "build_list" in message, message
    assert "does not compile for a GPU" in ptx.explain(message)


def test_simulator_only_kernel_passes_the_simulator_cases():
    report = exercises.check("map_kernel", MISTAKES / "map_kernel__python_list.py", ptx=False)
    assert report.passed, report.format()  # which is why the PTX compile is part of --check


def test_ddp_buckets_reference_examples():
    from nbcoll.exercises.function_checks import ddp_buckets_reference

    assert ddp_buckets_reference([10, 20, 30], 40) == [[2, 1], [0]]
    assert ddp_buckets_reference([], 40) == []
    assert ddp_buckets_reference([50, 50, 50, 50], 100) == [[3, 2], [1, 0]]
    assert ddp_buckets_reference([30, 400, 30], 100) == [[2, 1], [0]]


def test_kernel_check_in_a_simulator_subprocess_as_on_a_gpu_machine():
    from nbcoll.exercises import in_simulator

    report = in_simulator.run("map_kernel", exercises.get("map_kernel").solution, ptx=False)
    assert report.passed and [case.name for case in report.cases][0] == "n=1 (1 block of 32)", report.format()
    failed = in_simulator.run("map_kernel", MISTAKES / "map_kernel__no_bounds_check.py", ptx=False)
    assert not failed.passed and "missing bounds check" in failed.format()
