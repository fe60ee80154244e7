// `oxmera doctor`: what this machine and this build can do.
#include "doctor.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include <oxmera/oxmera.hpp>

namespace oxmera_cli {
namespace {

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) return line.substr(p + 2);
    }
  }
  return "unknown";
}

double memory_gib() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  long kb = 0;
  while (f >> key >> kb) {
    if (key == "MemTotal:") return static_cast<double>(kb) / (1024.0 * 1024.0);
    f.ignore(256, '\n');
  }
  return 0.0;
}

std::string os_name() {
  std::ifstream f("/etc/os-release");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("PRETTY_NAME=", 0) == 0) {
      std::string v = line.substr(12);
      if (v.size() >= 2 && v.front() == '"') v = v.substr(1, v.size() - 2);
      return v;
    }
  }
  return "Linux";
}

const nlohmann::json& field(const nlohmann::json& j, const char* key, const char* where) {
  if (!j.is_object() || !j.contains(key))
    throw std::runtime_error(std::string("report: missing field '") + where + "." + key + "'");
  return j.at(key);
}
std::string str(const nlohmann::json& j, const char* key, const char* where) {
  const auto& v = field(j, key, where);
  if (!v.is_string())
    throw std::runtime_error(std::string("report: field '") + where + "." + key + "' must be a string");
  return v.get<std::string>();
}
std::string num(const nlohmann::json& j, const char* key, const char* where, int precision = 0) {
  const auto& v = field(j, key, where);
  if (!v.is_number())
    throw std::runtime_error(std::string("report: field '") + where + "." + key + "' must be a number");
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(precision);
  os << v.get<double>();
  return os.str();
}
bool boolean(const nlohmann::json& j, const char* key, const char* where) {
  const auto& v = field(j, key, where);
  if (!v.is_boolean())
    throw std::runtime_error(std::string("report: field '") + where + "." + key + "' must be true or false");
  return v.get<bool>();
}

// "  label    value", wrapping the value to fit 80 columns.
void row(std::ostream& out, const std::string& label, const std::string& value) {
  const size_t indent = 16, width = 80 - indent;
  std::string l = "  " + label;
  l.resize(indent, ' ');
  std::string rest = value;
  bool first = true;
  while (first || !rest.empty()) {
    std::string chunk = rest.substr(0, width);
    if (rest.size() > width) {
      size_t sp = chunk.rfind(' ');
      if (sp != std::string::npos && sp > width / 2) chunk = chunk.substr(0, sp);
    }
    rest = rest.substr(std::min(rest.size(), chunk.size()));
    while (!rest.empty() && rest.front() == ' ') rest.erase(0, 1);
    out << (first ? l : std::string(indent, ' ')) << chunk << '\n';
    first = false;
  }
}

}  // namespace

nlohmann::json probe_report() {
  using nlohmann::json;
  struct utsname u {};
  uname(&u);
  json host = {{"os", os_name()},
               {"kernel", std::string(u.sysname) + " " + u.release},
               {"arch", u.machine},
               {"cpu", cpu_model()},
               {"cores", static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN))},
               {"simd", oxmera::cpu_kernel_isa()},
               {"memory_gib", memory_gib()}};
  const auto bi = oxmera::build_info();
  json build = {
      {"version", bi.version},
      {"compiler", bi.compiler},
      {"blas", oxmera::blas_name()},
      {"cuda", bi.cuda_compiled},
      {"mpi", oxmera::distributed::is_available() ? oxmera::distributed::backend_description() : "not compiled in"},
      {"cuda_collectives", oxmera::distributed::cuda_transport()}};
  json devices = json::array();
  devices.push_back(
      {{"name", "cpu"}, {"available", true}, {"detail", std::to_string(oxmera::get_num_threads()) + " threads"}});
  oxmera::init();
  const auto gpu = oxmera::Device::cuda();
  devices.push_back(
      {{"name", "cuda:0"}, {"available", oxmera::device_available(gpu)}, {"detail", oxmera::device_description(gpu)}});
  json caps = json::array({
      {{"area", "tensor"}, {"status", "strided views, broadcasting, overflow-checked shapes"}},
      {{"area", "dtypes"}, {"status", "f32, f64 (cpu), i64, u8 (storage)"}},
      {{"area", "linalg"},
       {"status",
        "cholesky, logdet, det, solve, inverse, eigh (f64 arithmetic; on cuda, matrices up to 32x32 "
        "on the device, eigh on the host)"}},
      {{"area", "einsum"}, {"status", "any operands, implicit output, diagonals, ellipsis"}},
      {{"area", "indexing"}, {"status", "index_select/add, gather, scatter_add, cat, pad, one_hot"}},
      {{"area", "autograd"},
       {"status", "reverse mode, gradcheck, gradgradcheck, retain_grad, higher order (create_graph)"}},
      {{"area", "nn"}, {"status", "Linear, Conv2d, pools, Embedding, norms, Dropout, Sequential"}},
      {{"area", "losses"}, {"status", "mse, cross_entropy, nll, bce_with_logits"}},
      {{"area", "optim"}, {"status", "SGD, Adam, AdamW, RMSprop, schedulers, fused step"}},
      {{"area", "checkpoints"}, {"status", "safetensors save/load (atomic, validated)"}},
      {{"area", "distributed"},
       {"status", oxmera::distributed::is_available()
                      ? "MPI collectives on CPU tensors; CUDA tensors staged through host memory (no NCCL yet)"
                      : "not compiled in (configure with -DOXMERA_MPI=ON and an MPI installed)"}},
  });
  return json{{"host", host}, {"build", build}, {"devices", devices}, {"capabilities", caps}};
}

void render_report(const nlohmann::json& r, std::ostream& out) {
  if (!r.is_object()) throw std::runtime_error("report: the top level must be a JSON object");
  const auto& host = field(r, "host", "report");
  const auto& build = field(r, "build", "report");
  const auto& devices = field(r, "devices", "report");
  const auto& caps = field(r, "capabilities", "report");
  if (!devices.is_array()) throw std::runtime_error("report: field 'report.devices' must be an array");
  if (!caps.is_array()) throw std::runtime_error("report: field 'report.capabilities' must be an array");
  out << "oxmera doctor\n\nHost\n";
  row(out, "os", str(host, "os", "host"));
  row(out, "kernel", str(host, "kernel", "host"));
  row(out, "arch", str(host, "arch", "host"));
  row(out, "cpu", str(host, "cpu", "host"));
  row(out, "cores", num(host, "cores", "host"));
  row(out, "simd", str(host, "simd", "host"));
  row(out, "memory", num(host, "memory_gib", "host", 1) + " GiB");
  out << "\nBuild\n";
  row(out, "version", str(build, "version", "build"));
  row(out, "compiler", str(build, "compiler", "build"));
  row(out, "blas", str(build, "blas", "build"));
  row(out, "cuda", boolean(build, "cuda", "build") ? "compiled in" : "not compiled in");
  // Reports recorded before oxmera::distributed have no "mpi" field.
  if (build.is_object() && build.contains("mpi")) row(out, "mpi", str(build, "mpi", "build"));
  // ... and before NCCL: how CUDA tensors' collectives travel.
  if (build.is_object() && build.contains("cuda_collectives"))
    row(out, "cuda comms", str(build, "cuda_collectives", "build"));
  out << "\nDevices\n";
  for (const auto& d : devices) {
    row(out, str(d, "name", "devices[]"),
        std::string(boolean(d, "available", "devices[]") ? "available: " : "unavailable: ") +
            str(d, "detail", "devices[]"));
  }
  out << "\nCapabilities\n";
  for (const auto& c : caps) row(out, str(c, "area", "capabilities[]"), str(c, "status", "capabilities[]"));
}

}  // namespace oxmera_cli
