"""How a kernel check chooses its hint: by the symptom of the wrong output (nbcoll.exercises.symptoms), tested
here on made-up outputs and on stand-in kernels (NumPy functions launched like kernels, no simulator), and how
the report draws the threads and counts the cases."""

import numpy as np
import pytest

from nbcoll.exercises import kernel_checks, symptoms
from nbcoll.exercises.report import Report, thread_picture_1d, thread_picture_2d

T, F = True, False


@pytest.mark.parametrize(
    ("wrong", "unwritten", "block_of", "changes", "expected"),
    [
        ([F, F, F], None, None, False, symptoms.RIGHT),
        ([T, F, T], None, None, True, symptoms.CHANGES),
        ([T, T, T], [T, T, T], None, False, symptoms.NOTHING),
        ([T, T, T], [F, T, F], None, False, symptoms.EVERYWHERE),
        ([F, F, T], None, None, False, symptoms.LAST),
        ([F, F, F, T], [F, F, F, T], [0, 0, 1, 1], False, symptoms.LAST),  # part of the last block
        ([F, F, T, T], [F, F, T, T], [0, 0, 1, 1], False, symptoms.BLOCKS),  # the whole last block
        ([T, T, F, F], None, [0, 0, 1, 1], False, symptoms.BLOCKS),
        ([T, F, T, F], None, [0, 0, 1, 1], False, symptoms.SPREAD),
        ([F, T, F], None, None, False, symptoms.SPREAD),
    ],
)
def test_the_symptom_of_a_1d_output(wrong, unwritten, block_of, changes, expected):
    block_of = None if block_of is None else np.array(block_of)
    unwritten = None if unwritten is None else np.array(unwritten)
    assert symptoms.classify(np.array(wrong), unwritten, block_of, changes) == expected


def test_the_symptom_of_a_2d_output():
    wrong = np.zeros((5, 6), bool)
    wrong[-1, :] = True  # the last row
    assert symptoms.classify(wrong) == symptoms.LAST
    wrong[:, -2:] = True  # and the last two columns
    assert symptoms.classify(wrong) == symptoms.LAST
    wrong[0, 0] = True
    assert symptoms.classify(wrong) == symptoms.SPREAD
    tiles = np.zeros((4, 4), bool)
    tiles[:2, 2:] = True  # one whole 2 x 2 tile
    assert symptoms.classify(tiles, block_of=symptoms.blocks_2d((4, 4), (2, 2))) == symptoms.BLOCKS


class StandIn:
    """A NumPy function launched like a kernel, ``kernel[grid, block](*args)``, that the check cannot tell apart."""

    def __init__(self, body):
        self.body = body

    def __getitem__(self, launch):
        return self.body


def _map_leaving_out_the_last_at(n_wrong: int):
    def body(x, out, a, b):
        out[:] = a * x + b
        if x.size == n_wrong:
            out[-1] = np.nan  # never written
        return None

    return StandIn(body)


def test_map_the_last_element_unwritten_gets_the_bound_hint():
    report = Report("map_kernel")
    kernel_checks.check_map(report, _map_leaving_out_the_last_at(70))  # 3 blocks: element 69 of block 2's 64-69
    failure = report.first_failure
    assert failure.name == "n=70 (3 blocks of 32)", report.format()
    assert "the bound check is off by one" in failure.detail and "syncthreads" not in failure.detail


def test_map_a_whole_last_block_unwritten_gets_the_block_offset_hint():
    report = Report("map_kernel")
    kernel_checks.check_map(report, _map_leaving_out_the_last_at(33))  # element 32 is all of block 1
    assert "blockIdx.x * blockDim.x + threadIdx.x" in report.first_failure.detail, report.format()


def _block_sums(x, partials, wrong_blocks):
    for b in range(partials.size):
        partials[b] = x[b * 32 : (b + 1) * 32].sum() + (100 if b in wrong_blocks(partials.size) else 0)


def test_block_reduce_hints_by_symptom():
    last = StandIn(lambda x, partials: _block_sums(x, partials, lambda blocks: {blocks - 1} if blocks > 1 else set()))
    report = Report("block_reduce")
    kernel_checks.check_block_reduce(report, last)
    assert report.first_failure.name == "n=45 (2 blocks of 32)", report.format()
    assert "only the last block's partial is wrong" in report.first_failure.detail
    assert "syncthreads" not in report.first_failure.detail

    spread = StandIn(lambda x, partials: _block_sums(x, partials, lambda blocks: {0, 2} if blocks > 2 else set()))
    report = Report("block_reduce")
    kernel_checks.check_block_reduce(report, spread)
    assert report.first_failure.name == "n=100 (4 blocks of 32)", report.format()
    assert "several blocks" in report.first_failure.detail and "cuda.syncthreads()" in report.first_failure.detail


def test_thread_pictures_draw_threads_without_an_element_apart_in_rows_of_one_width():
    text = thread_picture_1d(np.array([False, True, False]), 4, owner=lambda i: 4 * i)
    assert "-: owns no element" in text
    rows = [line.split("| ")[1] for line in text.splitlines()[1:]]
    assert rows == [".---", "X---", ".---"]
    assert thread_picture_1d(np.zeros(0, bool), 4).splitlines()[1:] == ["  block   0 | ----"]

    grid = thread_picture_2d(np.array([[True, False, False]] * 3), (2, 2)).splitlines()[1:]
    assert grid == ["  X.|.-", "  X.|.-", "  ==+==", "  X.|.-", "  --|--"]


def test_the_verdict_counts_every_planned_case():
    report = Report("demo")
    report.plan(["a", "b", "c"])
    report.plan(["compile"], final=True)
    report.plan(["d"])
    report.add("a", True)
    report.add("b", False, "wrong")
    assert report.not_run == ["c", "d", "compile"]
    assert report.verdict() == "1 of 5 cases pass (3 not run: the check stops at the first failing case)"
    assert Report.from_json(report.to_json()).format() == report.format()
    loaded = Report("demo")
    loaded.add("import", False, "does not import")
    assert loaded.verdict() == "the file did not load, so none of its cases ran"
