#pragma once
// `oxmera train --model transformer|lstm`: character-level language models on a text file, the architectures
// and defaults of examples/transformer_lm.cpp and examples/lstm_lm.cpp (which stay standalone programs).
//   transformer: token + learned position embeddings (context 64), 2 pre-LayerNorm causal
//                nn::TransformerEncoderLayer blocks (d_model 64, 4 heads, ff 256, GELU, dropout 0), final
//                LayerNorm, head tied to the token embedding; AdamW (weight decay 0.1 on matrices only)
//   lstm:        Embedding(V, 32) - LSTM(32, 128) - Linear(128, V), windows of 32; Adam
// Both: cross entropy on the next character, gradient norm clipped to 1. The file's distinct bytes are the
// vocabulary; its first 90 % is the training text and the last 10 % is held out: accuracy is next-character
// accuracy on (at most 32) consecutive held-out windows. An epoch is --steps-per-epoch steps of --batch windows
// at offsets drawn (SplitMix64, from the seed and the epoch) from the training text.
#include <string>

#include "demo_training.hpp"
#include "train_task.hpp"

namespace oxmera::workloads {

inline constexpr const char* kDefaultCharLmText = "/usr/share/common-licenses/GPL-3";  // an empty --data

bool is_char_lm(const std::string& model);          // transformer or lstm
int64_t char_lm_context(const std::string& model);  // the window length: 64 (transformer), 32 (lstm)
const char* char_lm_description(const std::string& model);
// The task on `device`; InvalidArgument for an unreadable or too short --data file.
TrainTask char_lm_task(const TrainOptions& opt, const Device& device);

}  // namespace oxmera::workloads
