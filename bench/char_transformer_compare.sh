#!/usr/bin/env bash
# oxmera vs PyTorch 1.13 (Debian python3-torch): time per training step of the char-level transformer LM of
# issue #13 (bench/char_transformer.cpp and its twin bench/char_transformer_torch.py, identical initial weights,
# tokens and batches). Alternates oxmera / torch ROUNDS times at THREADS threads on both sides; prints the median
# us/step of each, the median (min/max) of the per-round ratios oxmera/torch (< 1: oxmera faster), and the largest
# relative difference between the two sides' losses over the steps (the same computation in f32).
# LAYERS=1: the blocks are nn::TransformerEncoderLayer / torch.nn.TransformerEncoderLayer (issue #15's figure).
# Usage: bench/char_transformer_compare.sh [build-dir] ; env ROUNDS (5), STEPS (60), THREADS (1), LAYERS (0)
[ "${LAYERS:-0}" = 1 ] && export STEP_ARGS=layers
exec "$(dirname "$0")/step_compare.sh" chartf oxmera_char_transformer bench/char_transformer_torch.py "$@"
