#pragma once
// Module printing shared by the layers' extra_repr (torch's repr conventions).
#include <sstream>
#include <string>

namespace oxmera::nn {

// A float as Python's repr prints it: "0.1", "1e-05", and "1.0" rather than "1".
inline std::string py_float(double v) {
  std::ostringstream os;
  os << v;
  std::string s = os.str();
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

}  // namespace oxmera::nn
