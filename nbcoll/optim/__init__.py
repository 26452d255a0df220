"""Optimizers, learning-rate schedules and gradient clipping; every update rule is one fused kernel per parameter.

Example::

    optimizer = nbcoll.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = nbcoll.optim.CosineWarmupLR(optimizer, warmup_steps=10, total_steps=100)
    loss.backward()
    nbcoll.optim.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
"""

from nbcoll.optim.adam import Adam, AdamW
from nbcoll.optim.clip_grad import clip_grad_norm_
from nbcoll.optim.lamb import LAMB
from nbcoll.optim.lars import LARS
from nbcoll.optim.lr_scheduler import CosineWarmupLR, LinearLR, LRScheduler, SequentialLR, StepLR
from nbcoll.optim.optimizer import Optimizer
from nbcoll.optim.sgd import SGD

__all__ = ["SGD", "Adam", "AdamW", "CosineWarmupLR", "LRScheduler", "Optimizer", "StepLR", "clip_grad_norm_"]
__all__ += ["LAMB", "LARS", "LinearLR", "SequentialLR"]
