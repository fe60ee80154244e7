#!/usr/bin/env bash
# Checks the CUDA module's seams (ctest cuda_module_symbols): liboxmera_cuda.so leaves no oxmera symbol for the
# loading program to provide and exports nothing of oxmera but its entry point, and none of the given programs
# links a CUDA library (they load the module at run time).
# Usage: cuda_module_symbols.sh MODULE [PROGRAM...]
set -euo pipefail
module=$1
shift
fail=0
undefined=$(nm -D --undefined-only "$module" | awk '{print $NF}' | c++filt | grep -i oxmera || true)
if [ -n "$undefined" ]; then
  echo "FAIL: $module needs oxmera symbols from the program that loads it:"
  echo "$undefined"
  fail=1
fi
exported=$(nm -D --defined-only "$module" | awk '{print $NF}' | c++filt | grep -i oxmera || true)
if [ "$exported" != "oxmera_cuda_module_create" ]; then
  echo "FAIL: $module should export oxmera_cuda_module_create alone of oxmera's symbols; it exports:"
  echo "$exported"
  fail=1
fi
for program in "$@"; do
  needed=$(readelf -d "$program" | grep NEEDED | grep -E 'libcuda|libcudart|libcublas' || true)
  if [ -n "$needed" ]; then
    echo "FAIL: $program links a CUDA library at load time:"
    echo "$needed"
    fail=1
  fi
done
[ "$fail" = 0 ] && echo "PASS: the module needs nothing of oxmera, exports its entry alone; $# program(s) link no CUDA library"
exit "$fail"
