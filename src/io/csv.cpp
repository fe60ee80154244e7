// CSV-of-numbers reader; the accepted syntax is described in include/oxmera/formats.hpp.
#include <charconv>
#include <cmath>
#include <limits>
#include <string_view>

#include "io/format_io.hpp"
#include "oxmera/formats.hpp"

namespace oxmera {
namespace {
using namespace io_detail;

struct Field {
  std::string text;
  size_t column;  // 1-based character column where the field starts
  bool quoted;
};

// Splits one line (without its line break) into fields; quotes follow RFC 4180 ("" inside quotes is a quote).
std::vector<Field> split_line(std::string_view line, char delim, const char* fn, const std::string& where,
                              size_t lineno) {
  std::vector<Field> out;
  size_t i = 0;
  for (;;) {
    Field f{{}, i + 1, false};
    size_t j = i;
    while (j < line.size() && line[j] == ' ') ++j;
    if (j < line.size() && line[j] == '"') {
      f.quoted = true;
      ++j;
      for (;;) {
        OXM_CHECK(j < line.size(), Io, fn, ": ", where, ": line ", lineno, ", column ", f.column,
                  ": unterminated quoted field (oxmera does not read line breaks inside quotes)");
        if (line[j] == '"') {
          if (j + 1 < line.size() && line[j + 1] == '"') {
            f.text += '"';
            j += 2;
            continue;
          }
          ++j;
          break;
        }
        f.text += line[j++];
      }
      while (j < line.size() && line[j] == ' ') ++j;
      OXM_CHECK(j == line.size() || line[j] == delim, Io, fn, ": ", where, ": line ", lineno, ", column ", j + 1,
                ": text after the closing quote of the field that begins at column ", f.column);
    } else {
      const size_t end = line.find(delim, i);
      f.text = std::string(line.substr(i, end == std::string_view::npos ? std::string_view::npos : end - i));
      j = end == std::string_view::npos ? line.size() : end;
    }
    out.push_back(std::move(f));
    if (j >= line.size()) break;
    i = j + 1;  // past the delimiter
  }
  return out;
}

template <class T>
bool parse_number(std::string_view s, T& v) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v, std::chars_format::general);
  if (r.ec == std::errc::result_out_of_range && r.ptr == s.data() + s.size()) {
    // from_chars leaves v unset on overflow / underflow: the rounded result is then ±inf or ±0.
    const bool neg = s.front() == '-';
    const T inf = std::numeric_limits<T>::infinity();
    double d = 0;
    const auto rd = std::from_chars(s.data(), s.data() + s.size(), d, std::chars_format::general);
    if (rd.ec == std::errc()) {  // an f32 out of range that f64 holds
      v = std::abs(d) > static_cast<double>(std::numeric_limits<T>::max()) ? (neg ? -inf : inf) : static_cast<T>(d);
      return true;
    }
    const auto e = s.find_first_of("eE");
    const bool tiny = e != std::string_view::npos && e + 1 < s.size() && s[e + 1] == '-';
    v = tiny ? (neg ? -T(0) : T(0)) : (neg ? -inf : inf);
    return true;
  }
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

bool blank(std::string_view s) { return s.find_first_not_of(" \t") == std::string_view::npos; }

void check_options(const CsvOptions& options, const char* fn, const std::string& path) {
  OXM_CHECK(options.dtype == DType::F32 || options.dtype == DType::F64, UnsupportedDType, fn, ": ", path, ": dtype ",
            dtype_name(options.dtype), " (CSV loads as f32 or f64)");
  OXM_CHECK(options.delimiter != '"' && options.delimiter != '\n' && options.delimiter != '\r', InvalidArgument, fn,
            ": ", path, ": the delimiter cannot be a quote or a line break");
}

// The text of a file or of a string; `fn` and `path` name the function and the source in messages.
CsvTable parse_csv(std::string_view text, const CsvOptions& options, const char* fn, const std::string& path) {
  if (text.size() >= 3 && text.compare(0, 3, "\xEF\xBB\xBF") == 0) text.remove_prefix(3);  // UTF-8 byte order mark

  CsvTable out;
  std::vector<double> f64;
  std::vector<float> f32;
  size_t ncols = 0;
  bool have_cols = false;
  int64_t rows = 0;
  size_t lineno = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string_view line(text.data() + pos, nl - pos);
    pos = nl + 1;
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (blank(line)) continue;
    auto fields = split_line(line, options.delimiter, fn, path, lineno);
    if (!have_cols) {
      ncols = fields.size();
      have_cols = true;
      if (options.has_header) {
        for (auto& fd : fields) out.columns.push_back(std::move(fd.text));
        continue;
      }
    }
    OXM_CHECK(fields.size() == ncols, Io, fn, ": ", path, ": line ", lineno, " has ", fields.size(), " fields, the ",
              options.has_header ? "header has " : "first row has ", ncols);
    for (size_t c = 0; c < fields.size(); ++c) {
      const Field& fd = fields[c];
      const bool missing = blank(fd.text);
      if (missing) {
        OXM_CHECK(options.missing_as_nan, Io, fn, ": ", path, ": line ", lineno, ", column ", fd.column, " (field ",
                  c + 1, out.columns.empty() ? std::string() : detail::concat(" '", out.columns[c], "'"),
                  "): missing value (set CsvOptions::missing_as_nan to read it as NaN)");
        if (options.dtype == DType::F64)
          f64.push_back(std::numeric_limits<double>::quiet_NaN());
        else
          f32.push_back(std::numeric_limits<float>::quiet_NaN());
        continue;
      }
      bool ok;
      if (options.dtype == DType::F64) {
        double v = 0;
        ok = parse_number(fd.text, v);
        if (ok) f64.push_back(v);
      } else {
        float v = 0;
        ok = parse_number(fd.text, v);
        if (ok) f32.push_back(v);
      }
      OXM_CHECK(ok, Io, fn, ": ", path, ": line ", lineno, ", column ", fd.column, " (field ", c + 1,
                out.columns.empty() ? std::string() : detail::concat(" '", out.columns[c], "'"), "): '", fd.text,
                "' is not a number");
    }
    ++rows;
  }
  const Shape shape{rows, static_cast<int64_t>(ncols)};
  out.values = options.dtype == DType::F64 ? from_vector(f64, shape) : from_vector(f32, shape);
  return out;
}

}  // namespace

CsvTable load_csv(const std::string& path, const CsvOptions& options) {
  check_options(options, "load_csv", path);
  const InputFile f = open_input(path, "load_csv");
  std::string text(static_cast<size_t>(f.size), '\0');  // the file's real size
  if (f.size) pread_exact(f, text.data(), text.size(), 0, "the file");
  return parse_csv(text, options, "load_csv", path);
}

CsvTable load_csv_from_string(std::string_view text, const CsvOptions& options, const std::string& name) {
  const InputFile f = memory_input(text.data(), text.size(), name, "load_csv_from_string");
  check_options(options, f.fn, f.path);
  return parse_csv(text, options, f.fn, f.path);
}

}  // namespace oxmera
