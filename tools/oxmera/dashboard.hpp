#pragma once
// The full-screen training dashboard of `oxmera train --tui` and `--replay FILE` (ncursesw).
#include <string>

#include "demo_training.hpp"

namespace oxmera_cli {

// Trains the demo model with the live dashboard. Throws std::runtime_error when stdout is not a terminal.
// Returns 0 when the user quits (q / Esc / Ctrl-C), during training or on the done frame.
// SIGINT/SIGTERM/SIGHUP restore the terminal, then the process dies by that signal.
int run_tui_training(const TrainOptions& opt);

// Drives the same dashboard from a recorded JSON fixture, with no clock and no RNG: one frame per epoch,
// the done frame, then waits for q. A malformed fixture throws std::runtime_error naming the field
// (checked before the terminal is touched).
int run_replay(const std::string& path);

}  // namespace oxmera_cli
