"""Top-level functions that nbcoll.launch runs on every rank, found by module and name."""

import os


def rank_and_double(value):
    return int(os.environ["PMI_RANK"]), 2 * value
