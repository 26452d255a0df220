"""What the planner's model of a training step reads (:mod:`nbcoll.parallel.plan`): the model and its batch
(:class:`ModelSpec`), a layout of the ranks (:class:`Layout`, :func:`layouts`) and the hardware's costs
(:class:`Rates`, :func:`default_rates`). Measuring the costs (:mod:`nbcoll.parallel.plan_costs`) and predicting a
step (:mod:`nbcoll.parallel.plan`) both read these, and neither imports the other's functions from here.

Example::

    spec = ModelSpec(layers=4, hidden=64, seq_len=32, batch=16, heads=4, vocab=64)
    [str(layout) for layout in layouts(spec, 2)]      # ['dp=2 tp=1 pp=1 m=1', 'dp=1 tp=1 pp=2 m=1', ...]
    layouts(spec, 2, long_sequences=True)              # ... and with cp=2, sp, recompute
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from nbcoll.comm import tuner


@dataclass(frozen=True)
class ModelSpec:
    """A transformer language model and its global batch.

    Example::

        ModelSpec(layers=4, hidden=64, seq_len=32, batch=16, heads=4, vocab=64, bytes_per_value=8)
    """

    layers: int
    hidden: int
    seq_len: int
    batch: int
    heads: int
    vocab: int
    mlp_ratio: float = 4.0
    bytes_per_value: int = 4
    optimizer_states: int = 1  # values of optimizer state per parameter: 1 for SGD with momentum, 2 for Adam

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "seq_len", "batch", "heads", "vocab", "bytes_per_value"):
            _require(self, name, _is_int(getattr(self, name)) and getattr(self, name) >= 1, "an integer >= 1")
        states_ok = _is_int(self.optimizer_states) and self.optimizer_states >= 0
        _require(self, "optimizer_states", states_ok, "an integer >= 0")
        mlp_ok = _is_number(self.mlp_ratio) and self.mlp >= 1
        _require(self, "mlp_ratio", mlp_ok, "a ratio that leaves an MLP of width >= 1")
        if self.hidden % self.heads:  # each head attends over hidden / heads features
            raise ValueError(f"ModelSpec(hidden): expected a multiple of heads ({self.heads}), got {self.hidden}")

    @property
    def mlp(self) -> int:
        return int(round(self.mlp_ratio * self.hidden))

    def layer_flops(self, tokens: int) -> float:
        """Forward FLOPs of one block: q, k, v and out projections, the MLP, and attention over the sequence."""
        h, f = self.hidden, self.mlp
        return 2.0 * tokens * (4 * h * h + 2 * h * f) + 4.0 * tokens * self.seq_len * h

    def layer_params(self) -> int:
        h, f = self.hidden, self.mlp
        return 4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h


@dataclass(frozen=True)
class Layout:
    """How the ranks split the training: ``dp x tp x pp x cp`` ranks, ``chunks`` micro-batches in the pipeline,
    sequence parallelism over tp (``sp``) and recomputation of every block (``recompute``).

    Example::

        str(Layout(2, 2, 1, 1)), str(Layout(1, 1, 1, 1, cp=4, recompute=True))
        # ('dp=2 tp=2 pp=1 m=1', 'dp=1 tp=1 pp=1 m=1 cp=4 recompute')
    """

    dp: int
    tp: int
    pp: int
    chunks: int
    cp: int = 1
    sp: bool = False
    recompute: bool = False

    @property
    def ranks(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def __str__(self) -> str:
        extra = (f" cp={self.cp}" if self.cp > 1 else "") + (" sp" if self.sp else "")
        return f"dp={self.dp} tp={self.tp} pp={self.pp} m={self.chunks}{extra}" + (" recompute" * self.recompute)


@dataclass(frozen=True)
class Rates:
    """What the hardware does: measured compute rate and fixed costs, and the links' alpha-beta model.

    Example::

        Rates(flops_per_second=2e9, block_overhead=4e-3, link=tuner.LinkModel(40e-6, 2e9), cores=2)
    """

    flops_per_second: float
    block_overhead: float  # seconds per block forward + backward beyond its FLOPs
    link: tuner.LinkModel
    chunk_bytes: int = 1 << 20
    cores: int | None = None  # devices the ranks share (CPU cores here); None: one device per rank
    call_latency: float = 0.0  # seconds each collective or transfer call costs beyond the alpha-beta model
    # seconds an all-reduce between partners that take turns on shared cores waits beyond ``call_latency``
    partner_wait: float = 0.0
    embed_overhead: float = 0.0  # seconds per micro-batch of the embedding, forward + backward (first stage)
    head_overhead: float = 0.0  # seconds per micro-batch of final norm, head and loss beyond their FLOPs (last stage)
    update_overhead: float = 0.0  # seconds per block of the optimizer step, once per training step
    # seconds per query/key chunk pair that ring attention attends to, forward + backward, beyond its FLOPs
    ring_overhead: float = 0.0

    def __post_init__(self) -> None:
        rate_ok = _is_number(self.flops_per_second) and self.flops_per_second > 0
        _require(self, "flops_per_second", rate_ok, "FLOPs per second > 0")
        for name in _SECONDS:
            _require(self, name, _is_number(getattr(self, name)) and getattr(self, name) >= 0, "seconds >= 0")
        _require(self, "chunk_bytes", _is_int(self.chunk_bytes) and self.chunk_bytes >= 1, "an integer >= 1")
        cores_ok = self.cores is None or (_is_int(self.cores) and self.cores >= 1)
        _require(self, "cores", cores_ok, "an integer >= 1 or None")
        link = self.link
        link_ok = _is_number(link.alpha) and link.alpha >= 0 and _is_number(link.beta) and link.beta > 0
        _require(self, "link", link_ok, "alpha >= 0 seconds and beta > 0 bytes per second")


_SECONDS = (
    "block_overhead",
    "call_latency",
    "partner_wait",
    "embed_overhead",
    "head_overhead",
    "update_overhead",
    "ring_overhead",
)
"""The fields of :class:`Rates` that are durations."""


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _require(owner: object, name: str, ok: bool, expected: str) -> None:
    """``ValueError("ModelSpec(hidden): expected an integer >= 1, got 0")`` unless ``ok``."""
    if not ok:
        raise ValueError(f"{type(owner).__name__}({name}): expected {expected}, got {getattr(owner, name)!r}")


def layouts(spec: ModelSpec, ranks: int, max_chunks: int = 8, long_sequences: bool = False) -> list[Layout]:
    """Every layout of ``ranks`` that divides the model: heads, MLP and vocabulary by tp, layers by pp, and the
    batch by dp x micro-batches.

    ``long_sequences`` adds the layouts of context parallelism (cp ranks, the sequence in ``2 cp`` zig-zag chunks
    as causal ring attention takes it), sequence parallelism (with tp > 1, each cp rank's positions in tp parts)
    and recomputation, each on and off: without it, only ``cp = 1`` and neither of the others."""
    found = []
    for cp in range(1, ranks + 1) if long_sequences else (1,):
        if ranks % cp or spec.seq_len % (2 * cp) and cp > 1:
            continue
        for tp in range(1, ranks // cp + 1):
            for pp in range(1, ranks // (cp * tp) + 1):
                if ranks % (cp * tp * pp):
                    continue
                dp = ranks // (cp * tp * pp)
                if spec.heads % tp or spec.mlp % tp or spec.vocab % tp or spec.layers % pp or spec.batch % dp:
                    continue
                sps = (False, True) if long_sequences and tp > 1 and (spec.seq_len // cp) % tp == 0 else (False,)
                for m in (1, 2, 4, 8, 16):
                    if not (m <= max_chunks and (spec.batch // dp) % m == 0 and (pp > 1 or m == 1)):
                        continue
                    for sp in sps:
                        for recompute in (False, True) if long_sequences else (False,):
                            found.append(Layout(dp, tp, pp, m, cp, sp, recompute))
    return found


def default_rates(cores: int | None = None) -> Rates:
    """Rates without measuring: a NumPy-on-CPU FLOP rate and overhead, and the calibrated (or default) link."""
    link = tuner.load_models().get("ipc") or tuner.LinkModel(40e-6, 2e9)
    return Rates(flops_per_second=2e9, block_overhead=4e-3, link=link, cores=cores)
