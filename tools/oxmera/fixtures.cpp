#include "fixtures.hpp"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace oxmera_cli {
namespace {

std::string read_file(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(std::string(what) + ": cannot open fixture " + path);
  std::ostringstream s;
  s << f.rdbuf();
  if (f.bad()) throw std::runtime_error(std::string(what) + ": cannot read fixture " + path);
  return s.str();
}

nlohmann::json parse_json(std::string_view text, const std::string& name, const char* what) {
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(std::string(what) + ": fixture " + name + " is not valid JSON: " + e.what());
  }
}

const nlohmann::json& need(const nlohmann::json& j, const std::string& key, const std::string& where) {
  if (!j.contains(key)) throw std::runtime_error("replay: missing field '" + where + key + "'");
  return j.at(key);
}
std::string need_string(const nlohmann::json& j, const std::string& key) {
  const auto& v = need(j, key, "");
  if (!v.is_string()) throw std::runtime_error("replay: field '" + key + "' must be a string");
  return v.get<std::string>();
}
double need_number(const nlohmann::json& j, const std::string& key, const std::string& where, double lo, double hi) {
  const auto& v = need(j, key, where);
  if (!v.is_number()) throw std::runtime_error("replay: field '" + where + key + "' must be a number");
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", d);
    throw std::runtime_error("replay: field '" + where + key + "' is out of range (" + buf + ")");
  }
  return d;
}

}  // namespace

ReplayFixture parse_replay_fixture(std::string_view text, const std::string& name) {
  const nlohmann::json j = parse_json(text, name, "replay");
  if (!j.is_object()) throw std::runtime_error("replay: the top level of " + name + " must be a JSON object");
  ReplayFixture r;
  r.device = need_string(j, "device");
  r.model = need_string(j, "model");
  r.memory_label = need_string(j, "memory_label");
  const auto& b = need(j, "batches_per_epoch", "");
  if (!b.is_number_integer() || b.get<long long>() < 1 || b.get<long long>() > (1LL << 40))
    throw std::runtime_error("replay: field 'batches_per_epoch' must be a positive integer");
  r.batches_per_epoch = b.get<int64_t>();
  const auto& e = need(j, "epochs", "");
  if (!e.is_array()) throw std::runtime_error("replay: field 'epochs' must be an array");
  if (e.empty()) throw std::runtime_error("replay: field 'epochs' must not be empty");
  if (e.size() > 1000000) throw std::runtime_error("replay: field 'epochs' has too many entries");
  for (size_t i = 0; i < e.size(); ++i) {
    const std::string where = "epochs[" + std::to_string(i) + "].";
    if (!e[i].is_object())
      throw std::runtime_error("replay: field 'epochs[" + std::to_string(i) + "]' must be an object");
    r.loss.push_back(need_number(e[i], "loss", where, 0.0, 1e30));
    r.accuracy.push_back(need_number(e[i], "accuracy", where, 0.0, 1.0));
    r.throughput.push_back(need_number(e[i], "throughput", where, 0.0, 1e30));
  }
  return r;
}

nlohmann::json parse_doctor_fixture(std::string_view text, const std::string& name) {
  return parse_json(text, name, "doctor");
}

ReplayFixture load_replay_fixture(const std::string& path) {
  return parse_replay_fixture(read_file(path, "replay"), path);
}
nlohmann::json load_doctor_fixture(const std::string& path) {
  return parse_doctor_fixture(read_file(path, "doctor"), path);
}

}  // namespace oxmera_cli
