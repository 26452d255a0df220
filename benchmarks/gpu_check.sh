#!/usr/bin/env bash
# The GPU check in one script, at most 7 minutes on a machine with one NVIDIA GPU. In this order:
#   smoke              one kernel and one 2-rank all-reduce over CUDA IPC (40 s)
#   gpu_tests          every gpu-marked test
#   suite              the whole test suite on cuda, in 8 workers (pytest-xdist), without -x, stopped at its limit
#   kernels            kernel GB/s against the fastest platform copy measured in the same run
#   launch_cost        the host's cost of each piece of a step: a launch, a slice, a synchronize
#   all_reduce_Nranks  nbcoll.perf all-reduce busbw over CUDA IPC on 2 and 4 ranks
#   direct_path_3ranks every direct collective on registered and plain buffers over CUDA IPC: exact, one copy a hop
#   profile_2ranks     a cProfile of rank 0 in a 2-rank all-reduce: driver calls, numba-cuda, nbcoll's own Python
#   device_collectives the all-reduce as one kernel (one-GPU world, 2 and 4 ranks, 8 B to 256 MiB): busbw and
#                      latency beside the host path and the device copy ceiling, #wrong
#
#   benchmarks/gpu_check.sh OUTDIR             on a machine with an NVIDIA GPU
#   benchmarks/gpu_check.sh --dry-run OUTDIR   the same harness on any CPU: each step a tiny stand-in
#                                               (sim/numpy), plus a drill that checks the kill on timeout
#
# Every step runs in a session of its own (setsid); at its limit the whole session, and every process below the
# step even in other sessions (mpiexec's ranks), gets SIGTERM, then SIGKILL. Steps write as they go: a log per
# step, JSON rewritten after every measurement, summary.txt and summary.json after every step.
# Nothing is installed: PYTHON=... (default python3) must have numpy, numba, numba-cuda and mpi4py, and find
# nbcoll (the script puts the repository on PYTHONPATH).
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
rm -f "$OUTDIR/summary.json"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
PYTHON="${PYTHON:-python3}"
STEPS_PY="$REPO/benchmarks/gpu_check_steps.py"
BUDGET=420      # seconds: the whole check, the kill grace of every step included
GRACE=3         # seconds between SIGTERM and SIGKILL
PREFLIGHT=20
FAILED=0

say() { echo "[gpu_check] $*" | tee -a "$SUMMARY"; }

# ---- the plan: name, limit in seconds, what it runs on the GPU -------------------------------------------------
PLAN=(
    "smoke|40|benchmarks/gpu_smoke.py: an exact int32 kernel, then one all-reduce of 4 MiB over CUDA IPC, 2 ranks"
    "gpu_tests|55|pytest -m gpu tests/ (every gpu-marked test), 50 s per test"
    "suite|77|pytest -m 'not gpu' tests/ on cuda, 8 workers, device tests first, no -x, 45 s per test, cut at the limit"
    "kernels|30|benchmarks/kernels.py: kernel GB/s and % of the fastest platform copy of the same run"
    "launch_cost|10|benchmarks/launch_cost.py: a launch, a slice, a synchronize, beside numba-cuda's own launch"
    "all_reduce_2ranks|25|nbcoll.perf all_reduce 8 B to 16 MiB over CUDA IPC on 2 ranks: busbw"
    "all_reduce_4ranks|25|nbcoll.perf all_reduce 8 B to 16 MiB over CUDA IPC on 4 ranks: busbw"
    "direct_path_3ranks|22|tests/mpi_scripts/direct_path.py on 3 ranks over CUDA IPC: exact, one copy a byte and hop"
    "profile_2ranks|20|benchmarks/profile_collective.py: where a 2-rank all-reduce's time goes, 8 B to 16 MiB"
    "device_collectives|60|benchmarks/device_collectives.py: one-kernel ring all-reduce, 2 and 4 ranks, 8 B to 256 MiB"
)
TOTAL=$((PREFLIGHT + GRACE))
say "plan (limits in seconds; each step may take $GRACE s more to be killed):"
say "$(printf '  %-18s %4s  %s' preflight "$PREFLIGHT" 'packages, mpiexec, a GPU; info.txt (python -m nbcoll info)')"
for entry in "${PLAN[@]}"; do
    IFS='|' read -r name limit what <<< "$entry"
    TOTAL=$((TOTAL + limit + GRACE))
    say "$(printf '  %-18s %4s  %s' "$name" "$limit" "$what")"
done
say "plan total: $TOTAL s of a $BUDGET s budget"
if [ "$TOTAL" -gt "$BUDGET" ]; then
    say "the plan exceeds its budget: shorten a step"
    exit 2
fi

# ---- running one step ------------------------------------------------------------------------------------------
descendants() {  # every process below $1, found through parent links (a process in another session included)
    local child
    for child in $(ps -e -o pid=,ppid= 2> /dev/null | awk -v parent="$1" '$2 == parent { print $1 }'); do
        echo "$child"
        descendants "$child"
    done
}

stop_tree() {  # SIGTERM, grace, SIGKILL: to the step's session group and to every process below it
    local leader="$1" pids="" signal
    for signal in TERM KILL; do
        pids="$pids $leader $(descendants "$leader")"  # again before SIGKILL: what was started meanwhile
        kill "-$signal" -- "-$leader" 2> /dev/null
        for pid in $pids; do kill "-$signal" "$pid" 2> /dev/null; done
        [ "$signal" = TERM ] && sleep "$KILL_GRACE"
    done
}

SETSID="$(command -v setsid || true)"
run_step() {  # name, limit in seconds, command...: log to OUTDIR/name.log, verdict and figures to the summary
    local name="$1" limit="$2"
    shift 2
    local started=$SECONDS status verdict figures
    if [ -n "$SETSID" ]; then
        "$SETSID" "$@" > "$OUTDIR/$name.log" 2>&1 < /dev/null &
    else
        "$@" > "$OUTDIR/$name.log" 2>&1 < /dev/null &
    fi
    local pid=$!
    while kill -0 "$pid" 2> /dev/null && [ $((SECONDS - started)) -lt "$limit" ]; do
        sleep 0.2
    done
    if kill -0 "$pid" 2> /dev/null; then
        stop_tree "$pid"
        wait "$pid" 2> /dev/null
        status=124
        verdict="TIMEOUT (killed at ${limit} s)"
    else
        wait "$pid"
        status=$?
        verdict=PASS
        [ $status = 0 ] || verdict="FAIL (exit $status)"
    fi
    figures="$("$PYTHON" "$STEPS_PY" report "$OUTDIR" "$name" "${verdict%% *}" $((SECONDS - started)) "$limit" 2>&1)"
    say "$name: $verdict in $((SECONDS - started)) s; $figures (log: $name.log)"
    LAST_STATUS=$status
    return $status
}

# ---- what the machine has ---------------------------------------------------------------------------------------
if ! command -v "$PYTHON" > /dev/null 2>&1; then
    say "MISSING: no '$PYTHON' interpreter; set PYTHON=/path/to/python3" >&2
    exit 3
fi
say "$(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname); python: $(command -v "$PYTHON") ($("$PYTHON" -V 2>&1))"
say "repository: $REPO; output: $OUTDIR; mode: $([ $DRY_RUN = 1 ] && echo 'dry run (CPU stand-ins)' || echo 'GPU')"
[ -n "$SETSID" ] || say "note: no setsid; steps share this script's session (processes below a step are still killed)"
MODE=gpu
KILL_GRACE=$GRACE
[ $DRY_RUN = 1 ] && MODE=dry && KILL_GRACE=1  # nothing on the CPU needs long to clean up
if [ $DRY_RUN = 1 ]; then export NBCOLL_BACKEND=sim; else export NBCOLL_BACKEND=cuda; fi
# A dry run rehearses the flags, not the timings, on a CPU that may be busy with other work (a test suite in
# parallel): its steps get three times the planned limits.
SCALE=1
[ $DRY_RUN = 1 ] && SCALE=3
run_step preflight "$((PREFLIGHT * SCALE))" "$PYTHON" "$STEPS_PY" preflight "$MODE" "$OUTDIR/info.txt"
PREFLIGHT_STATUS=$?
while IFS= read -r line; do say "  $line"; done < "$OUTDIR/preflight.log"
if [ $PREFLIGHT_STATUS != 0 ]; then
    say "stopping: install what is MISSING above, then run again"
    exit 3
fi
HAVE_PYTEST=1
grep -q "no pytest:" "$OUTDIR/preflight.log" && HAVE_PYTEST=0
HAVE_TIMEOUT=1
grep -q "no pytest-timeout" "$OUTDIR/preflight.log" && HAVE_TIMEOUT=0
HAVE_XDIST=1
grep -q "no pytest-xdist" "$OUTDIR/preflight.log" && HAVE_XDIST=0

# ---- the steps -------------------------------------------------------------------------------------------------
cd "$REPO" || exit 3
limit_of() {  # a step's limit, from the plan
    local entry
    for entry in "${PLAN[@]}"; do
        [ "${entry%%|*}" = "$1" ] && { echo $(($(echo "$entry" | cut -d'|' -f2) * SCALE)); return; }
    done
}
# The suite is planned to be cut at its limit: a cut with tests passed and none failed is no failure of the check.
suite_cut_cleanly() {
    [ "$LAST_STATUS" = 124 ] && "$PYTHON" "$STEPS_PY" cut_cleanly "$OUTDIR" suite \
        && say "suite: cut at its limit as planned, with nothing failed before the cut"
}
per_test() { [ $HAVE_TIMEOUT = 0 ] || echo "--timeout=$1"; }  # pytest-timeout's limit for each test
# pytest-xdist's workers, a test file each at a time: 8 on a GPU machine (in one run, the suite got 93% of the way
# in 165 s with 8, 32% in 75 s with one), 2 in the dry run, which only rehearses the flags.
workers() { [ $HAVE_XDIST = 0 ] || echo "-n $1 --dist loadfile"; }
PYTEST=("$PYTHON" -m pytest -v -p no:cacheprovider -rfE)
# The device tests come first, so that a suite cut at its limit has run the ones that matter most on a GPU.
FIRST=(tests/test_gpu_path.py tests/test_backend_and_memory.py tests/test_copy.py tests/test_elementwise.py
       tests/test_combine.py tests/test_reduction.py tests/test_matmul.py tests/test_softmax.py
       tests/test_transpose.py tests/test_ipc_memory.py tests/test_comm_mpi.py tests/test_collectives.py)
LAST=(tests/test_docs.py tests/test_benchmarks.py)  # CPU work only: the Sphinx build, the benchmarks' smoke runs
SUITE=("${FIRST[@]}")
for file in tests/test_*.py; do
    case " ${FIRST[*]} ${LAST[*]} " in *" $file "*) ;; *) SUITE+=("$file") ;; esac
done
SUITE+=("${LAST[@]}")

if [ $DRY_RUN = 1 ]; then
    run_step smoke "$(limit_of smoke)" "$PYTHON" benchmarks/gpu_smoke.py --out "$OUTDIR" --count 1000 || FAILED=1
    if [ $HAVE_PYTEST = 1 ]; then
        run_step gpu_tests "$(limit_of gpu_tests)" "${PYTEST[@]}" $(per_test 60) -m gpu tests/test_copy.py \
            || FAILED=1
        run_step suite "$(limit_of suite)" "${PYTEST[@]}" $(per_test 45) $(workers 2) -m "not gpu" \
            tests/test_gpu_path.py -k "bytes or local_rank or reposted" || suite_cut_cleanly || FAILED=1
    fi
    NBCOLL_BACKEND=numpy run_step kernels "$(limit_of kernels)" "$PYTHON" benchmarks/kernels.py --tiny \
        --out "$OUTDIR" || FAILED=1
    run_step launch_cost "$(limit_of launch_cost)" "$PYTHON" benchmarks/launch_cost.py --count 2 --rounds 1 \
        --large 1024 --out "$OUTDIR" || FAILED=1
    PERF_SIZES=(-b 8 -e 64 -f 8 -n 1 -w 0)
    PERF_BACKEND=numpy
    PROFILE=(--sizes 8 --iters 2)
    DEVICE=(--dry-run)  # the simulator: 8 and 64 bytes, the host path in the in-process world
else
    run_step smoke "$(limit_of smoke)" "$PYTHON" benchmarks/gpu_smoke.py --out "$OUTDIR" || FAILED=1
    if [ $HAVE_PYTEST = 1 ]; then
        run_step gpu_tests "$(limit_of gpu_tests)" "${PYTEST[@]}" $(per_test 50) -m gpu tests || FAILED=1
        # Not the tests of this script itself: they would run its dry run inside this run.
        run_step suite "$(limit_of suite)" "${PYTEST[@]}" $(per_test 45) $(workers 8) -m "not gpu" \
            -k "not gpu_check" "${SUITE[@]}" || suite_cut_cleanly || FAILED=1
    fi
    run_step kernels "$(limit_of kernels)" "$PYTHON" benchmarks/kernels.py --out "$OUTDIR" || FAILED=1
    run_step launch_cost "$(limit_of launch_cost)" "$PYTHON" benchmarks/launch_cost.py --count 1000 --rounds 3 \
        --out "$OUTDIR" || FAILED=1
    PERF_SIZES=(-b 8 -e 16M -f 8 -n 5 -w 2)
    PERF_BACKEND=cuda
    PROFILE=(--sizes 8,256K,16M --iters 20)
    DEVICE=(--repeats 5 --iters 10)  # 8 B to 256 MiB; the host path over CUDA IPC
fi
for nranks in 2 4; do
    name="all_reduce_${nranks}ranks"
    limit="$(limit_of "$name")"
    NBCOLL_BACKEND=$PERF_BACKEND run_step "$name" "$limit" "$PYTHON" -m nbcoll.launch -n "$nranks" \
        --timeout $((limit - 5)) nbcoll/perf/__main__.py all_reduce "${PERF_SIZES[@]}" --transport ipc \
        -J "$OUTDIR/$name.json" || FAILED=1
done
# The direct path (registered buffers read in place) with windows of 256 bytes, so that each case takes rounds.
DIRECT_RANKS=3
[ $DRY_RUN = 1 ] && DIRECT_RANKS=2
limit="$(limit_of direct_path_3ranks)"
NBCOLL_BACKEND=$PERF_BACKEND NBCOLL_BUFFSIZE=256 NBCOLL_LL_BYTES=0 NBCOLL_TIMEOUT=$((limit - 5)) \
    run_step direct_path_3ranks "$limit" "$PYTHON" -m nbcoll.launch -n $DIRECT_RANKS --timeout $((limit - 3)) \
    tests/mpi_scripts/direct_path.py || FAILED=1
# The tuner's choice, as nbcoll.perf ran it; the summary gives each size's time per call under the profiler.
run_step profile_2ranks "$(limit_of profile_2ranks)" "$PYTHON" benchmarks/profile_collective.py --ranks 2 \
    --backend "$PERF_BACKEND" --algo tuner "${PROFILE[@]}" --out "$OUTDIR" || FAILED=1
# The collective as one kernel: every rank a group of threads of one block on this GPU (the simulator in a dry run).
run_step device_collectives "$(limit_of device_collectives)" "$PYTHON" benchmarks/device_collectives.py \
    "${DEVICE[@]}" --out "$OUTDIR" || FAILED=1

if [ $DRY_RUN = 1 ]; then
    # The drill: a step that outlives its limit and leaves a process in a session of its own, as mpiexec's ranks
    # are. The harness must kill both; the drill passes when it timed out and nothing of it is left.
    run_step kill_drill 3 "$PYTHON" -c "
import json, subprocess, sys, time
orphan = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], start_new_session=True)
json.dump({'orphan_pid': orphan.pid}, open(sys.argv[1], 'w'))
time.sleep(120)" "$OUTDIR/kill_drill.json"
    DRILL_STATUS=$?
    ORPHAN="$("$PYTHON" -c "import json, sys; print(json.load(open(sys.argv[1]))['orphan_pid'])" \
        "$OUTDIR/kill_drill.json" 2> /dev/null)"
    running() { ps -o stat= -p "$1" 2> /dev/null | grep -qv Z; }  # a zombie is dead, only not yet reaped
    for _ in 1 2 3 4 5 6 7 8 9 10; do [ -n "$ORPHAN" ] && running "$ORPHAN" && sleep 0.3; done
    if [ $DRILL_STATUS = 124 ] && [ -n "$ORPHAN" ] && ! running "$ORPHAN"; then
        say "kill_drill: ok (the step timed out; its process in another session, pid $ORPHAN, is gone)"
    else
        left="$(running "${ORPHAN:-0}" && echo ', still running')"
        say "kill_drill: FAILED (status $DRILL_STATUS, orphan pid '${ORPHAN:-?}'$left)"
        [ -n "$ORPHAN" ] && kill -KILL "$ORPHAN" 2> /dev/null
        FAILED=1
    fi
fi

say "---- summary ($SECONDS s in all; figures in summary.json) ----"
grep -E "^\[gpu_check\] [a-z_0-9]+: (PASS|FAIL|TIMEOUT|ok|FAILED)" "$SUMMARY" | sed 's/^\[gpu_check\] /  /' \
    > "$OUTDIR/.verdicts"
while IFS= read -r line; do say "$line"; done < "$OUTDIR/.verdicts"
rm -f "$OUTDIR/.verdicts"
if [ $FAILED = 0 ]; then say "all steps passed"; else say "some steps FAILED: read their logs in $OUTDIR"; fi
exit $FAILED
