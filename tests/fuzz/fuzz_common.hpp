#pragma once
// Shared by the libFuzzer harnesses of tests/fuzz: most call the in-memory loaders (*_from_bytes); a loader that
// only takes a path (load_checkpoint) gets each input written to one per-process file, under /dev/shm when it
// exists (memory, not disk: the write costs microseconds) or else the temporary directory. An oxmera::Error is
// the expected outcome of a bad input, anything else (another exception type, a crash, a sanitizer report) is a
// finding.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <utility>

#include "oxmera/error.hpp"

namespace oxmera_fuzz {

// The same file is rewritten for every input (suffix: some readers are chosen by extension in user code, and a
// realistic name keeps messages readable). Removed at exit.
inline const std::string& input_path(const char* suffix) {
  static const std::string path = [suffix] {
    const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    std::string templ = std::string(dir) + "/oxmera_fuzz_XXXXXX" + suffix;
    const int fd = mkstemps(templ.data(), static_cast<int>(std::string(suffix).size()));
    if (fd < 0) {
      std::perror("oxmera_fuzz: mkstemps");
      std::abort();
    }
    close(fd);
    static std::string to_remove;
    to_remove = templ;
    std::atexit([] { std::remove(to_remove.c_str()); });
    return templ;
  }();
  return path;
}

inline const std::string& write_input(const uint8_t* data, size_t size, const char* suffix) {
  const std::string& path = input_path(suffix);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || (size > 0 && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
    std::perror("oxmera_fuzz: writing the input file");
    std::abort();
  }
  return path;
}

// Set by the replay driver: print each input's outcome (accepted, or the error's first line), so a seed meant to
// be valid visibly loads. Off under libFuzzer.
inline bool& report_outcomes() {
  static bool on = false;
  return on;
}

// Runs body(); an Expected exception is fine (a bad input's documented error), any other exception aborts (libFuzzer
// records the input as a crash).
template <class Expected, class Body>
int run_expecting(Body&& body) {
  try {
    body();
    if (report_outcomes()) std::printf("  accepted\n");
  } catch (const Expected& e) {
    if (report_outcomes()) std::printf("  %.160s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "oxmera_fuzz: FINDING: an exception of another type escaped: %s\n", e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "oxmera_fuzz: FINDING: a non-std exception escaped\n");
    std::abort();
  }
  return 0;
}

// The library's loaders: an oxmera::Error is the expected outcome of a bad input.
template <class Body>
int run_expecting_oxmera_errors(Body&& body) {
  return run_expecting<oxmera::Error>(std::forward<Body>(body));
}

// A finding that is not an exception (a wrong result): print why and abort.
[[noreturn]] inline void finding(const std::string& why) {
  std::fprintf(stderr, "oxmera_fuzz: FINDING: %s\n", why.c_str());
  std::abort();
}

}  // namespace oxmera_fuzz
