"""The recv_reduce_send exercise: the learner's device function inside the ring all-reduce kernel, on 2 to 4
simulated ranks, then compiled to PTX for sm_90 (nbcoll.exercises.device_checks)."""

import pytest
from device_helpers import compile_ptx, lines_in_loops

from nbcoll import exercises
from nbcoll.exercises import run_checks
from nbcoll.exercises.report import Report

EXERCISE = exercises.get("recv_reduce_send")
MISTAKES = {
    "recv_reduce_send__no_reduce": "fold in this rank's own element",
    "recv_reduce_send__forgets_the_step_counts": "state[dp.SENT] = sent + 1",
}


def _check(path):
    return run_checks(Report(EXERCISE.name), EXERCISE, path, ptx=False)


def test_the_reference_solution_passes_on_two_to_four_ranks():
    report = _check(EXERCISE.solution)
    assert report.passed, report.format()
    assert {case.name.split(" ranks")[0] for case in report.cases} == {"2", "3", "4"}


def test_the_unchanged_starter_fails_clearly():
    report = _check(EXERCISE.starter)
    assert not report.passed and "not written yet" in report.format(), report.format()


@pytest.mark.parametrize("fixture", sorted(MISTAKES))
def test_a_typical_mistake_fails_with_a_message_that_names_it(fixture):
    from test_exercises import MISTAKES as FOLDER

    report = _check(FOLDER / f"{fixture}.py")
    assert not report.passed and MISTAKES[fixture] in report.format(), report.format()


def test_a_primitive_that_waits_for_the_wrong_step_fails_instead_of_spinning(tmp_path):
    # received + 2: a chunk that never comes. The watchdog sees the counters stand still and sets the abort word.
    wrong = EXERCISE.solution.read_text().replace("received + 1, abort, spins", "received + 2, abort, spins")
    assert wrong != EXERCISE.solution.read_text()
    (tmp_path / "waits_too_long.py").write_text(wrong)
    text = _check(tmp_path / "waits_too_long.py").format()
    assert "the ring did not finish" in text and "waited for its previous rank's chunk" in text, text


def test_the_solution_compiles_to_ptx_for_sm90_with_its_spins_inside_loops():
    # The solution's file as a module (nbcoll/exercises/solutions is a folder of files, importable by name), its
    # function compiled alone as a kernel of the prims tuple, as the exercise's PTX case compiles a learner's.
    ptx = compile_ptx("nbcoll.exercises.solutions.recv_reduce_send", EXERCISE.entry, EXERCISE.ptx_signature)
    loads, in_loops = lines_in_loops(ptx, r"ld\.volatile\.global")
    assert ".entry" in ptx and loads >= 2 and in_loops >= 2, (loads, in_loops)  # the spins on tail and on head
