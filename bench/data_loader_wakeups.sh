#!/usr/bin/env bash
# Counts the futex system calls of the training thread (its tid is the process id) and of the worker threads
# while bench/data_loader.cpp runs 21 digits epochs through the DataLoader with 2 workers and with 2 persistent
# workers (perf's syscalls:sys_enter_futex tracepoint; needs perf and the permission to trace). A futex call on the
# training thread is a wake-up of a worker (or a wait for a batch): what the loader costs the consumer beyond its
# hand-off on a VM where waking an idle vCPU is expensive (docs/LIMITATIONS.md, data loading).
# Usage: bench/data_loader_wakeups.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
ninja -C "$build" oxmera_data_loader_bench >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 tests/digits/export_digits.py "$work/digits" >/dev/null
echo "# $(date -u '+%F %H:%M UTC')  commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)  load $(cut -d' ' -f1-3 /proc/loadavg)"
for mode in loader2 persist2; do
  OMP_NUM_THREADS=1 MODES=prebuilt,$mode perf record -q -o "$work/perf.data" -e syscalls:sys_enter_futex -- \
    "$build/bench/oxmera_data_loader_bench" --data "$work/digits" 1 20 > "$work/out" 2>/dev/null
  perf script -i "$work/perf.data" -F pid,tid 2>/dev/null | sed 's/ //g' |
    awk -F/ -v m="$mode" '{ if ($1 == $2) main++; else other++ } END { printf "%s: futex calls, training thread %d, workers %d\n", m, main, other }'
done
