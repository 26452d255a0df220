"""The ``mpiexec`` job of a launch: the flags each MPI needs, run it in a session of its own, stop it and every rank
it started, and remove the MPI shared memory that ranks which never reached ``MPI_Finalize`` left behind.

Each rank writes its pid to ``rank<r>.pid`` in the job's output folder (:mod:`nbcoll.launch_rank`); stopping the
job signals mpiexec's process group and then each rank's own, because MPICH's hydra starts each rank in a session
of its own.

Example::

    >>> import subprocess, sys, tempfile
    >>> from nbcoll.launch_job import run_job
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     run_job([sys.executable, "-c", "print(1)"], {}, f"{folder}/log", folder, timeout=30)
    (0, False)
"""

from __future__ import annotations

import functools
import glob
import os
import signal
import subprocess
import time
from pathlib import Path

BINDINGS = ("core", "hwthread", "socket", "numa", "none")
"""What ``launch(bind_to=...)`` may pin each rank to, as ``mpiexec -bind-to`` names them."""


@functools.cache
def _is_open_mpi(mpiexec: str) -> bool:
    try:
        version = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "Open MPI" in version or "OpenRTE" in version


def mpiexec_flags(mpiexec: str, bind_to: str | None = None) -> tuple[str, ...]:
    """Open MPI refuses more ranks than cores unless told, and more than one rank bound to a core; MPICH (hydra)
    needs nothing. ``bind_to`` pins the ranks to cores (or hardware threads, sockets...) in turn, rank ``r`` to the
    ``r``-th modulo their number, with each MPI's own flag; ``None`` leaves the placement to the MPI's default."""
    if _is_open_mpi(mpiexec):
        binding = ("--bind-to", f"{bind_to}:overload-allowed" if bind_to != "none" else "none") if bind_to else ()
        return ("--oversubscribe", *binding)
    return ("-bind-to", bind_to) if bind_to else ()


KILL_GRACE_SECONDS = 3.0
"""After SIGTERM, how long the ranks get to clean up (shared memory, files) before SIGKILL."""
ORPHAN_RECHECK_SECONDS = 0.2
"""An unmapped MPI file is looked at again after this long before it is removed."""
MPI_SEGMENTS = "/dev/shm/mpich_shm_*"
"""Where MPICH keeps the shared memory of a job's ranks on one node; it removes it in ``MPI_Finalize``."""


def run_job(
    command: list[str], environ: dict[str, str], log_path: str, output_dir: str, timeout: float | None
) -> tuple[int | None, bool]:
    """Run ``mpiexec`` in a session of its own; on timeout (or Ctrl-C here) kill it and every rank it started."""
    started = time.time()
    try:
        with open(log_path, "wb") as log:
            job = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=environ,
                start_new_session=True,
            )  # fmt: skip
            try:
                returncode = job.wait(timeout)
            except subprocess.TimeoutExpired:
                stop_job(job, output_dir)
                return None, True
            except BaseException:
                stop_job(job, output_dir)
                raise
        if alive_ranks(output_dir):  # mpiexec returned while ranks it ended (after a failure) are on their way
            stop_job(job, output_dir)
        return returncode, False
    finally:  # however the job ended: even ranks that exit 0 may skip MPI_Finalize (os._exit)
        remove_orphaned_mpi_segments(started)


def remove_orphaned_mpi_segments(since: float, pattern: str = MPI_SEGMENTS) -> list[str]:
    """Remove the MPI shared-memory files made since ``since`` that no process maps any more; return them.

    A rank that is killed, crashes, or ends with ``os._exit`` because its peers are gone (``MPI_Finalize`` would
    wait for them) never reaches ``MPI_Finalize``, so MPICH's segment of its node stays in
    ``/dev/shm`` (1-3 MB a job), and the memory with it, until the machine restarts: a test suite that kills
    ranks on purpose would leave hundreds of megabytes a run. A file still mapped belongs to a job that runs.
    """
    made = [path for path in glob.glob(pattern) if _modified_since(path, since)]
    unmapped = set(made) - _mapped_files() if made else set()
    if not unmapped:
        return []
    time.sleep(ORPHAN_RECHECK_SECONDS)  # a job starting right now may not have mapped its new file yet
    removed = []
    for path in sorted(unmapped - _mapped_files()):
        try:
            os.unlink(path)
            removed.append(path)
        except OSError:  # another cleaner, or not ours
            pass
    return removed


def _modified_since(path: str, since: float) -> bool:
    try:
        return os.stat(path).st_mtime >= since - 1.0  # the clock of the file system may round down
    except OSError:
        return False


def _mapped_files() -> set[str]:
    """Every file some process of this machine has mapped (``/proc/*/maps``, where there is one)."""
    mapped: set[str] = set()
    for maps in glob.glob("/proc/[0-9]*/maps"):
        try:
            with open(maps) as lines:
                mapped.update(line.split(maxsplit=5)[5].strip() for line in lines if "/dev/shm/" in line)
        except (OSError, IndexError):
            continue
    return mapped


def stop_job(job: subprocess.Popen, output_dir: str) -> None:
    """SIGTERM, a grace period, then SIGKILL: first to mpiexec's process group, then to every rank's own.

    MPICH's hydra starts each rank in a session of its own, so killing mpiexec's group alone can leave ranks
    running; each rank wrote its pid, and is the leader of its group, so its children go with it.
    """
    for signum in (signal.SIGTERM, signal.SIGKILL):
        _signal_group(job.pid, signum)
        for pid in alive_ranks(output_dir):
            _signal_group(pid, signum)
        deadline = time.monotonic() + KILL_GRACE_SECONDS
        while time.monotonic() < deadline and (job.poll() is None or alive_ranks(output_dir)):
            time.sleep(0.05)
    job.wait()


def _signal_group(pid: int, signum: int) -> None:
    """Signal the process group led by ``pid``, or the process alone where it leads none."""
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass
    except PermissionError:
        pass


def _rank_pids(output_dir: str) -> list[int]:
    texts = (path.read_text().strip() for path in Path(output_dir).glob("rank*.pid"))
    return [int(text) for text in texts if text.isdigit()]


def alive_ranks(output_dir: str) -> list[int]:
    return [pid for pid in _rank_pids(output_dir) if _is_running_rank(pid, output_dir)]


def _is_running_rank(pid: int, output_dir: str) -> bool:
    """Whether ``pid`` still runs a rank of this job.

    Pids are reused, so where ``/proc`` exists the process's command line must also name this job's output folder
    (a zombie's command line is empty: it counts as ended).
    """
    if os.path.isdir("/proc/self"):
        try:
            return output_dir.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True
