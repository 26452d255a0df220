#!/usr/bin/env bash
# The GPU check in one script: the cuda-backend test subset, the kernel benchmarks, and nbcoll.perf for
# all-reduce and all-gather on 2 and 4 processes sharing the GPU over CUDA IPC. Everything lands in OUTDIR.
#
#   benchmarks/gpu_check.sh OUTDIR             on a machine with an NVIDIA GPU (under 8 minutes)
#   benchmarks/gpu_check.sh --dry-run OUTDIR   the same steps on the CUDA simulator with tiny sizes, any machine
#
# Nothing is installed: the script uses the machine's Python (PYTHON=..., default python3) with numpy, numba,
# numba-cuda and mpi4py, finds nbcoll through PYTHONPATH, and says what is missing before it starts.
# pytest and matplotlib are optional: without them the test step is skipped, and plots are not drawn.
set -u

usage() { echo "usage: $0 [--dry-run] OUTDIR" >&2; exit 2; }
DRY_RUN=0
OUTDIR=""
for arg in "$@"; do
    case "$arg" in
        --dry-run) DRY_RUN=1 ;;
        -h|--help) usage ;;
        -*) echo "unknown option: $arg" >&2; usage ;;
        *) [ -z "$OUTDIR" ] || usage; OUTDIR="$arg" ;;
    esac
done
[ -n "$OUTDIR" ] || usage

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$OUTDIR" || { echo "cannot create $OUTDIR" >&2; exit 2; }
OUTDIR="$(cd "$OUTDIR" && pwd)"
SUMMARY="$OUTDIR/summary.txt"
: > "$SUMMARY"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
PYTHON="${PYTHON:-python3}"
FAILED=0

say() { echo "[gpu_check] $*" | tee -a "$SUMMARY"; }
missing() { say "MISSING: $*"; FAILED=1; }

# ---- what the machine has -----------------------------------------------------------------------------------
if ! command -v "$PYTHON" > /dev/null 2>&1; then
    echo "[gpu_check] MISSING: no '$PYTHON' interpreter; set PYTHON=/path/to/python3" >&2
    exit 3
fi
say "$(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname); python: $(command -v "$PYTHON") ($("$PYTHON" -V 2>&1))"
say "repository: $REPO; output: $OUTDIR; mode: $([ $DRY_RUN = 1 ] && echo 'dry run (sim, tiny sizes)' || echo 'GPU')"

for module in numpy numba mpi4py; do
    "$PYTHON" -c "import $module" > /dev/null 2>&1 || missing "python package '$module' ($PYTHON -m pip install $module)"
done
"$PYTHON" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('numba.cuda') is None)" \
    > /dev/null 2>&1 || missing "python package 'numba-cuda' (pip install 'numba-cuda[cu13]')"
HAVE_PYTEST=1
"$PYTHON" -c "import pytest" > /dev/null 2>&1 || { HAVE_PYTEST=0; say "note: no pytest; the test step will be skipped"; }
[ $FAILED = 0 ] && { "$PYTHON" -c "import nbcoll" > /dev/null 2>&1 || missing "nbcoll does not import from $REPO"; }

MPIEXEC="${NBCOLL_MPIEXEC:-}"
if [ -z "$MPIEXEC" ]; then
    MPIEXEC="$(dirname "$(command -v "$PYTHON")")/mpiexec"
    [ -x "$MPIEXEC" ] || MPIEXEC="$(command -v mpiexec 2> /dev/null || true)"
fi
if [ -z "$MPIEXEC" ] || [ ! -x "$MPIEXEC" ]; then
    missing "no MPI runtime: no mpiexec next to $PYTHON nor on PATH (install MPICH or Open MPI, or pip install mpich)"
elif ! "$PYTHON" -c "from mpi4py import MPI; MPI.Get_library_version()" > /dev/null 2>&1; then
    missing "mpi4py cannot load an MPI library (install MPICH or Open MPI, or pip install mpich)"
fi
MPI_FLAGS=""
if [ -n "$MPIEXEC" ] && "$MPIEXEC" --version 2>&1 | grep -q -e "Open MPI" -e "OpenRTE"; then
    MPI_FLAGS="--oversubscribe"
fi

if [ $DRY_RUN = 1 ]; then
    export NBCOLL_BACKEND=sim
else
    export NBCOLL_BACKEND=cuda
    if [ $FAILED = 0 ] && [ "$("$PYTHON" -c 'from nbcoll.backend import gpu_count; print(gpu_count())' 2>/dev/null)" = "0" ]; then
        missing "no CUDA GPU or driver found (run with --dry-run to rehearse on the simulator)"
    fi
fi
if [ $FAILED != 0 ]; then
    say "stopping: install what is MISSING above, then run again"
    exit 3
fi
"$PYTHON" -m nbcoll info > "$OUTDIR/info.txt" 2>&1 && say "wrote info.txt (backend, device, versions)"

# ---- the steps ------------------------------------------------------------------------------------------------
RESULTS=()
run_step() {  # name, seconds allowed, command...
    local name="$1" limit="$2"
    shift 2
    local started=$SECONDS status
    if command -v timeout > /dev/null 2>&1; then
        timeout "$limit" "$@" > "$OUTDIR/$name.log" 2>&1
    else
        "$@" > "$OUTDIR/$name.log" 2>&1
    fi
    status=$?
    local verdict=PASS
    [ $status = 0 ] || { verdict="FAIL (exit $status$([ $status = 124 ] && echo ", over ${limit}s"))"; FAILED=1; }
    RESULTS+=("$name: $verdict, $((SECONDS - started)) s")
    say "$name: $verdict in $((SECONDS - started)) s (log: $name.log)"
}

cd "$REPO" || exit 3
if [ $DRY_RUN = 1 ]; then
    TESTS=(tests/test_backend_and_memory.py tests/test_combine.py)
    KERNEL_ARGS=(--tiny)
    PERF_SIZES=(-b 8 -e 64 -f 8 -n 1 -w 0)
else
    TESTS=(tests/test_backend_and_memory.py tests/test_elementwise.py tests/test_combine.py tests/test_copy.py
           tests/test_reduction.py tests/test_softmax.py tests/test_transpose.py tests/test_matmul.py
           tests/test_ipc_memory.py)
    KERNEL_ARGS=()
    PERF_SIZES=(-b 8 -e 16M -f 4 -n 10 -w 3)
fi

if [ $HAVE_PYTEST = 1 ]; then
    run_step tests 200 "$PYTHON" -m pytest -q -x -p no:cacheprovider "${TESTS[@]}"
else
    RESULTS+=("tests: SKIPPED (no pytest)")
fi
run_step kernels 90 "$PYTHON" benchmarks/kernels.py "${KERNEL_ARGS[@]}" --out "$OUTDIR"
for nprocs in 2 4; do
    for collective in all_reduce all_gather; do
        name="perf_${collective}_${nprocs}ranks"
        run_step "$name" 45 "$MPIEXEC" $MPI_FLAGS -n "$nprocs" "$PYTHON" -m nbcoll.perf "$collective" \
            "${PERF_SIZES[@]}" --transport ipc -J "$OUTDIR/$name.json"
    done
done

say "---- summary ----"
for line in "${RESULTS[@]}"; do say "$line"; done
if [ $FAILED = 0 ]; then say "all steps passed"; else say "some steps FAILED: read their logs in $OUTDIR"; fi
exit $FAILED
