#!/usr/bin/env bash
# Fetches, on this (networked) Debian 12 machine, the .deb files that scripts/gpu-check.sh needs on a GPU
# machine that has no network and may lack them: GoogleTest, Google Benchmark, CLI11, nlohmann-json,
# ncurses (wide) and OpenBLAS (OpenMP build, for the CPU side of the CPU-vs-GPU comparisons).
# They land in shared/debs/ (about 8.5 MB; ignored by git; the device tool carries shared/ with the
# working tree). gpu-check.sh extracts them under /tmp on the GPU machine, never into /, and points CMake,
# the linker and the loader there. Run once before `run scripts/gpu-check.sh`; rerunning is cheap.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(libgtest-dev libbenchmark-dev libbenchmark1debian libcli11-dev nlohmann-json3-dev
      libncurses-dev libncurses6 libncursesw6 libtinfo6 libopenblas0-openmp)
mkdir -p shared/debs
cd shared/debs
have=1
for p in "${pkgs[@]}"; do compgen -G "${p}_*.deb" >/dev/null || have=0; done
if [ "$have" = 1 ]; then echo "gpu-deps: shared/debs already holds all ${#pkgs[@]} packages"; exit 0; fi
# apt-get download drops privileges to _apt, which cannot write here: fetch in a world-writable temp dir.
tmp=$(mktemp -d)
chmod 777 "$tmp"
(cd "$tmp" && apt-get download "${pkgs[@]}" >/dev/null 2>&1) || {
  apt-get update -qq && (cd "$tmp" && apt-get download "${pkgs[@]}")
}
mv "$tmp"/*.deb .
rm -rf "$tmp"
echo "gpu-deps: $(ls *.deb | wc -l) packages, $(du -sh . | cut -f1) in shared/debs"
