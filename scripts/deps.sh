#!/usr/bin/env bash
# Installs the Debian packages oxmera needs to build and test, when any is missing (sourced by the
# other scripts). Set OXMERA_WITH_TORCH=1 to also install python3-torch for the optional parity suite.
set -euo pipefail
oxmera_packages=(g++ cmake ninja-build ccache pkg-config libgtest-dev libbenchmark-dev
                 libopenblas-dev libopenblas0-openmp nlohmann-json3-dev libcli11-dev
                 libncurses-dev libvterm-dev zlib1g-dev libsleef-dev  # sleef: only bench/vec_math_vs_sleef
                 libopenmpi-dev openmpi-bin  # oxmera::distributed and its tests under mpirun
                 python3-sklearn  # the digits data set of the digits_cnn tests (pulls python3 and numpy)
                 clang-14 libclang-rt-14-dev libomp-14-dev)  # the sanitizer suite: ASan+UBSan+libFuzzer, LLVM OpenMP
if [ "${OXMERA_WITH_TORCH:-0}" = "1" ]; then
  oxmera_packages+=(python3 python3-numpy python3-torch)
fi
missing=()
for p in "${oxmera_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "oxmera: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
