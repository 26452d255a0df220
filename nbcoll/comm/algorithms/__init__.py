"""Which algorithms implement which collective, and the ``NBCOLL_ALGO`` setting that narrows the choice.

Every algorithm is a generator of primitives (:mod:`nbcoll.comm.primitives`), one file per family:

==================== ==========================================================================
``ring``             all-reduce, broadcast, reduce, all-gather, reduce-scatter (:mod:`.ring`)
``tree``             all-reduce (double binary tree), broadcast, reduce (:mod:`.tree`)
``direct``           one-shot all-reduce, all-gather, broadcast, all-to-all, reduce-scatter (LL); gather, scatter
``halving_doubling`` all-reduce by Rabenseifner's recursive halving and doubling (:mod:`.halving_doubling`)
``pairwise``         all-to-all, and the barrier (:mod:`.pairwise`)
==================== ==========================================================================

The ring and tree algorithms split a collective across the communicator's channels (``NBCOLL_NCHANNELS``):
each channel runs the algorithm on its own part of the buffer, on its own connections, and the progress loop
interleaves their steps (:func:`channels_for` says how many a call uses). The double binary tree's two trees
then run at once, one per channel.

``NBCOLL_ALGO`` uses NCCL's syntax for ``NCCL_ALGO``: a list of algorithms (``ring,tree``), a list to exclude
(``^tree``), or per-collective lists separated by ``;`` (``allreduce:tree;broadcast:ring``). Collective names
may be written with or without the underscore.

As with NCCL, a list for every collective narrows only the collectives it leaves an algorithm to:
``ring,tree`` makes all-reduce choose between ring and tree, and leaves all-to-all, gather, scatter and the
barrier with the only algorithm each has. A list given for one collective must leave it an algorithm, or the
setting is refused when it is read.
"""

from __future__ import annotations

from collections.abc import Callable

from nbcoll.comm.algorithms import direct, halving_doubling, pairwise, ring, tree

ALGORITHMS: dict[str, dict[str, Callable]] = {
    "all_reduce": {
        "ring": ring.all_reduce,
        "tree": tree.all_reduce,
        "direct": direct.all_reduce,
        "halving_doubling": halving_doubling.all_reduce,
    },
    "broadcast": {"ring": ring.broadcast, "tree": tree.broadcast, "direct": direct.broadcast},
    "reduce": {"ring": ring.reduce, "tree": tree.reduce},
    "all_gather": {"ring": ring.all_gather, "direct": direct.all_gather},
    "reduce_scatter": {"ring": ring.reduce_scatter, "direct": direct.reduce_scatter},
    "all_to_all": {"pairwise": pairwise.all_to_all, "direct": direct.all_to_all},
    "gather": {"direct": direct.gather},
    "scatter": {"direct": direct.scatter},
    "barrier": {"pairwise": pairwise.barrier},
}
"""collective -> algorithm name -> generator function."""

ALGO_NAMES = ("ring", "tree", "direct", "halving_doubling", "pairwise")

SPLIT_ACROSS_CHANNELS = {
    ("all_reduce", "ring"),
    ("broadcast", "ring"),
    ("reduce", "ring"),
    ("all_gather", "ring"),
    ("reduce_scatter", "ring"),
    ("all_reduce", "tree"),
    ("broadcast", "tree"),
    ("reduce", "tree"),
}
"""(collective, algorithm) pairs whose generator runs once per channel on ``ctx.part`` of the buffer."""


def channels_for(collective: str, algo: str, count: int, chunk_elems: int, nchannels: int, nranks: int) -> int:
    """How many of the ``nchannels`` channels a collective of ``count`` elements (per rank block) uses.

    As NCCL lowers its channel count for small messages: a channel with less than a unit of its own only adds
    steps, so ``min(nchannels, ceil(count / unit))``, at least one. The unit is a chunk, and for the ring
    all-reduce a round of ``nranks`` chunks (each round already moves ``nranks`` blocks). The double binary tree
    cuts its buffer in two anyway, so its two trees always get a channel each when there are two.

    >>> channels_for("all_reduce", "ring", count=1000, chunk_elems=100, nchannels=2, nranks=4)
    2
    >>> channels_for("all_reduce", "ring", 500, 100, 2, 4), channels_for("all_reduce", "tree", 10, 100, 2, 4)
    (1, 2)
    """
    if (collective, algo) not in SPLIT_ACROSS_CHANNELS:
        return 1
    unit = chunk_elems * nranks if (collective, algo) == ("all_reduce", "ring") else chunk_elems
    worth = -(-count // unit)
    if (collective, algo) == ("all_reduce", "tree"):
        worth = max(worth, 2)
    return max(1, min(nchannels, worth))


def canonical_collective(text: str) -> str | None:
    """The collective ``text`` names, spelt as nbcoll spells it, or ``None``: ``allreduce``, ``All-Reduce`` and
    ``all_reduce`` all give ``"all_reduce"`` (NCCL's and MPI's spellings, and nbcoll's)."""
    key = text.strip().lower().replace("_", "").replace("-", "")
    return next((name for name in ALGORITHMS if name.replace("_", "") == key), None)


def _collective_name(text: str) -> str:
    name = canonical_collective(text)
    if name is None:
        raise ValueError(f"NBCOLL_ALGO: unknown collective {text!r}; expected one of {', '.join(ALGORITHMS)}")
    return name


def _algo_list(text: str) -> tuple[bool, set[str]]:
    text = text.strip().lower()
    exclude = text.startswith("^")
    names = {n.strip() for n in text.lstrip("^").split(",") if n.strip()}
    unknown = names - set(ALGO_NAMES)
    if unknown or not names:
        raise ValueError(
            f"NBCOLL_ALGO: unknown algorithm(s) {', '.join(sorted(unknown)) or '(none given)'}; "
            f"expected names from {', '.join(ALGO_NAMES)}"
        )
    return exclude, names


def parse_algo_setting(setting: str | None) -> dict[str, set[str]]:
    """The algorithms ``NBCOLL_ALGO`` allows, per collective (collectives it does not name allow all).

    ``for part in setting.split(";"): for coll in (part's collective, or every one): allowed[coll] = narrowed``,
    where a part for every collective skips those it would leave without an algorithm.
    """
    allowed = {coll: set(algos) for coll, algos in ALGORITHMS.items()}
    if not setting or not setting.strip():
        return allowed
    for part in setting.split(";"):
        if not part.strip():
            continue
        explicit = ":" in part
        colls = list(ALGORITHMS)
        text = part
        if explicit:
            coll_text, text = part.split(":", 1)
            colls = [_collective_name(coll_text)]
        exclude, names = _algo_list(text)
        for coll in colls:
            narrowed = allowed[coll] - names if exclude else allowed[coll] & names
            if narrowed:
                allowed[coll] = narrowed
            elif explicit:
                raise ValueError(
                    f"NBCOLL_ALGO: {part.strip()!r} excludes every algorithm of {coll} "
                    f"({', '.join(ALGORITHMS[coll])}); name at least one of them"
                )
    return allowed


def check_algo(collective: str, algo: str) -> Callable:
    """The generator of ``algo`` for ``collective``; a ``ValueError`` names the algorithms that do apply."""
    table = ALGORITHMS[collective]
    if algo not in table:
        raise ValueError(
            f"algo: {algo!r} does not implement {collective}; use one of {', '.join(table)}"
            + ("" if algo in ALGO_NAMES else f" (known algorithms: {', '.join(ALGO_NAMES)})")
        )
    return table[algo]
