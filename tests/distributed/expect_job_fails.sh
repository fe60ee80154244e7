#!/bin/sh
# expect_job_fails.sh MPIEXEC PROGRAM MODE: runs PROGRAM --fault=MODE on 3 ranks (run_mpi.sh) and passes when
# the job ends non-zero and no surviving rank got past its collective (the program prints "FAULT-TEST" then);
# for MODE=stall, rank 0 must also have printed the typed timeout.
# Bounded time: ctest's TIMEOUT fails a hang. Exit 77 (skipped) passes through.
here=$(dirname "$0")
out=$(sh "$here/run_mpi.sh" "$1" 3 "$2" "--fault=$3" 2>&1)
rc=$?
echo "$out" | tail -n 20
[ "$rc" = 77 ] && exit 77
if [ "$rc" = 0 ]; then echo "FAIL: the job exited 0 although rank 1 died ($3)"; exit 1; fi
if echo "$out" | grep -q "FAULT-TEST"; then echo "FAIL: a rank outlived rank 1 and returned from its collective"; exit 1; fi
if [ "$3" = stall ] && ! echo "$out" | grep -q "TIMED-OUT rank 0: \[Timeout\] distributed: all_reduce .* on world .* did not complete within 2000 ms (2 s).*set_default_timeout"; then
  echo "FAIL: rank 0 did not report the typed timeout"; exit 1
fi
echo "ok: the job ended with status $rc after rank 1 failed ($3)"
