"""Training utilities above the layers: activation checkpointing.

Example::

    from nbcoll.utils import checkpoint, checkpoint_wrapper
    y = checkpoint(block, x)                  # block's activations are recomputed in backward, not kept
    model = nn.Sequential(*[checkpoint_wrapper(nn.TransformerBlock(64, 4)) for _ in range(8)])
"""

from nbcoll.utils.checkpoint import checkpoint, checkpoint_wrapper

__all__ = ["checkpoint", "checkpoint_wrapper"]
