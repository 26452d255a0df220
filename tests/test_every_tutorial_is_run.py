"""Every numbered tutorial is run as a plain script by some test of the suite, so none can break unnoticed."""

from helpers import ROOT, TUTORIALS


def test_every_tutorial_is_named_by_a_test_that_runs_it():
    tutorials = sorted(path.name for path in TUTORIALS.glob("[0-9][0-9]_*.py"))
    assert len(tutorials) >= 20, tutorials
    numbers = [int(name[:2]) for name in tutorials]
    assert numbers == list(range(1, len(tutorials) + 1)), numbers  # the path has no gap (it once went 11, 17)
    tests = [path for path in (ROOT / "tests").glob("test_*.py") if path.name != "test_every_tutorial_is_run.py"]
    sources = "\n".join(path.read_text(encoding="utf-8") for path in tests)
    # A test names the file it runs: TUTORIALS / "NN_name.py", or the name passed to a helper that runs it.
    missing = [name for name in tutorials if f'"{name}"' not in sources]
    assert not missing, f"tutorials no test runs: {missing}"
