#pragma once
#include <nlohmann/json.hpp>
#include <ostream>

namespace oxmera_cli {
// Probes this machine and build: host, build, devices, capabilities.
nlohmann::json probe_report();
// Renders a report (probed or recorded) as text no wider than 80 columns. Throws std::runtime_error naming
// the missing or mistyped field for a malformed report.
void render_report(const nlohmann::json& report, std::ostream& out);
}  // namespace oxmera_cli
