// `oxmera train --tui` and `--replay FILE`: a full-screen training dashboard on ncursesw.
//
// One renderer draws a Model (what is known so far) onto stdscr; the live mode feeds it from the demo
// training's callbacks, the replay mode from a JSON fixture with no clock and no RNG. Training runs in the
// calling thread, so the keyboard is polled (timeout 0) between steps. q / Esc / Ctrl-C (a key: the
// terminal is in raw mode) quit with exit 0; KEY_RESIZE repaints. SIGINT/SIGTERM/SIGHUP sent to the
// process restore the terminal with async-signal-safe calls only (write + tcsetattr), then re-raise with
// the default disposition so the process dies by that signal (128+N to a shell).
#include "dashboard.hpp"

#include <poll.h>
#include <signal.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <clocale>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <curses.h>
#include <term.h>
#undef lines  // term.h macros that collide with ordinary identifiers
#undef columns

#include <nlohmann/json.hpp>
#include <oxmera/memory.hpp>
#include <oxmera/oxmera.hpp>

#include "fixtures.hpp"

namespace oxmera_cli {
namespace {

// ---------------------------------------------------------------- what the dashboard shows
struct Model {
  std::string model, device, memory_label;
  bool replay = false;
  bool done = false;
  int total_epochs = 1;
  int epochs_done = 0;
  int64_t batches = 1, batch = 0;
  double throughput = 0;
  const char* throughput_unit = "samples/s";  // language models: tokens/s
  std::vector<double> loss, accuracy;
  std::vector<double> throughputs;  // replay: per epoch
  int ranks = 0;                    // --distributed: the world size (0: not distributed)
};

// ---------------------------------------------------------------- signal-safe terminal restore
char g_restore[512];
volatile size_t g_restore_len = 0;
struct termios g_cooked;
volatile bool g_have_cooked = false;
int g_in_fd = STDIN_FILENO;
const int kSignals[] = {SIGINT, SIGTERM, SIGHUP};

// While training runs, a signal is deferred: the step finishes, the checkpoint (if any) is saved, and then
// the terminal is restored and the signal re-raised. A second signal, or one outside training, acts at once.
volatile int g_deferred_signal = 0;
volatile bool g_training_active = false;
// Rank 0 of a distributed run restores the terminal as soon as a signal arrives, even while it defers the signal:
// when a peer has died, the step never finishes (its all-reduce waits) and mpirun follows its SIGTERM with a
// SIGKILL, which would leave the user's terminal on the alternate screen. Afterwards nothing is drawn.
volatile bool g_restore_when_deferring = false;
volatile bool g_terminal_released = false;

void write_restore() {
  // CAN aborts any escape sequence ncurses may have been halfway through, then: attributes off, main
  // screen, cursor visible. All async-signal-safe.
  if (g_restore_len > 0) {
    const char* p = g_restore;
    size_t left = g_restore_len;
    while (left > 0) {
      ssize_t w = write(STDOUT_FILENO, p, left);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) break;
      p += w;
      left -= static_cast<size_t>(w);
    }
  }
  if (g_have_cooked) tcsetattr(g_in_fd, TCSANOW, &g_cooked);
}

extern "C" void on_fatal_signal(int sig) {
  if (g_training_active && g_deferred_signal == 0) {
    g_deferred_signal = sig;
    if (g_restore_when_deferring) {
      g_terminal_released = true;
      write_restore();
    }
    return;
  }
  write_restore();
  signal(sig, SIG_DFL);
  raise(sig);  // installed with SA_NODEFER: delivered here, with the default action (death by sig)
}

void append_cap(std::string& s, const char* name) {
  char* v = tigetstr(const_cast<char*>(name));
  if (v != nullptr && v != reinterpret_cast<char*>(-1)) s += v;
}

enum Pair : short { kHeader = 1, kLoss, kAcc, kBorder, kEpoch, kBatch, kKey, kFooter, kTitle };

struct Quit {};  // thrown from the training callback to unwind out of run_demo_training

// Where the dashboard reads its keys. A plain run: stdin when it is a terminal, else /dev/tty. Rank 0 of
// `mpirun -np N oxmera train --tui --distributed`: stdin whatever it is, since mpirun forwards its own stdin to
// rank 0 through a pipe (rank 0's /dev/tty, when it has one, is the pty Open MPI reads its output from: no key
// ever arrives there). mpirun's terminal stays in line mode, so there a key counts once Enter is pressed.
enum class Keys { Terminal, LauncherStdin };

class Terminal {
 public:
  explicit Terminal(Keys keys = Keys::Terminal) {
    if (isatty(STDOUT_FILENO) == 0)
      throw std::runtime_error(
          "train: --tui and --replay need a terminal on stdout (stdout is not a tty); "
          "run without --tui for the plain progress lines");
    const char* term = std::getenv("TERM");
    if (term == nullptr || *term == '\0' || std::strcmp(term, "dumb") == 0)
      throw std::runtime_error("train: --tui needs a capable terminal, but TERM is unset or 'dumb'");
    in_ = stdin;
    launcher_keys_ = keys == Keys::LauncherStdin;
    if (keys == Keys::Terminal && isatty(STDIN_FILENO) == 0) {
      in_ = std::fopen("/dev/tty", "r");
      if (in_ == nullptr) throw std::runtime_error("train: --tui cannot read the keyboard (no /dev/tty)");
      own_in_ = true;
    }
    g_in_fd = fileno(in_);
    if (tcgetattr(g_in_fd, &g_cooked) == 0) g_have_cooked = true;
    std::setlocale(LC_CTYPE, "");  // UTF-8 box drawing; numbers keep the C locale
    screen_ = newterm(nullptr, stdout, in_);
    if (screen_ == nullptr) {
      if (own_in_) std::fclose(in_);
      throw std::runtime_error(std::string("train: cannot drive terminal type '") + term + "'");
    }
    set_term(screen_);
    raw();
    noecho();
    nonl();
    keypad(stdscr, TRUE);
    nodelay(stdscr, TRUE);
    set_escdelay(25);
    curs_set(0);
    color_ = has_colors();
    if (color_) {
      start_color();
      use_default_colors();
      init_pair(kHeader, COLOR_BLACK, COLOR_CYAN);
      init_pair(kLoss, COLOR_YELLOW, -1);
      init_pair(kAcc, COLOR_GREEN, -1);
      init_pair(kBorder, COLOR_BLUE, -1);
      init_pair(kEpoch, COLOR_CYAN, -1);
      init_pair(kBatch, COLOR_MAGENTA, -1);
      init_pair(kKey, COLOR_BLACK, COLOR_WHITE);
      init_pair(kFooter, COLOR_WHITE, COLOR_BLUE);
      init_pair(kTitle, COLOR_WHITE, -1);
    }
    std::string restore = "\x18";
    append_cap(restore, "sgr0");
    append_cap(restore, "rmcup");
    append_cap(restore, "cnorm");
    if (restore.size() < sizeof(g_restore)) {
      std::memcpy(g_restore, restore.data(), restore.size());
      g_restore_len = restore.size();
    }
    struct sigaction sa {};
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_NODEFER | SA_RESETHAND;
    for (size_t i = 0; i < 3; ++i) sigaction(kSignals[i], &sa, &old_[i]);
  }
  ~Terminal() {
    endwin();
    for (size_t i = 0; i < 3; ++i) sigaction(kSignals[i], &old_[i], nullptr);
    g_restore_len = 0;
    g_have_cooked = false;
    delscreen(screen_);
    if (own_in_) std::fclose(in_);
  }
  Terminal(const Terminal&) = delete;
  Terminal& operator=(const Terminal&) = delete;

  // Reads the pending keys, waiting up to timeout_ms for the first (0: never waits). True: quit.
  bool poll(int timeout_ms) {
    wtimeout(stdscr, timeout_ms);
    for (;;) {
      int ch = wgetch(stdscr);
      if (ch == ERR) return false;
      wtimeout(stdscr, 0);
      if (ch == 'q' || ch == 'Q' || ch == 27 || ch == 3) return true;
      if (ch == KEY_RESIZE) resized_ = true;
    }
  }
  void draw(const Model& m);
  // Whether the keys' input has reached its end (mpirun's stdin was /dev/null, a file, or closed): nobody can
  // press q any more. Only for Keys::LauncherStdin, where the done frame then ends by itself; call right after
  // poll() found no key (a read that would not block now finds end-of-file: poll() just read all there was).
  bool keyboard_closed() {
    if (!launcher_keys_) return false;
    struct pollfd p {
      g_in_fd, POLLIN, 0
    };
    if (::poll(&p, 1, 0) <= 0 || (p.revents & (POLLIN | POLLHUP)) == 0) return false;
    // Something may have arrived since: read it as keys first; still readable with nothing read means EOF.
    wtimeout(stdscr, 0);
    if (wgetch(stdscr) != ERR) return false;
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP)) != 0;
  }

 private:
  void put(int y, int x, const std::string& s, int maxw, attr_t a = A_NORMAL, short pair = 0);
  void box(int y, int x, int h, int w, const std::string& title, attr_t title_attr, short title_pair);
  void chart(int y, int x, int h, int w, const std::string& title, const std::vector<double>& v, int total, double hi,
             bool percent, short pair);
  void gauge(int y, int x, int w, double frac, short pair);
  attr_t col(short pair) const { return color_ ? COLOR_PAIR(pair) : A_NORMAL; }

  SCREEN* screen_ = nullptr;
  FILE* in_ = nullptr;
  bool own_in_ = false, color_ = false, resized_ = false, launcher_keys_ = false;
  struct sigaction old_[3]{};
};

// Display columns of a UTF-8 string (every glyph used here is one column wide).
int width_of(const std::string& s) {
  int n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string repeat(const char* glyph, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += glyph;
  return s;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string pad_left(const std::string& s, int w) {
  int n = width_of(s);
  return n >= w ? s : std::string(static_cast<size_t>(w - n), ' ') + s;
}

// A y-axis value in at most 6 columns.
std::string axis_value(double v, bool percent) {
  if (percent) return fmt("%.0f%%", 100.0 * v);
  if (v < 10) return fmt("%.3f", v);
  if (v < 1000) return fmt("%.1f", v);
  return fmt("%.2g", v);
}

void Terminal::put(int y, int x, const std::string& s, int maxw, attr_t a, short pair) {
  if (maxw <= 0 || y < 0 || x < 0 || y >= LINES || x >= COLS) return;
  maxw = std::min(maxw, COLS - x);
  size_t bytes = 0;
  int cols = 0;
  while (bytes < s.size() && cols < maxw) {
    ++bytes;
    while (bytes < s.size() && (static_cast<unsigned char>(s[bytes]) & 0xC0) == 0x80) ++bytes;
    ++cols;
  }
  attr_t all = a | col(pair);
  attron(all);
  mvaddnstr(y, x, s.c_str(), static_cast<int>(bytes));
  attroff(all);
}

void Terminal::box(int y, int x, int h, int w, const std::string& title, attr_t title_attr, short title_pair) {
  const attr_t b = col(kBorder);
  put(y, x, "┌" + repeat("─", w - 2) + "┐", w, b);
  for (int r = 1; r < h - 1; ++r) {
    put(y + r, x, "│", 1, b);
    put(y + r, x + w - 1, "│", 1, b);
  }
  put(y + h - 1, x, "└" + repeat("─", w - 2) + "┘", w, b);
  if (!title.empty()) put(y, x + 2, " " + title + " ", w - 4, title_attr, title_pair);
}

void Terminal::chart(int y, int x, int h, int w, const std::string& title, const std::vector<double>& v, int total,
                     double hi, bool percent, short pair) {
  box(y, x, h, w, title, A_BOLD, pair);
  const int iy = y + 1, ix = x + 1, ih = h - 2, iw = w - 2;
  const int lw = 6;                         // y labels
  const int ax = ix + lw + 1;               // the axis column
  const int px = ax + 1, pw = iw - lw - 3;  // plot area (one blank column on the right)
  const int ph = ih - 2;                    // axis row and x labels below
  if (ph < 3 || pw < 8) return;
  const attr_t dim = col(kBorder);
  for (int r = 0; r < ph; ++r) {
    const bool tick = r == 0 || r == ph / 2 || r == ph - 1;
    if (tick) {
      const double val = hi * (1.0 - static_cast<double>(r) / (ph - 1));
      put(iy + r, ix, pad_left(axis_value(val, percent), lw), lw);
    }
    put(iy + r, ax, tick ? "┤" : "│", 1, dim);
  }
  put(iy + ph, ax, "└" + repeat("─", pw), pw + 1, dim);
  const std::string last = std::to_string(total), mid = "epoch";
  put(iy + ph + 1, px, "1", 1);
  put(iy + ph + 1, px + (pw - width_of(mid)) / 2, mid, pw);
  if (total > 1) put(iy + ph + 1, px + pw - width_of(last), last, pw);

  auto row_of = [&](double val) {
    double f = hi > 0 ? val / hi : 0.0;
    f = std::clamp(f, 0.0, 1.0);
    return static_cast<int>(std::lround((1.0 - f) * (ph - 1)));
  };
  auto col_of = [&](size_t i) {
    return total <= 1 ? 0 : static_cast<int>(std::lround(static_cast<double>(i) * (pw - 1) / (total - 1)));
  };
  const attr_t c = col(pair);
  for (size_t i = 0; i + 1 < v.size(); ++i) {  // the line between points
    const int x0 = col_of(i), x1 = col_of(i + 1);
    for (int cx = x0 + 1; cx < x1; ++cx) {
      const double t = static_cast<double>(cx - x0) / (x1 - x0);
      put(iy + row_of(v[i] + t * (v[i + 1] - v[i])), px + cx, "·", 1, c);
    }
  }
  for (size_t i = 0; i < v.size(); ++i) put(iy + row_of(v[i]), px + col_of(i), "●", 1, c | A_BOLD);
}

void Terminal::gauge(int y, int x, int w, double frac, short pair) {
  if (w < 3) return;
  frac = std::clamp(frac, 0.0, 1.0);
  const int inner = w - 2, filled = static_cast<int>(std::floor(frac * inner + 1e-9));
  put(y, x, "▕", 1, col(kBorder));
  put(y, x + 1, repeat("█", filled), filled, col(pair));
  put(y, x + 1 + filled, repeat("░", inner - filled), inner - filled, col(kBorder));
  put(y, x + w - 1, "▏", 1, col(kBorder));
}

void Terminal::draw(const Model& m) {
  if (g_terminal_released) return;  // restored for a signal (distributed rank 0): the screen is the user's again
  const int H = LINES, W = COLS;
  if (resized_) {
    clear();  // a full repaint after a resize
    resized_ = false;
  } else {
    erase();
  }
  if (W < 60 || H < 18) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "terminal too small (%dx%d): the dashboard needs 60x18", W, H);
    put(H / 2, std::max(0, (W - width_of(buf)) / 2), buf, W, A_BOLD);
    put(H / 2 + 1, std::max(0, (W - 11) / 2), "q: quit", W);
    refresh();
    return;
  }
  // Header.
  put(0, 0, std::string(static_cast<size_t>(W), ' '), W, A_NORMAL, kHeader);
  std::string left = m.replay ? " oxmera train (replay)" : " oxmera train";
  put(0, 0, left, W, A_BOLD, kHeader);
  std::string info = "   model " + m.model + "   device " + m.device;
  if (m.ranks > 0) info += "   ranks " + std::to_string(m.ranks) + " (MPI)";
  put(0, width_of(left), info, W - width_of(left), A_NORMAL, kHeader);
  const int current = std::min(m.total_epochs, m.epochs_done + (m.done ? 0 : 1));
  const std::string status =
      m.done ? "done " : "epoch " + std::to_string(current) + "/" + std::to_string(m.total_epochs) + " ";
  put(0, W - width_of(status), status, width_of(status), A_BOLD, kHeader);

  // Charts: loss and accuracy histories, side by side.
  const int ch = H - 8, lw = W / 2, rw = W - lw;
  double loss_hi = 0;
  for (double l : m.loss) loss_hi = std::max(loss_hi, l);
  if (!(loss_hi > 0)) loss_hi = 1.0;
  const std::string lt = m.loss.empty() ? "loss" : "loss " + fmt("%.4f", m.loss.back());
  const std::string at = m.accuracy.empty() ? "accuracy" : "accuracy " + fmt("%.1f%%", 100.0 * m.accuracy.back());
  chart(1, 0, ch, lw, lt, m.loss, m.total_epochs, loss_hi, false, kLoss);
  chart(1, lw, ch, rw, at, m.accuracy, m.total_epochs, 1.0, true, kAcc);

  // Progress panel.
  const int py = H - 7;
  box(py, 0, 6, W, "progress", A_BOLD, kTitle);
  const int iw = W - 2, label = 12, count = 16, gw = iw - label - count - 2;
  char buf[160];
  put(py + 1, 2, "epoch", label, A_BOLD);
  gauge(py + 1, 1 + label, gw, static_cast<double>(m.epochs_done) / std::max(1, m.total_epochs), kEpoch);
  std::snprintf(buf, sizeof buf, "%d/%d", m.epochs_done, m.total_epochs);
  put(py + 1, 1 + label + gw + 1, pad_left(buf, count - 1), count);
  put(py + 2, 2, "batch", label, A_BOLD);
  gauge(py + 2, 1 + label, gw, static_cast<double>(m.batch) / static_cast<double>(std::max<int64_t>(1, m.batches)),
        kBatch);
  std::snprintf(buf, sizeof buf, "%lld/%lld", static_cast<long long>(m.batch), static_cast<long long>(m.batches));
  put(py + 2, 1 + label + gw + 1, pad_left(buf, count - 1), count);
  put(py + 3, 2, "throughput", label, A_BOLD);
  const std::string tp = m.epochs_done > 0 ? fmt("%.0f ", m.throughput) + m.throughput_unit : "-";
  put(py + 3, 1 + label, tp, iw - label);
  const int mx = 1 + label + std::max(24, width_of(tp) + 4);
  put(py + 3, mx, "memory", 8, A_BOLD);
  put(py + 3, mx + 8, m.memory_label, W - 2 - (mx + 8));
  if (!m.accuracy.empty()) {
    size_t best = 0;
    for (size_t i = 1; i < m.accuracy.size(); ++i)
      if (m.accuracy[i] > m.accuracy[best]) best = i;
    put(py + 4, 2, "best", label, A_BOLD);
    std::snprintf(buf, sizeof buf, "accuracy %.1f%% at epoch %zu, lowest loss %.4f", 100.0 * m.accuracy[best], best + 1,
                  *std::min_element(m.loss.begin(), m.loss.end()));
    put(py + 4, 1 + label, buf, iw - label);
  }

  // Footer: the keys.
  put(H - 1, 0, std::string(static_cast<size_t>(W), ' '), W, A_NORMAL, kFooter);
  int fx = 1;
  for (const char* k : {"q", "Esc", "Ctrl-C"}) {
    const std::string key = std::string(" ") + k + " ";
    put(H - 1, fx, key, W - fx, A_BOLD, kKey);
    fx += width_of(key);
    put(H - 1, fx, " quit  ", W - fx, A_NORMAL, kFooter);
    fx += 7;
  }
  const std::string right = m.done ? "done: press q to quit " : (m.replay ? "replaying " : "training ");
  put(H - 1, W - width_of(right) - 1, right, width_of(right), A_BOLD, kFooter);
  refresh();
}

// ---------------------------------------------------------------- memory
std::string rss_label() {
  std::ifstream f("/proc/self/statm");
  long long size = 0, resident = 0;
  if (!(f >> size >> resident)) return "RSS n/a";
  const double mib = static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
  return "RSS " + fmt("%.1f MiB", mib);
}

std::string memory_label(const std::string& device) {
  if (const oxmera::Device d = oxmera::Device::parse(device); !d.is_cpu()) {
    const auto s = oxmera::memory_stats(d);
    return "allocated " + fmt("%.1f MiB", static_cast<double>(s.allocated_bytes) / (1024.0 * 1024.0)) + " / reserved " +
           fmt("%.1f MiB", static_cast<double>(s.reserved_bytes) / (1024.0 * 1024.0));
  }
  return rss_label();
}

// ---------------------------------------------------------------- the replay fixture (fixtures.cpp parses it)
Model load_replay(const std::string& path) {
  const ReplayFixture r = load_replay_fixture(path);
  Model m;
  m.replay = true;
  m.device = r.device;
  m.model = r.model;
  m.memory_label = r.memory_label;
  m.batches = r.batches_per_epoch;
  m.loss = r.loss;
  m.accuracy = r.accuracy;
  m.throughputs = r.throughput;
  m.total_epochs = static_cast<int>(r.loss.size());
  return m;
}

}  // namespace

// ---------------------------------------------------------------- entry points
int run_replay(const std::string& path) {
  const Model all = load_replay(path);  // validated before the terminal is touched
  Terminal term;
  Model m = all;
  m.loss.clear();
  m.accuracy.clear();
  m.batch = 0;
  term.draw(m);
  for (int i = 0; i < all.total_epochs; ++i) {
    if (term.poll(0)) return 0;
    m.loss.push_back(all.loss[static_cast<size_t>(i)]);
    m.accuracy.push_back(all.accuracy[static_cast<size_t>(i)]);
    m.throughput = all.throughputs[static_cast<size_t>(i)];
    m.epochs_done = i + 1;
    m.batch = m.batches;
    term.draw(m);
  }
  m.done = true;
  term.draw(m);
  while (!term.poll(100)) term.draw(m);  // redraws are no-ops unless the size changed
  return 0;
}

namespace {

// A quit key on rank 0 of a distributed run: not an exception (the other ranks would wait for rank 0's
// collectives until their timeout) but a stop request, all-reduced after every step like a signal's, so that
// every rank stops after the same step, saves, and exits 0. Larger than any signal number: a signal that
// arrives as well wins the Max.
constexpr int kQuitRequest = 1000;

// The other ranks of a distributed run: no terminal, no output (rank 0 draws); a signal is deferred to the end
// of the step like rank 0's, a second one acts at once.
class QuietSignals {
 public:
  QuietSignals() {
    g_restore_len = 0;
    g_have_cooked = false;
    struct sigaction sa {};
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_NODEFER | SA_RESETHAND;
    for (size_t i = 0; i < 3; ++i) sigaction(kSignals[i], &sa, &old_[i]);
  }
  ~QuietSignals() {
    for (size_t i = 0; i < 3; ++i) sigaction(kSignals[i], &old_[i], nullptr);
  }
  QuietSignals(const QuietSignals&) = delete;
  QuietSignals& operator=(const QuietSignals&) = delete;

 private:
  struct sigaction old_[3]{};
};

// Runs the training with the stop flag the signal handler sets; false when the user quit (q / Esc / Ctrl-C).
bool train_until_done_or_quit(const TrainOptions& opt, const std::function<void(int, int64_t, int64_t)>& on_batch,
                              const std::function<void(const EpochStats&)>& on_epoch) {
  TrainOptions topt = opt;
  topt.stop = &g_deferred_signal;
  g_deferred_signal = 0;
  EpochStats result;
  try {
    g_training_active = true;
    result = run_demo_training(topt, on_batch, on_epoch);
    g_training_active = false;
  } catch (const Quit&) {
    g_training_active = false;
    return false;
  } catch (...) {
    g_training_active = false;
    throw;
  }
  if (result.stopped_by == kQuitRequest) return false;
  if (result.stopped_by) on_fatal_signal(result.stopped_by);  // restores the terminal, dies by the signal
  return true;
}

// The live dashboard over a training run (world > 0: rank 0 of a distributed run of `world` ranks).
int run_dashboard(Terminal& term, const TrainOptions& opt, int world) {
  Model m;
  m.model = model_description(opt);
  m.device = opt.device;
  m.total_epochs = opt.epochs;
  m.ranks = world;
  m.memory_label = rss_label();
  term.draw(m);
  auto on_batch = [&](int epoch, int64_t b, int64_t nb) {
    if (term.poll(0)) {
      if (world == 0) throw Quit{};
      if (g_deferred_signal == 0) g_deferred_signal = kQuitRequest;  // every rank stops after this step
    }
    m.epochs_done = epoch - 1;
    m.batch = b;
    m.batches = nb;
    m.memory_label = memory_label(opt.device);
    term.draw(m);
  };
  auto on_epoch = [&](const EpochStats& s) {
    m.loss.push_back(s.loss);
    m.accuracy.push_back(s.accuracy);
    m.throughput = s.tokens_per_s > 0 ? s.tokens_per_s : s.samples_per_s;
    if (s.tokens_per_s > 0) m.throughput_unit = "tokens/s";
    m.epochs_done = s.epoch;
    term.draw(m);
  };
  if (!train_until_done_or_quit(opt, on_batch, on_epoch)) return 0;
  m.done = true;
  term.draw(m);
  // Under mpirun with no keyboard (stdin at its end) the done frame is the last: nothing could quit it.
  while (!term.poll(100) && !term.keyboard_closed()) term.draw(m);
  return 0;
}

}  // namespace

int run_tui_training(const TrainOptions& opt) {
  int world = 0;
  if (opt.distributed) {
    // Started (and checked) before the terminal is touched: outside a launcher this is the typed error alone.
    world = init_distributed_training();
    const int rank = oxmera::distributed::rank();
    // Rank 0 opens the dashboard; every rank learns whether it could (one all-reduce) before any training, so
    // that a rank 0 without a terminal ends the job with its reason instead of leaving the others waiting.
    std::unique_ptr<Terminal> term;
    std::string error;
    if (rank == 0) {
      try {
        term = std::make_unique<Terminal>(Keys::LauncherStdin);
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    oxmera::Tensor failed = oxmera::scalar(error.empty() ? 0.0 : 1.0, oxmera::DType::I64);
    oxmera::distributed::all_reduce(failed, oxmera::distributed::ReduceOp::Max);
    if (failed.item<int64_t>() != 0) {
      if (rank == 0) throw std::runtime_error(error);
      throw std::runtime_error("train --tui --distributed: rank 0 could not open the dashboard (its error says why)");
    }
    if (rank != 0) {
      QuietSignals quiet;
      train_until_done_or_quit(opt, nullptr, nullptr);
      return 0;
    }
    g_restore_when_deferring = true;
    return run_dashboard(*term, opt, world);
  }
  Terminal term;
  return run_dashboard(term, opt, world);
}

}  // namespace oxmera_cli
