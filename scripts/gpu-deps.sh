#!/usr/bin/env bash
# Fetches, on this (networked) Debian 12 machine, the .deb files that scripts/gpu-check.sh needs on a GPU
# machine that has no network and may lack them: GoogleTest, Google Benchmark, CLI11, nlohmann-json,
# ncurses (wide) and OpenBLAS (OpenMP build, for the CPU side of the CPU-vs-GPU comparisons) with the
# Fortran runtime it links (libgfortran5, libquadmath0), and zlib (the IDX/.npz readers).
# They land in shared/debs/ (about 10 MB; ignored by git; the device tool carries shared/ with the
# working tree). gpu-check.sh extracts them under /tmp on the GPU machine, never into /, and points CMake,
# the linker and the loader there. Run once before `run scripts/gpu-check.sh`; rerunning is cheap.
#
# After fetching, it checks the set is closed: every shared library and executable in the packages is
# extracted into an empty root, and each library it needs (ELF DT_NEEDED) must be in that root or in the
# base a GPU image with a C++ compiler has (glibc, libstdc++, libgcc_s, libgomp). A missing one fails
# with its name and who needs it, here, instead of a quiet fallback on the GPU machine.
# `scripts/gpu-deps.sh --check` runs only the check, on whatever .deb files the folder holds
# (GPU_DEPS_DIR, default shared/debs).
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(libgtest-dev libbenchmark-dev libbenchmark1debian libcli11-dev nlohmann-json3-dev
      libncurses-dev libncurses6 libncursesw6 libtinfo6 libopenblas0-openmp libgfortran5 libquadmath0 zlib1g-dev zlib1g)
# what any image with g++ provides (glibc, and the gcc runtime: libgcc-N-dev depends on libgomp1)
base_libs=" libc.so.6 libm.so.6 libdl.so.2 librt.so.1 libpthread.so.0 ld-linux-x86-64.so.2 "
base_libs+="libstdc++.so.6 libgcc_s.so.1 libgomp.so.1 "
check_only=0
[ "${1:-}" = "--check" ] && check_only=1

dir=${GPU_DEPS_DIR:-shared/debs}
mkdir -p "$dir"
cd "$dir"
if [ "$check_only" = 0 ]; then
  need=()
  for p in "${pkgs[@]}"; do compgen -G "${p}_*.deb" >/dev/null || need+=("$p"); done
  if [ ${#need[@]} -eq 0 ]; then
    echo "gpu-deps: shared/debs already holds all ${#pkgs[@]} packages"
  else
    # apt-get download drops privileges to _apt, which cannot write here: fetch in a world-writable temp dir.
    tmp=$(mktemp -d)
    chmod 777 "$tmp"
    (cd "$tmp" && apt-get download "${need[@]}" >/dev/null 2>&1) || {
      apt-get update -qq && (cd "$tmp" && apt-get download "${need[@]}")
    }
    mv "$tmp"/*.deb .
    rm -rf "$tmp"
    echo "gpu-deps: $(ls *.deb | wc -l) packages, $(du -sh . | cut -f1) in shared/debs"
  fi
fi

if [ "$check_only" = 0 ]; then
  for p in "${pkgs[@]}"; do
    compgen -G "${p}_*.deb" >/dev/null || { echo "gpu-deps: $dir lacks $p" >&2; exit 1; }
  done
fi
compgen -G "*.deb" >/dev/null || { echo "gpu-deps: no .deb files in $dir (run scripts/gpu-deps.sh)" >&2; exit 1; }
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
for f in *.deb; do dpkg-deb -x "$f" "$root"; done
provided=" "
while IFS= read -r f; do provided+="$(basename "$f") "; done < <(find "$root" \( -type f -o -type l \) -name '*.so*')
bad=0 checked=0
while IFS= read -r f; do
  head -c 4 "$f" | grep -q "ELF" || continue
  checked=$((checked + 1))
  while IFS= read -r lib; do
    if [[ "$provided" != *" $lib "* && "$base_libs" != *" $lib "* ]]; then
      echo "gpu-deps: ${f#"$root"} needs $lib, which no carried package provides" >&2
      bad=1
    fi
  done < <(readelf -d "$f" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
done < <(find "$root" -type f \( -name '*.so*' -o -perm -u+x \))
[ "$bad" = 0 ] || exit 1
echo "gpu-deps: closed: the $checked ELF files of $(ls *.deb | wc -l) packages need only each other and the base (glibc, libstdc++, libgcc_s, libgomp)"
