"""A script that launches one of its own functions on 2 ranks (the function travels by file and name)."""

import os

from nbcoll.launch import launch


def describe_rank(values):
    print(f"rank {os.environ['PMI_RANK']} got {values}")
    return {"rank": int(os.environ["PMI_RANK"]), "total": sum(values)}


if __name__ == "__main__":
    result = launch(2, function=describe_rank, args=([1, 2, 3],), timeout=60).check()
    print(result.returns)
    print(result.outputs)
