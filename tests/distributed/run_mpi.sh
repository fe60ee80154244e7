#!/bin/sh
# run_mpi.sh MPIEXEC NP PROGRAM [ARGS...]: runs an MPI test program with NP ranks on this machine. Exits 77
# (ctest: skipped) with the reason when the launcher is absent. With Open MPI: --oversubscribe (more ranks than
# cores is fine for tests), as root (CI containers) --allow-run-as-root, and no CMA single-copy (below).
mpiexec=$1
np=$2
shift 2
if ! command -v "$mpiexec" >/dev/null 2>&1; then
  echo "skipped: the MPI launcher '$mpiexec' was not found (Debian: apt-get install openmpi-bin)"
  exit 77
fi
flags=""
if "$mpiexec" --version 2>&1 | grep -qi -e "Open MPI" -e "OpenRTE" -e "open-mpi"; then
  flags="--oversubscribe"
  if [ "$(id -u)" = 0 ]; then flags="$flags --allow-run-as-root"; fi
  # Containers often forbid the cross-process memory copy (CMA, ptrace) of the shared-memory transport; without
  # it Open MPI copies through shared buffers (the same results, a little slower for large messages).
  : "${OMPI_MCA_btl_vader_single_copy_mechanism:=none}"
  export OMPI_MCA_btl_vader_single_copy_mechanism
fi
# shellcheck disable=SC2086 # the flags are separate words
exec "$mpiexec" $flags -np "$np" "$@"
