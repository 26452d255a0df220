"""``DeviceMesh.rank_of`` and ``coords_of`` map only coordinates and ranks of the mesh, and refuse the others."""

import pytest

import nbcoll
from nbcoll.comm import loopback
from nbcoll.parallel import DeviceMesh
from nbcoll.parallel.mesh import DIMS


@pytest.fixture(autouse=True)
def numpy_backend():
    with nbcoll.use_backend("numpy"):
        yield


def on_mesh(nranks: int, check, **sizes) -> list:
    """``check(mesh)`` on every rank of a loopback world of ``nranks`` laid out as ``sizes``."""

    def body(comm):
        mesh = DeviceMesh(comm, tuple(sizes.get(dim, 1) for dim in DIMS), mesh_dim_names=DIMS)
        try:
            return check(mesh)
        finally:
            mesh.destroy()

    return loopback.run(nranks, body)


def refusal(call) -> str:
    """The message of the ValueError ``call()`` raises ("" if it returns)."""
    try:
        call()
    except ValueError as exc:
        return str(exc)
    return ""


def test_every_rank_and_coordinate_of_a_2_by_2_mesh_maps_both_ways():
    def check(mesh):
        every = [mesh.coords_of(rank) for rank in range(4)]
        assert [mesh.rank_of(**coords) for coords in every] == [0, 1, 2, 3]
        assert mesh.rank_of(dp=1, tp=0) == 2  # pp and ep, of size 1, may be left out
        return mesh.coords == mesh.coords_of(mesh.world.rank)

    assert on_mesh(4, check, dp=2, tp=2) == [True] * 4


def test_coordinates_and_ranks_off_a_2_by_2_mesh_are_refused_by_name():
    def check(mesh):
        return {
            "tp=2": refusal(lambda: mesh.rank_of(dp=0, tp=2)),
            "dp=-1": refusal(lambda: mesh.rank_of(dp=-1, tp=0)),
            "misspelt": refusal(lambda: mesh.rank_of(dp=0, td=1)),
            "missing": refusal(lambda: mesh.rank_of(dp=1)),
            "not an int": refusal(lambda: mesh.rank_of(dp=0.5, tp=0)),
            "rank 7": refusal(lambda: mesh.coords_of(7)),
            "rank -1": refusal(lambda: mesh.coords_of(-1)),
        }

    messages = on_mesh(4, check, dp=2, tp=2)[0]
    assert "tp" in messages["tp=2"] and "[0, 2)" in messages["tp=2"] and "got 2" in messages["tp=2"]
    assert "dp" in messages["dp=-1"] and "[0, 2)" in messages["dp=-1"] and "got -1" in messages["dp=-1"]
    assert "td" in messages["misspelt"] and "pp, dp, ep, tp" in messages["misspelt"]
    assert "tp" in messages["missing"] and "[0, 2)" in messages["missing"]
    assert "dp" in messages["not an int"] and "0.5" in messages["not an int"]
    assert messages["rank 7"].startswith("rank:") and "[0, 4)" in messages["rank 7"] and "7" in messages["rank 7"]
    assert messages["rank -1"].startswith("rank:") and "[0, 4)" in messages["rank -1"]


@pytest.mark.parametrize("nranks, sizes", [(1, {}), (3, {"pp": 3})])
def test_meshes_of_one_and_three_ranks(nranks, sizes):
    def check(mesh):
        assert [mesh.rank_of(**mesh.coords_of(rank)) for rank in range(nranks)] == list(range(nranks))
        dim = next(iter(sizes), "tp")
        off = refusal(lambda: mesh.rank_of(**{dim: nranks}))
        assert dim in off and f"[0, {nranks})" in off
        assert f"[0, {nranks})" in refusal(lambda: mesh.coords_of(nranks))
        assert "dp" in refusal(lambda: mesh.rank_of(dp=1))  # dp has size 1 here: only coordinate 0
        return True

    assert on_mesh(nranks, check, **sizes) == [True] * nranks
