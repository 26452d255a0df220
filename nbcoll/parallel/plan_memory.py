"""Memory per rank of a training step of :class:`~nbcoll.parallel.hybrid.HybridLM`, in the bytes that
``nbcoll.memory.stats()`` counts (what :meth:`~nbcoll.parallel.hybrid.HybridLM.step_peak_bytes` measures).

nbcoll's engine keeps every array a forward made until that backward is over (each op's inputs and outputs stay
referenced by the graph) and gives back only backward's own temporaries as it goes. So for cp = 1 the peak on a
rank of pipeline stage ``s`` is, exactly (:func:`stage_exact_bytes`), the state plus the largest of three moments
of 1F1B::

    state              parameters, momentum, DistributedDataParallel's flat buckets         :func:`state_values`
    first backward     the micro-batches in flight (their blocks' forwards, :func:`block_values`, or with
                       recomputation each block's input and the block being recomputed; the embedding, head
                       and loss's, :func:`outside_values`), the pipeline's buffers, and by the peak in the first
                       block's MLP backward its temporaries and the gradients made so far
                                                                                          :func:`first_backward_values`
    later forward      one micro-batch more (the schedule still holds the one backwarded last), every gradient
                                                                                          :func:`later_forward_values`
    later backward     as the first, every gradient already there                        :func:`later_backward_values`

all over the tokens of a micro-batch on this rank, ``t = batch / (dp x chunks) x seq_len``, and its 1 / tp of the
split layers (and of the positions under sp). How many arrays of each size the layers and the schedule make is an
implementation detail of nbcoll's layers, engine and pipeline: :func:`array_counts` holds those figures, read off
the allocations of one step, array by array. The peak's place (the first block's MLP backward) is where this model
puts it: it holds while that MLP's temporaries (5 t f / tp) outweigh attention backward's.

Under cp the ring's chunk pairs, hops and merges set the peak: those layouts keep the calibrated model of
:func:`calibrated_memory_bytes` (within 37% of the measured peak on the layouts of up to 4 ranks of a small LM).

Example::

    memory_bytes(spec, Layout(2, 1, 2, 4, recompute=True))            # bytes per rank, exact
    memory_bytes(spec, Layout(1, 1, 1, 1, cp=4, recompute=True))      # calibrated
"""

from __future__ import annotations

from nbcoll.parallel.plan_model import Layout, ModelSpec


def array_counts() -> dict[str, int]:
    """How many arrays of each size nbcoll's layers keep alive in a step: an implementation detail, counted.

    One block's forward, on ``t`` tokens (``f`` the MLP's width and ``h`` the model's, over tp where split):

    - ``mlp`` (t x f): fc_in's product and bias sum, GELU's tanh form (six products, two sums, the tanh);
    - ``width`` (t x h): both norms' outputs, out_proj's and fc_out's products, their all-reduces, their bias sums
      and the two residual sums; under sp ``width_sp`` (t x h): the two all-gathers, two transposes of each, the
      two products, and ``sharded_sp`` (t x h / tp): the sums, norms, two reduce-scatters, two transposes of each;
    - ``heads`` (t x h / tp): q, k and v's products and bias sums, their split into heads, k transposed,
      attention's output and its heads merged;
    - ``scores`` (batch x heads / tp x s x s): q k^T, scaled, masked, softmaxed; ``masks`` (s x s): the causal
      mask each attention call builds; ``scalars``: one-value constants of GELU and attention.

    Outside the blocks (t x h, t x width where width is h / tp under sp, t x V / tp, t): ``embed_*`` the lookup,
    its mask product, its all-reduce (under sp the split's two transposes), the ids Tensor and masks; ``head_*``
    the final norm (under sp the head's all-gather and its transposes), the head's product and bias sum, the
    loss's shifted logits, exponentials and product (``head_vocab``), its targets, masks, sums, logs and
    all-reduces (``head_tokens``). The pipeline's (t x width): ``pipe_gradient`` the gradient a stage before the
    last receives and its Tensor, ``pipe_activation`` the Tensor of the activation a later stage receives.

    At the first block's MLP backward: ``mlp_backward`` (t x f) GELU's gradient products and the engine's sums of
    two gradients, ``width_backward`` (t x width) the residual's sum of gradients, less ``freed_tokens`` (t) the
    loss's index array already given back; at the end of a loss's forward, ``loss_forward_tokens`` (t) its
    targets Tensor, row maxima and partial sums.
    """
    return {
        "mlp": 11,
        "width": 10,
        "width_sp": 8,
        "sharded_sp": 12,
        "heads": 12,
        "scores": 4,
        "masks": 1,
        "scalars": 5,
        "embed_width": 3,
        "embed_sharded": 0,
        "embed_width_sp": 4,
        "embed_sharded_sp": 1,
        "embed_tokens": 2,
        "head_width": 0,
        "head_sharded": 1,
        "head_width_sp": 2,
        "head_sharded_sp": 2,
        "head_vocab": 5,
        "head_tokens": 10,
        "pipe_gradient": 2,
        "pipe_activation": 1,
        "mlp_backward": 5,
        "width_backward": 1,
        "freed_tokens": 1,
        "loss_forward_tokens": 3,
    }


def tokens_per_rank(spec: ModelSpec, layout: Layout) -> int:
    """The tokens of one micro-batch on one rank: its share of the batch over dp, of the sequence over cp."""
    return spec.batch // (layout.dp * layout.chunks) * spec.seq_len // layout.cp


def block_params(spec: ModelSpec, layout: Layout) -> int:
    """Parameters of one block on one rank: q, k, v split by columns, out_proj by rows (its bias whole), fc_in
    by columns, fc_out by rows, two norms whole."""
    h, f, tp = spec.hidden, spec.mlp // layout.tp, layout.tp
    attention = 4 * h * (h // tp) + 3 * (h // tp) + h
    mlp = 2 * h * f + f + h
    return attention + mlp + 4 * h


def stage_params(spec: ModelSpec, layout: Layout) -> int:
    """Parameters one rank holds, as the step time's gradient all-reduce counts them: its stage's blocks split
    over tp, and its share of the embedding and head."""
    per_stage = spec.layers // layout.pp
    return per_stage * spec.layer_params() // layout.tp + 2 * spec.vocab * spec.hidden // layout.tp // layout.pp


def rank_params(spec: ModelSpec, layout: Layout, stage: int = 0) -> int:
    """Parameters of one rank of pipeline stage ``stage``, exactly: its blocks, and on the first stage the
    embedding's ``V / tp`` rows, on the last the final norm and the head's ``V / tp`` columns with their bias."""
    per_stage = spec.layers // layout.pp
    vocab = spec.vocab // layout.tp
    params = per_stage * block_params(spec, layout)
    if stage == 0:
        params += vocab * spec.hidden
    if stage == layout.pp - 1:
        params += 2 * spec.hidden + vocab * spec.hidden + vocab
    return params


def state_values(spec: ModelSpec, layout: Layout, stage: int = 0) -> int:
    """Values alive all step long: the parameters and the optimizer's state (gradients are dropped at the start
    of the step and counted where backward makes them), and DistributedDataParallel's flat buckets, one value per
    parameter, when it averages over replicas (with recomputation the gradients are averaged in place instead)."""
    params = rank_params(spec, layout, stage)
    buckets = params if layout.dp * layout.cp > 1 and not layout.recompute else 0
    return params * (1 + spec.optimizer_states) + buckets


def block_values(spec: ModelSpec, layout: Layout) -> int:
    """Values one block's forward leaves alive until backward ends, on this rank (:func:`array_counts`)."""
    c, t = array_counts(), tokens_per_rank(spec, layout)
    h, tp, s = spec.hidden, layout.tp, spec.seq_len
    f = spec.mlp // tp
    width = c["width_sp"] * t * h + c["sharded_sp"] * t * h // tp if layout.sp else c["width"] * t * h
    scores = c["scores"] * spec.batch // (layout.dp * layout.chunks) * (spec.heads // tp) * s * s
    weights = 4 * h * (h // tp) + 2 * h * f  # the transposed weights each matmul keeps for backward
    return c["mlp"] * t * f + width + c["heads"] * t * h // tp + scores + c["masks"] * s * s + weights + c["scalars"]


def _width(spec: ModelSpec, layout: Layout) -> int:
    """The width of a position outside the split layers on one rank: 1 / tp of it under sp."""
    return spec.hidden // layout.tp if layout.sp else spec.hidden


def outside_values(spec: ModelSpec, layout: Layout, stage: int = 0) -> int:
    """Values alive until backward ends outside the blocks: on the first stage the embedding's (and the ids), on
    the last the final norm, the head (and its weight's transpose, h x V / tp) and the loss (its per-column
    values, V / tp, and mean); under a pipeline, the loss's scaling by ``1 / chunks`` (a one-value constant and
    product)."""
    c, t = array_counts(), tokens_per_rank(spec, layout)
    h, vocab, width = spec.hidden, spec.vocab // layout.tp, _width(spec, layout)
    first, last, piped = stage == 0, stage == layout.pp - 1, layout.pp > 1
    sp = "_sp" if layout.sp else ""
    values = 0
    if first:
        values += c[f"embed_width{sp}"] * t * h + c[f"embed_sharded{sp}"] * t * width + c["embed_tokens"] * t
        values += t if piped else 0  # the pipeline makes each micro-batch's ids a Tensor of its own
    if last:
        values += c[f"head_width{sp}"] * t * h + c[f"head_sharded{sp}"] * t * width
        values += c["head_vocab"] * t * vocab + c["head_tokens"] * t + h * vocab + vocab + 1
        values += 2 if piped else 0
    return values


def pipeline_values(spec: ModelSpec, layout: Layout, stage: int) -> int:
    """Values of the pipeline's buffers at a backward: on a stage before the last, the gradient received for its
    output and the Tensor made of it; on a stage after the first, the Tensor made of the activation received."""
    if layout.pp == 1:
        return 0
    c, t, width = array_counts(), tokens_per_rank(spec, layout), _width(spec, layout)
    first, last = stage == 0, stage == layout.pp - 1
    return (c["pipe_gradient"] * (not last) + c["pipe_activation"] * (not first)) * t * width


def backward_peak_values(spec: ModelSpec, layout: Layout, stage: int = 0) -> int:
    """Values backward adds by its peak, in the first block's MLP backward (the largest temporaries, with the
    most gradients made): the gradients of the head and final norm (last stage), of the stage's later blocks and
    of the first block's fc_out, and the MLP backward's temporaries."""
    c, t = array_counts(), tokens_per_rank(spec, layout)
    h, vocab, f = spec.hidden, spec.vocab // layout.tp, spec.mlp // layout.tp
    first, last = stage == 0, stage == layout.pp - 1
    grads = (spec.layers // layout.pp - 1) * block_params(spec, layout) + h * f + h
    if last:
        grads += vocab * h + vocab + 2 * h
    # The engine's sum of two gradients of the first block's output is still alive there where a later block of
    # the stage reads that output twice (its norm and its residual), or where the loss's backward ran in the same
    # backward call (no pipeline, or recomputed blocks on the last stage).
    summed = spec.layers // layout.pp > 1 or (last and (first or layout.recompute))
    width = c["width_backward"] * t * _width(spec, layout) if summed else 0
    # Under sp the final norm's gradients are summed over tp in backward; on a last stage that recomputes, the
    # sum (h values) is still alive at the peak.
    norm = h if last and not first and layout.sp and layout.recompute else 0
    return grads + c["mlp_backward"] * t * f + width + norm - c["freed_tokens"] * t * last


def micro_batch_values(spec: ModelSpec, layout: Layout, stage: int) -> int:
    """Values one micro-batch's forward leaves alive on stage ``stage`` until its backward: every block's forward
    (with recomputation only each block's input, 1 / tp of it under sp) and the parts outside the blocks."""
    blocks = spec.layers // layout.pp
    if layout.recompute:
        kept = blocks * tokens_per_rank(spec, layout) * _width(spec, layout)
    else:
        kept = blocks * block_values(spec, layout)
    return kept + outside_values(spec, layout, stage)


def in_flight(layout: Layout, stage: int) -> int:
    """Micro-batches whose forward stage ``stage`` has run when its first backward starts: under 1F1B, one more
    than the stages after it, at most all of them."""
    return min(layout.chunks, layout.pp - stage)


def first_backward_values(spec: ModelSpec, layout: Layout, stage: int) -> int:
    """Values at the peak of the stage's first backward: the micro-batches in flight, the pipeline's buffers,
    the block being recomputed (with recomputation) and what backward has added by its peak."""
    recomputed = block_values(spec, layout) if layout.recompute else 0
    forwards = in_flight(layout, stage) * micro_batch_values(spec, layout, stage)
    return forwards + recomputed + pipeline_values(spec, layout, stage) + backward_peak_values(spec, layout, stage)


def later_forward_values(spec: ModelSpec, layout: Layout, stage: int) -> int:
    """Values at the end of a forward that follows a backward (1F1B's steady state), or 0 where none does (or
    with recomputation, whose forwards keep so little that a later backward, a block recomputed, is larger).

    The micro-batch last backwarded is still alive there: the schedule's local ``y`` (the stage's output) or,
    on the last stage, ``loss`` hold its graph until the next forward rebinds them. So one more micro-batch than
    in flight, every gradient of the stage, and: on the first stage, less the backwarded micro-batch's ids
    Tensor (rebound at the forward's start); on the last, the loss's row maxima, partial sums and targets Tensor
    of the forward that ends, less each micro-batch's ``1 / chunks`` scaling (not made yet, or rebound) and the
    backwarded one's index array; on a later stage, the buffer just received and the backwarded input's
    gradient."""
    if layout.recompute or layout.chunks <= in_flight(layout, stage):
        return 0
    c, t, width = array_counts(), tokens_per_rank(spec, layout), _width(spec, layout)
    first, last = stage == 0, stage == layout.pp - 1
    values = (in_flight(layout, stage) + 1) * micro_batch_values(spec, layout, stage) + rank_params(spec, layout, stage)
    values += (in_flight(layout, stage) + 1) * c["pipe_activation"] * t * width * (not first)
    if first:
        values -= t
    if last:  # the last forward is the largest: the schedule keeps the outputs of those before the two alive
        values += c["loss_forward_tokens"] * t - c["freed_tokens"] * t - 2 * (in_flight(layout, stage) + 1)
        values += (layout.chunks - 2) * t * spec.vocab // layout.tp
    if not first:
        values += 2 * t * width
    return values


def later_backward_values(spec: ModelSpec, layout: Layout, stage: int) -> int:
    """Values at the peak of the stage's second and later backwards, or 0 with one micro-batch: as at the first,
    with as many micro-batches in flight as 1F1B's steady state holds (or, with no steady state, all but the one
    backwarded first), but every gradient of the stage there already; on the last stage the schedule also keeps
    the earlier micro-batches' outputs (t x V / tp each; it returns them), and on a stage after the first one
    earlier input's gradient (t x width) is still alive."""
    if layout.chunks == 1:
        return 0
    t, width, first, last = tokens_per_rank(spec, layout), _width(spec, layout), stage == 0, stage == layout.pp - 1
    h, f, vocab = spec.hidden, spec.mlp // layout.tp, spec.vocab // layout.tp
    steady = layout.chunks > in_flight(layout, stage)
    fewer = 0 if steady else in_flight(layout, stage) - (layout.chunks - 1)
    made_by_peak = (spec.layers // layout.pp - 1) * block_params(spec, layout) + h * f + h
    made_by_peak += (vocab * h + vocab + 2 * h) if last else 0
    values = first_backward_values(spec, layout, stage) - fewer * micro_batch_values(spec, layout, stage)
    values += rank_params(spec, layout, stage) - made_by_peak
    values += (layout.chunks - 1) * t * vocab * last + t * width * (not first)
    return values


def stage_exact_bytes(spec: ModelSpec, layout: Layout, stage: int) -> int:
    """Bytes at the peak of a step on a rank of pipeline stage ``stage``, exactly, for cp = 1: the state, and
    the largest of the first backward's peak, a later forward's end and a later backward's peak."""
    peak = max(
        first_backward_values(spec, layout, stage),
        later_forward_values(spec, layout, stage),
        later_backward_values(spec, layout, stage),
    )
    return (state_values(spec, layout, stage) + peak) * spec.bytes_per_value


def exact_memory_bytes(spec: ModelSpec, layout: Layout) -> int:
    """Bytes per rank at the peak of a step, exactly, for cp = 1 (any dp, tp, pp, micro-batches, sp,
    recomputation): the largest over the stages of :func:`stage_exact_bytes`."""
    if layout.cp > 1:
        raise ValueError(f"layout: the exact model needs cp = 1, got {layout}")
    return max(stage_exact_bytes(spec, layout, s) for s in range(layout.pp))


def autograd_values_per_token() -> dict[str, float]:
    """Values per token and unit of width that the calibrated model (cp > 1) counts, fitted to measured peaks:
    ``outside`` per feature outside the split layers, ``inside`` per MLP feature, ``ring`` per feature of what
    ring attention keeps, ``kept`` per feature of a recomputed block, ``head`` and ``logits`` on the last stage
    per feature and per vocabulary column."""
    return {"outside": 33.0, "inside": 11.5, "ring": 12.0, "kept": 6.0, "head": 20.0, "logits": 5.0}


def calibrated_memory_bytes(spec: ModelSpec, layout: Layout) -> int:
    """Bytes per rank at the peak of a step under cp > 1, calibrated: over the stages, the state and the larger
    of backward's start (the blocks' saved values for the micro-batches in flight, the head and loss's) and its
    end (every gradient and one block's values)."""
    c, value = autograd_values_per_token(), spec.bytes_per_value
    h, tp, t = spec.hidden, layout.tp, tokens_per_rank(spec, layout)
    per_stage, peaks = spec.layers // layout.pp, []
    whole = t * (c["outside"] * h / (tp if layout.sp else 1) + c["inside"] * spec.mlp / tp + c["ring"] * h / tp)
    per_block = c["kept"] * h / (tp if layout.sp else 1) * t if layout.recompute else whole
    for stage in range(layout.pp):
        params = rank_params(spec, layout, stage)
        state = state_values(spec, layout, stage)
        head = t * (c["head"] * h + c["logits"] * spec.vocab / tp) if stage == layout.pp - 1 else 0.0
        start = in_flight(layout, stage) * per_stage * per_block + (max(head, whole) if layout.recompute else head)
        peaks.append(int((state + max(start, params + whole)) * value))
    return max(peaks)


def memory_bytes(spec: ModelSpec, layout: Layout) -> int:
    """Bytes per rank at the peak of a training step of ``spec`` under ``layout``: exact for cp = 1
    (:func:`exact_memory_bytes`), calibrated under cp (:func:`calibrated_memory_bytes`)."""
    if layout.cp == 1:
        return exact_memory_bytes(spec, layout)
    return calibrated_memory_bytes(spec, layout)


__all__ = [
    "array_counts",
    "autograd_values_per_token",
    "backward_peak_values",
    "block_params",
    "block_values",
    "calibrated_memory_bytes",
    "exact_memory_bytes",
    "first_backward_values",
    "in_flight",
    "later_backward_values",
    "later_forward_values",
    "memory_bytes",
    "micro_batch_values",
    "outside_values",
    "pipeline_values",
    "rank_params",
    "stage_exact_bytes",
    "stage_params",
    "state_values",
    "tokens_per_rank",
]
