"""One process that owns (or opens) an IpcBuffer and then ends in the way argv[1] says; used by the leak tests.

Modes: exit (returns without closing), raise (an exception), wait (prints, then sleeps until killed),
protocol (waits for a line on stdin, unlinks, says so, then sleeps until killed),
write NAME ROWS COLUMNS VALUE (opens NAME and fills it with VALUE with a kernel).
"""

import sys
import time

import numpy as np

import nbcoll
from nbcoll.ipc_memory import IpcBuffer, IpcHandleInfo
from nbcoll.kernels import elementwise

mode = sys.argv[1]
if mode == "write":
    name, rows, columns, value = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    peer = IpcBuffer.open(IpcHandleInfo("shm", name, (rows, columns), "int64"))
    values = nbcoll.to_device(np.full((rows, columns), -value, dtype=np.int64))
    elementwise.unary("neg", values, out=peer.array)
    peer.close()
    print("written", flush=True)
    sys.exit(0)

buffer = IpcBuffer.create((2, 3), np.float32, tag=mode)
buffer.array[0, 0] = 7.0
print(buffer.name, flush=True)
if mode == "exit":
    sys.exit(0)
if mode == "raise":
    raise RuntimeError("an error after create")
if mode == "protocol":
    sys.stdin.readline()  # every peer has attached
    buffer.unlink()
    print("unlinked", flush=True)
while True:
    time.sleep(0.1)
