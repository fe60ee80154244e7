// libFuzzer harness: the `oxmera` command's recorded fixtures (tools/oxmera/fixtures.hpp). Byte 0 even: the
// dashboard's replay fixture (`oxmera train --replay FILE`), parsed and validated; odd: the doctor's report
// (`oxmera doctor --fixture FILE`), parsed and rendered. A malformed fixture must throw std::runtime_error (the
// command prints it and exits 1); another exception type is a finding, and so are an accepted replay whose
// per-epoch series disagree and a rendered report line wider than the doctor's 80 columns.
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

#include "doctor.hpp"
#include "fixtures.hpp"
#include "fuzz_common.hpp"

namespace {
// Columns of a UTF-8 line: its code points (the doctor writes no wide or combining characters of its own).
size_t columns(const std::string& line) {
  size_t n = 0;
  for (unsigned char c : line) n += (c & 0xC0) != 0x80;
  return n;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const bool doctor = size > 0 && (data[0] & 1) != 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + (size > 0 ? 1 : 0), size > 0 ? size - 1 : 0);
  return oxmera_fuzz::run_expecting<std::runtime_error>([&] {
    if (!doctor) {
      const oxmera_cli::ReplayFixture r = oxmera_cli::parse_replay_fixture(text, "the input");
      if (r.loss.empty() || r.accuracy.size() != r.loss.size() || r.throughput.size() != r.loss.size() ||
          r.batches_per_epoch < 1)
        oxmera_fuzz::finding("an accepted replay fixture has empty or mismatched per-epoch series");
      return;
    }
    const nlohmann::json report = oxmera_cli::parse_doctor_fixture(text, "the input");
    std::ostringstream out;
    oxmera_cli::render_report(report, out);
    std::istringstream lines(out.str());
    for (std::string line; std::getline(lines, line);)
      if (columns(line) > 80)
        oxmera_fuzz::finding("a rendered doctor line is " + std::to_string(columns(line)) + " columns wide: " + line);
  });
}
