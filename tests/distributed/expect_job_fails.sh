#!/bin/sh
# expect_job_fails.sh MPIEXEC PROGRAM MODE: runs PROGRAM --fault=MODE on 3 ranks (run_mpi.sh) and passes when
# the job ends non-zero and no surviving rank got past its collective (the program prints "FAULT-TEST" then).
# MODE: kill, throw, stall (rank 1 fails while the others wait in an all_reduce), ddp-kill, ddp-throw, ddp-stall
# (rank 1 fails in the middle of a DistributedDataParallel backward, with bucket all-reduces in flight),
# ddp-between-kill (rank 1 dies between two DDP steps), ddp-nosync-kill (rank 1 dies in a no_sync() backward: the
# others fail in the next, synchronising step).
# For the stall modes rank 0 must also have printed the typed timeout.
# A MODE ending in "-recover" runs MODE without the suffix while Open MPI's mpirun is told not to end the job
# when a process dies (OMPI_MCA_orte_enable_recovery=1, as a launcher that does not clean up would): then
# ranks 0 and 2 must each print the typed timeout and exit with status 3 themselves, the scenario's status for
# it (each rank runs under a shell that writes its exit status to a file: mpirun's own status is 0 in that mode,
# and a line printed on the shared output can be interleaved with another rank's).
# Bounded time: ctest's TIMEOUT fails a hang. Exit 77 (skipped) passes through.
here=$(dirname "$0")
mode=$3
recover=no
case "$mode" in
  *-recover)
    mode=${mode%-recover}
    recover=yes
    OMPI_MCA_orte_enable_recovery=1
    export OMPI_MCA_orte_enable_recovery
    ;;
esac
start=$(date +%s)
if [ "$recover" = yes ]; then
  statuses=$(mktemp -d)
  trap 'rm -rf "$statuses"' EXIT
  # shellcheck disable=SC2016 # expanded by the rank's shell
  out=$(sh "$here/run_mpi.sh" "$1" 3 sh -c '"$0" "$1"; echo $? >"$2/exit.${OMPI_COMM_WORLD_RANK:-unknown}"' "$2" \
    "--fault=$mode" "$statuses" 2>&1)
else
  out=$(sh "$here/run_mpi.sh" "$1" 3 "$2" "--fault=$mode" 2>&1)
fi
rc=$?
end=$(date +%s)
echo "$out" | grep -v "PMIX ERROR: BAD-PARAM" | tail -n 20
[ "$rc" = 77 ] && exit 77
typed="TIMED-OUT rank RANK: \[Timeout\] distributed: all_reduce .* on world .* did not complete within 2000 ms (2 s).*set_default_timeout"
if [ "$recover" = yes ]; then
  for r in 0 2; do
    if ! echo "$out" | grep -q "$(echo "$typed" | sed "s/RANK/$r/")"; then
      echo "FAIL: rank $r did not report the typed timeout"; exit 1
    fi
    status=$(cat "$statuses/exit.$r" 2>/dev/null)
    echo "rank $r exited with status ${status:-(none recorded)}"
    if [ "$status" != 3 ]; then
      echo "FAIL: rank $r did not end with the scenario's status 3 for the typed timeout"; exit 1
    fi
  done
elif [ "$rc" = 0 ]; then
  echo "FAIL: the job exited 0 although rank 1 died ($3)"; exit 1
fi
if echo "$out" | grep -q "FAULT-TEST"; then echo "FAIL: a rank outlived rank 1 and returned from its collective"; exit 1; fi
case "$mode" in
  *stall)
    if ! echo "$out" | grep -q "$(echo "$typed" | sed "s/RANK/0/")"; then
      echo "FAIL: rank 0 did not report the typed timeout"; exit 1
    fi
    ;;
esac
echo "ok: the job ended (mpirun status $rc) after rank 1 failed ($3), $((end - start)) s after it started"
