"""Each exercise follows the tutorial that teaches what it needs: that tutorial exists, teaches it (outside its
closing "Try it yourself" line), and points to the exercise; the list runs in the order of the tutorials."""

from pathlib import Path

import pytest

from nbcoll import exercises

TUTORIALS = Path(__file__).resolve().parent.parent / "tutorials"

TAUGHT = {
    "map_kernel": "blockIdx",
    "stencil_2d": "stencil.conv2d",
    "scatter_add": "cuda.atomic.add",
    "block_reduce": "syncthreads",
    "fused_softmax": "shared",
    "tiled_matmul": "tile",
    "ring_all_reduce": "reduce-scatter",
    "tree_broadcast": "HeapTree",
    "batched_copy": "all_to_all",
    "matmul_backward": "backward",
    "softmax_backward": "adding the contributions of a value used twice",  # the sum over every output
    "ddp_buckets": "bucket_cap_mb",
    "recv_reduce_send": "recv_reduce_send",
}
"""What each exercise needs that its tutorial teaches: a word of the tutorial's own code or text."""


@pytest.mark.parametrize("name", list(exercises.EXERCISES))
def test_each_exercise_follows_the_tutorial_that_teaches_it(name):
    text = (TUTORIALS / exercises.get(name).tutorial).read_text()
    lines = text.splitlines()
    pointers = [line for line in lines if "Try it yourself" in line]
    assert any(f"exercise {name}" in line for line in pointers), (name, pointers)
    taught = "\n".join(line for line in lines if "Try it yourself" not in line)
    assert TAUGHT[name] in taught, (name, exercises.get(name).tutorial)


def test_every_tutorial_that_points_to_an_exercise_is_the_one_it_follows():
    for path in sorted(TUTORIALS.glob("*.py")):
        for line in path.read_text().splitlines():
            if "Try it yourself" in line:
                for name in exercises.EXERCISES:
                    if f"exercise {name}" in line:
                        assert exercises.get(name).tutorial == path.name, (name, path.name)


def test_exercises_are_listed_in_the_order_of_the_tutorials():
    numbers = [int(e.tutorial.split("_")[0]) for e in exercises.EXERCISES.values()]
    assert numbers == sorted(numbers), numbers
