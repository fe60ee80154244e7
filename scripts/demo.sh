#!/usr/bin/env bash
# The main job: build oxmera (Release) and train the demo model with `oxmera train` (extra arguments go to
# it, e.g. --epochs 30 --metrics run.jsonl).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" >/dev/null
cmake --build build --target oxmera_cli
./build/tools/oxmera/oxmera train "$@"
