"""The algorithm exercises: the reference, the starter and the mistakes of each run on 2, 3 and 4 ranks that are
threads of this process (loopback worlds), and each report names the first step that differs from the reference."""

from pathlib import Path

from nbcoll import exercises
from nbcoll.exercises.algorithm_checks import check_files
from nbcoll.exercises.report import Report

MISTAKES = Path(__file__).resolve().parent / "exercise_mistakes"


def _check_all(name: str, trace_dir: Path | None) -> dict[str, Report]:
    entry = exercises.get(name)
    files = {"reference": entry.solution, "starter": entry.starter}
    files.update({path.stem.split("__")[1]: path for path in sorted(MISTAKES.glob(f"{name}__*.py"))})
    reports = {key: Report(name) for key in files}
    check_files(name, [(reports[key], path) for key, path in files.items()], trace_dir)
    return reports


def test_ring_all_reduce_exercise(tmp_path):
    reports = _check_all("ring_all_reduce", tmp_path)
    reference = reports["reference"]
    assert reference.passed and len(reference.cases) == 9, reference.format()
    assert (tmp_path / "ring_all_reduce_yours_0.png").is_file()
    assert (tmp_path / "ring_all_reduce_reference_0.png").is_file()

    assert "not written yet" in reports["starter"].format()

    # The left neighbour is also the right one on 2 ranks: 3 ranks catch the mistake, and the step says where.
    wrong_neighbour = reports["wrong_neighbour"].format()
    assert "PASS  2 ranks, 21 elements" in wrong_neighbour and "FAIL  3 ranks" in wrong_neighbour
    assert "first wrong step: rank 0, step 0" in wrong_neighbour
    assert "to rank 2" in wrong_neighbour and "to rank 1" in wrong_neighbour
    assert "wrong neighbour" in wrong_neighbour

    own_block = reports["starts_with_own_block"].format()
    assert "first wrong step: rank 0, step 0" in own_block
    assert "yours:     send of elements [0, 4)" in own_block and "reference: send of elements [4, 8)" in own_block
    assert "from other elements: a block was added or copied at the wrong place" in own_block


def test_tree_broadcast_exercise():
    reports = _check_all("tree_broadcast", None)
    reference = reports["reference"]
    assert reference.passed and len(reference.cases) == 16, reference.format()
    assert "not written yet" in reports["starter"].format()

    ignores_root = reports["ignores_root"].format()
    assert "PASS  2 ranks, root 0, 10 elements" in ignores_root and "FAIL  2 ranks, root 1" in ignores_root
    assert "count positions from the root" in ignores_root

    leaf = reports["leaf_never_receives"].format()
    assert "that element never arrived" in leaf
    assert "the reference does recv of elements [0, 4) from rank 0" in leaf
