"""Which algorithms implement which collective, and the ``NBCOLL_ALGO`` setting that narrows the choice.

Every algorithm is a generator of primitives (:mod:`nbcoll.comm.primitives`), one file per family:

==================== ==========================================================================
``ring``             all-reduce, broadcast, reduce, all-gather, reduce-scatter (:mod:`.ring`)
``tree``             all-reduce (double binary tree), broadcast, reduce (:mod:`.tree`)
``direct``           all-reduce, all-gather, (over LL) all-to-all and reduce-scatter in one shot, gather, scatter
``halving_doubling`` all-reduce by Rabenseifner's recursive halving and doubling (:mod:`.halving_doubling`)
``pairwise``         all-to-all, and the barrier (:mod:`.pairwise`)
==================== ==========================================================================

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
    "broadcast": {"ring": ring.broadcast, "tree": tree.broadcast},
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
