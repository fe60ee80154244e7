#!/usr/bin/env bash
# oxmera vs PyTorch 1.13 (Debian python3-torch): time per training step of nn::LSTM vs torch.nn.LSTM (hidden 64,
# input 64, sequence 32, batch 16, mse loss, SGD; bench/lstm_step.cpp and its twin bench/lstm_torch.py from the
# same initial weights and data). Alternates oxmera / torch ROUNDS times at THREADS threads; prints the median
# us/step of each, the median (min/max) of the per-round ratios oxmera/torch (< 1: oxmera faster), and the largest
# relative difference between the two sides' losses.
# Usage: bench/lstm_compare.sh [build-dir] ; env ROUNDS (5), STEPS (60), THREADS (1)
exec "$(dirname "$0")/step_compare.sh" lstm oxmera_lstm_step bench/lstm_torch.py "$@"
