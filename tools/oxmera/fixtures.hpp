#pragma once
// The CLI's recorded fixtures, parsed and validated without a terminal: the dashboard's replay fixture
// (`oxmera train --replay FILE`) and the doctor's report (`oxmera doctor --fixture FILE`). A malformed fixture
// throws std::runtime_error naming the file and the field; nothing else escapes (tests/fuzz/fuzz_cli_fixtures.cpp
// fuzzes both parsers and the doctor's renderer under that rule).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace oxmera_cli {

struct ReplayFixture {
  std::string device, model, memory_label;
  int64_t batches_per_epoch = 1;
  std::vector<double> loss, accuracy, throughput;  // one entry per epoch
};

// `name` is what messages call the input (the file's path).
ReplayFixture parse_replay_fixture(std::string_view text, const std::string& name);
nlohmann::json parse_doctor_fixture(std::string_view text, const std::string& name);
// The same from a file: std::runtime_error when it cannot be read.
ReplayFixture load_replay_fixture(const std::string& path);
nlohmann::json load_doctor_fixture(const std::string& path);

}  // namespace oxmera_cli
