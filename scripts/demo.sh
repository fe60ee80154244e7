#!/usr/bin/env bash
# The main job: build oxmera (Release) and train the demo model.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" >/dev/null
cmake --build build --target train_mlp
./build/examples/train_mlp "$@"
