#!/usr/bin/env bash
# Fails when clang-format (Debian 12's, version 14) would change any tracked C++ or CUDA file.
# `scripts/check-format.sh --fix` reformats them instead.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang-format >/dev/null; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "oxmera: installing clang-format"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends clang-format >/dev/null
fi
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.h' '*.cu' '*.cuh')
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
if ! clang-format --dry-run --Werror "${files[@]}" 2>/tmp/oxmera-format.$$; then
  grep -E "^[^ ].*: (error|warning):" /tmp/oxmera-format.$$ | cut -d: -f1 | sort -u | sed 's/^/  needs clang-format: /'
  rm -f /tmp/oxmera-format.$$
  echo "format check failed ($(clang-format --version)): run scripts/check-format.sh --fix" >&2
  exit 1
fi
rm -f /tmp/oxmera-format.$$
echo "format check: ${#files[@]} files clean ($(clang-format --version | sed 's/.*version //'))"
