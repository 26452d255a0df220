"""Mixed-precision training, PyTorch's names: ``autocast`` runs products in float16 or bfloat16 and touchy ops in
float32 over float32 master parameters; ``GradScaler`` scales the loss so float16 gradients neither vanish nor
overflow unnoticed.

Example::

    scaler = nbcoll.amp.GradScaler()
    with nbcoll.amp.autocast(dtype=np.float16):
        loss = F.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
"""

from nbcoll.amp.autocast import autocast
from nbcoll.amp.grad_scaler import GradScaler

__all__ = ["GradScaler", "autocast"]
