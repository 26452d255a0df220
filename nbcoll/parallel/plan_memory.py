"""Memory per rank of a training step of :class:`~nbcoll.parallel.hybrid.HybridLM`: what the planner fits.

On one rank of a layout, with ``P`` the parameters of its shard (its stage's blocks over tp, its stage's share of
the embedding and head) and ``v`` bytes per value::

    state        P v (2 + optimizer states)            parameters, gradients, momentum
                 + P v                                 DistributedDataParallel's flat buckets, when it averages
    activations  in flight x blocks x saved per block  what each block keeps for backward (micro-batches in
                                                       flight: min(m, pp) under 1F1B)
                 + one block's whole activations       with recomputation: the block being recomputed
                 + the head and loss's                 on the last stage

A block's saved activations follow the layout: the parts inside the split layers (q, k, v, the MLP's features,
attention's scores) shrink with tp; the parts outside them (norms, residuals) with tp only under sp; all of them
with cp (each rank holds ``1 / cp`` of the sequence), and attention's scores, which span the whole sequence under
plain attention, are never kept by ring attention (it recomputes them in backward). Recomputation keeps only each
block's input. How many values the autograd keeps per token for each of these parts is an implementation detail
of nbcoll's layers and engine: :func:`autograd_values_per_token` holds those figures, measured with
``nbcoll.memory.stats()``.

Example::

    memory_bytes(spec, Layout(1, 1, 1, 1, cp=4, recompute=True))      # bytes per rank
"""

from __future__ import annotations

from nbcoll.parallel.plan_model import Layout, ModelSpec


def autograd_values_per_token() -> dict[str, float]:
    """Values nbcoll's autograd keeps alive per token, per unit of width: an implementation detail, measured.

    Measured (``nbcoll.memory.stats()``, one rank, float64) by training HybridLM with 1 and 2 blocks, with and
    without recomputation, and widths, MLP ratios, heads and lengths varied one at a time:

    - ``outside``: per feature of the model's width, outside the split layers (norms' inputs and outputs,
      residual sums, the inputs the split layers keep);
    - ``inside``: per MLP feature (fc_in's output, gelu's input and output, fc_out's input);
    - ``scores``: per head and key position (plain attention keeps its scores and weights);
    - ``ring``: per feature, what ring attention keeps instead (q, k, v, its output and merge state);
    - ``kept``: per feature, what a recomputed block keeps (its input and the checkpoint's own copy);
    - ``head``: per feature on the last stage (final norm, the head's input);
    - ``logits``: per vocabulary column of this rank (logits, softmax terms of the loss).
    """
    return {"outside": 33.0, "inside": 11.5, "scores": 4.0, "ring": 12.0, "kept": 6.0, "head": 20.0, "logits": 5.0}


def stage_params(spec: ModelSpec, layout: Layout) -> int:
    """Parameters one rank holds: its stage's blocks split over tp, and its share of the embedding and head."""
    per_stage = spec.layers // layout.pp
    return per_stage * spec.layer_params() // layout.tp + 2 * spec.vocab * spec.hidden // layout.tp // layout.pp


def block_values(spec: ModelSpec, layout: Layout, tokens: int) -> float:
    """Values one block's forward keeps for backward on one rank, for ``tokens`` tokens of this rank's sequence."""
    c = autograd_values_per_token()
    h, f, tp = spec.hidden, spec.mlp, layout.tp
    outside = c["outside"] * h / (tp if layout.sp else 1)
    inside = c["inside"] * f / tp
    if layout.cp > 1:
        attention = c["ring"] * h / tp  # the ring keeps no scores: its backward recomputes them
    else:
        attention = c["scores"] * spec.heads / tp * spec.seq_len
    return tokens * (outside + inside + attention)


def stage_memory_bytes(spec: ModelSpec, layout: Layout, stage: int) -> int:
    """Bytes at the peak of a training step on a rank of pipeline stage ``stage``.

    The gradients are dropped before each step (``zero_grad``) and come back during backward, as the saved
    activations go: the peak is the larger of the two ends of backward, its start (every saved activation, and
    the head and loss's) and its end (every gradient, and the first block's activations).
    """
    c, value = autograd_values_per_token(), spec.bytes_per_value
    first, last = stage == 0, stage == layout.pp - 1
    per_stage = spec.layers // layout.pp
    params = per_stage * spec.layer_params() // layout.tp
    params += (spec.vocab * spec.hidden // layout.tp) * (int(first) + int(last))  # embedding, head
    state = params * value * (1 + spec.optimizer_states)  # parameters and momentum, alive all step long
    if layout.dp * layout.cp > 1 and not layout.recompute:
        state += params * value  # DistributedDataParallel's flat buckets
    tokens = spec.batch // (layout.dp * layout.chunks) * spec.seq_len // layout.cp
    whole = block_values(spec, layout, tokens)
    if layout.recompute:
        per_block = c["kept"] * spec.hidden / (layout.tp if layout.sp else 1) * tokens
    else:
        per_block = whole
    head = tokens * (c["head"] * spec.hidden + c["logits"] * spec.vocab / layout.tp) if last else 0.0
    in_flight = min(layout.chunks, layout.pp - stage)  # 1F1B: stage s holds pp - s micro-batches at most
    start = in_flight * per_stage * per_block + (max(head, whole) if layout.recompute else head)
    end = params + whole
    return int(state + max(start, end) * value)


def memory_bytes(spec: ModelSpec, layout: Layout) -> int:
    """Bytes per rank at the peak of a training step of ``spec`` under ``layout``: the largest over the stages."""
    return max(stage_memory_bytes(spec, layout, s) for s in range(layout.pp))


__all__ = ["autograd_values_per_token", "block_values", "memory_bytes", "stage_memory_bytes", "stage_params"]
