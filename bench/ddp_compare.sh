#!/usr/bin/env bash
# oxmera vs PyTorch 1.13 (Debian python3-torch): time per data-parallel training step of nn::DistributedDataParallel
# (under mpirun, bench/ddp_step.cpp) and torch's DistributedDataParallel with the gloo backend (bench/ddp_torch.py),
# 2 processes x THREADS threads, global batch 256, cross entropy, SGD, from the same weights and data: the 2-32-32-2
# tanh MLP ("mlp") and a 784-1024-1024-10 relu MLP ("wide"). Per model, bench/step_compare.sh alternates the two
# sides ROUNDS times and prints the median us/step, the per-round ratios oxmera/torch (< 1: oxmera faster), the
# rank-0 losses' largest relative difference, and the overlap line of each side: forward+backward without
# communication (no_sync), with DDP's reduction, the all-reduce alone, and hidden = (local + allreduce - ddp) /
# allreduce, the share of the all-reduce time that backward hid.
# Usage: bench/ddp_compare.sh [build-dir] ; env ROUNDS (5), STEPS (60), THREADS (1), MODELS ("mlp wide"),
#        MPIEXEC (mpirun), BUCKET_MB, GRAD_AS_BUCKET_VIEW (1: both sides). Needs an MPI build (OXMERA_WITH_MPI) and Open MPI's launcher.
set -euo pipefail
cd "$(dirname "$0")/.."
launch="sh tests/distributed/run_mpi.sh ${MPIEXEC:-mpirun} 2"  # --oversubscribe, and --allow-run-as-root as root
# Open MPI's shared-memory transport with its default single-copy mechanism (CMA) unless the caller chooses; the
# tests turn it off for containers that forbid it (ptrace), which makes large all-reduces ~4x slower.
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-cma}
for model in ${MODELS:-mlp wide}; do
  STEP_ARGS=$model OX_LAUNCH=$launch bench/step_compare.sh "ddp-$model" oxmera_ddp_step bench/ddp_torch.py "$@"
done
