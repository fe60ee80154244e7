// The `oxmera` command: doctor, train, bench.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <oxmera/oxmera.hpp>

#include "dashboard.hpp"
#include "demo_training.hpp"
#include "doctor.hpp"
#include "fixtures.hpp"
#include "research.hpp"

namespace {

int cmd_doctor(bool json, const std::string& fixture) {
  nlohmann::json report;
  if (!fixture.empty()) {
    report = oxmera_cli::load_doctor_fixture(fixture);
  } else {
    report = oxmera_cli::probe_report();
  }
  if (json) {
    std::cout << report.dump(2) << '\n';
  } else {
    oxmera_cli::render_report(report, std::cout);
  }
  return 0;
}

// Plain mode: SIGINT/SIGTERM/SIGHUP ask the run to stop after its current step (and save); a second one
// kills at once.
volatile int g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) {
  if (g_stop_signal) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
  g_stop_signal = sig;
}

// The launcher's world size, 0 when this process was not started by one (mpirun, srun).
int launched_world_size() {
  try {
    return oxmera::distributed::launch_environment().world_size;
  } catch (const oxmera::Error&) {
    return 0;
  }
}

// `mpirun -np 4 oxmera train` without --distributed trains four independent copies that all write the same
// --metrics and --checkpoint files: almost certainly a forgotten flag, so say so (and carry on, as torch does).
void warn_if_launched_without_distributed() {
  const int world = launched_world_size();
  if (world > 1 && oxmera::distributed::launch_environment().rank == 0)
    std::fprintf(stderr,
                 "oxmera train: warning: started by a launcher with %d processes but without --distributed: each "
                 "process trains its own copy of the model (add --distributed for data-parallel training)\n",
                 world);
}

// Distributed, every rank trains but rank 0 alone prints.
int cmd_train(oxmera_cli::TrainOptions opt) {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, on_stop_signal);
  opt.stop = &g_stop_signal;
  const int world = opt.distributed ? oxmera_cli::init_distributed_training() : 1;
  const bool root = !opt.distributed || oxmera::distributed::rank() == 0;
  // No progress bar under a launcher: Open MPI gives every rank a pty whatever mpirun's own output is, so a
  // rank cannot tell a terminal from a log file.
  const bool tty = launched_world_size() == 0 && isatty(STDOUT_FILENO) != 0;
  if (root) {
    std::printf("oxmera train: %s on %s, %d epochs, seed %llu, %s", oxmera_cli::model_description(opt),
                oxmera_cli::run_description(opt).c_str(), opt.epochs, static_cast<unsigned long long>(opt.seed),
                opt.device.c_str());
    if (opt.distributed) std::printf(", distributed over %d rank%s (MPI)", world, world == 1 ? "" : "s");
    std::printf("\n");
    std::fflush(stdout);
  }
  auto on_batch = [&](int epoch, int64_t b, int64_t nb) {
    if (!tty) return;
    const int width = 30;
    const int filled = static_cast<int>(width * b / nb);
    std::printf("\r  epoch %3d [%.*s%*s] %lld/%lld", epoch, filled, "##############################", width - filled,
                "", static_cast<long long>(b), static_cast<long long>(nb));
    std::fflush(stdout);
  };
  auto on_epoch = [&](const oxmera_cli::EpochStats& s) {
    if (!root) return;
    if (tty) std::printf("\r\033[K");
    if (s.tokens_per_s > 0)  // a language model
      std::printf("epoch %3d/%d  loss %.4f nats/char  held-out next-char accuracy %5.1f%%  %9.0f tokens/s\n", s.epoch,
                  opt.epochs, s.loss, 100.0 * s.accuracy, s.tokens_per_s);
    else
      std::printf("epoch %3d/%d  loss %.4f  accuracy %5.1f%%  %9.0f samples/s\n", s.epoch, opt.epochs, s.loss,
                  100.0 * s.accuracy, s.samples_per_s);
    std::fflush(stdout);
  };
  auto result = oxmera_cli::run_demo_training(opt, on_batch, on_epoch);
  if (result.stopped_by) {
    if (tty) std::printf("\r\033[K");
    if (root)
      std::printf(
          "stopped by signal %d after step; %s\n", result.stopped_by,
          opt.checkpoint.empty() ? "no checkpoint requested" : ("checkpoint saved to " + opt.checkpoint).c_str());
    std::fflush(stdout);
    std::signal(result.stopped_by, SIG_DFL);
    std::raise(result.stopped_by);  // die by the signal (128+N)
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"oxmera: a native C++20 tensor and deep-learning framework", "oxmera"};
  app.set_version_flag("--version", std::string("oxmera ") + oxmera::kVersion);
  app.require_subcommand(1);

  bool doctor_json = false;
  std::string fixture;
  auto* doctor = app.add_subcommand("doctor", "What this machine and build can do");
  doctor->add_flag("--json", doctor_json, "Print the report as JSON");
  doctor->add_option("--fixture", fixture, "Render a recorded report (JSON) instead of probing");

  oxmera_cli::TrainOptions topt;
  bool tui = false;
  std::string replay, checkpoint, resume;
  auto* train = app.add_subcommand(
      "train", "Train the demo model (two spirals, MLP), the digits CNN or a character language model");
  train
      ->add_option("--model", topt.model,
                   "mlp (two spirals, the default), cnn (digits, needs --data), transformer or lstm (character "
                   "language models on the --data text file)")
      ->check(CLI::IsMember({"mlp", "cnn", "transformer", "lstm"}));
  train->add_option("--data", topt.data,
                    "cnn: folder of digits-images-idx3-ubyte and digits-labels-idx1-ubyte; transformer, lstm: a "
                    "text file (default /usr/share/common-licenses/GPL-3)");
  train
      ->add_option("--steps-per-epoch", topt.steps_per_epoch,
                   "transformer, lstm: steps (of --batch random windows) per epoch (default 50)")
      ->check(CLI::Range(1, 1 << 30));
  train->add_option("--device", topt.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  train->add_option("--epochs", topt.epochs, "Epochs (default 30; cnn 15; transformer, lstm 6)")
      ->check(CLI::Range(1, 1000000));
  train->add_option("--seed", topt.seed, "Seed (default 7)");
  train
      ->add_option("--batch,--batch-size", topt.batch,
                   "Batch size (default 32; transformer, lstm: 16 windows; --distributed: the global batch)")
      ->check(CLI::Range(1, 1 << 20));
  train->add_option("--lr", topt.lr, "Learning rate (default 0.03; cnn, transformer, lstm 0.003)")
      ->check(CLI::PositiveNumber);
  train->add_option("--metrics", topt.metrics, "Write one JSON object per epoch to this file");
  train->add_flag("--tui", tui, "Live terminal dashboard");
  train->add_option("--replay", replay, "Drive the dashboard from a recorded fixture");
  train->add_option("--checkpoint", checkpoint, "Save model+optimizer+RNG here at each epoch end");
  train->add_option("--resume", resume, "Continue from a checkpoint");
  train->add_flag("--distributed", topt.distributed,
                  "Data-parallel over the processes of `mpirun -np N` (--batch is the global batch)");
  train->add_flag("--graph", topt.graph,
                  "Capture one training step as a CUDA graph and replay it for every full batch (--device cuda)");

  auto* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  oxmera_cli::ResearchOptions ropt;
  auto* research = bench->add_subcommand("research", "The research workload (three stacked-seed fits)");
  research->add_option("--device", ropt.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  research
      ->add_option("--dtype", ropt.dtype, "Training dtype of the DPP fits: auto (f64 on cpu, f32 on cuda), f32, f64")
      ->check(CLI::IsMember({"auto", "f32", "f64"}));
  research->add_option("--epochs", ropt.epochs, "Epochs (default 100)")->check(CLI::Range(1, 1000000));
  research->add_option("--replicas", ropt.replicas, "Stacked replicas R (default 3)")->check(CLI::Range(1, 1024));
  research->add_option("--seed", ropt.seed, "Seed (default 0)");
  research->add_option("--fit", ropt.fit, "mlp-h16, linear-lag5, deepsets-H30 or all");
  research->add_option("--dump", ropt.dump, "Write data and initial parameters as safetensors");
  research->add_option("--out", ropt.out, "Write the results as JSON");
  research->add_flag("--graph", ropt.graph,
                     "Capture each fit's training step as a CUDA graph and replay it (--device cuda only)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);  // help on stdout, exit 0
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e, std::cerr, std::cerr);
    return 1;  // usage errors exit 1, whatever CLI11's internal code
  }

  try {
    if (*doctor) return cmd_doctor(doctor_json, fixture);
    if (*train) {
      if (topt.model == "cnn") {  // the digits CNN's own defaults for what was not given
        if (train->count("--epochs") == 0) topt.epochs = 15;
        if (train->count("--lr") == 0) topt.lr = 3e-3;
      }
      if (topt.model == "transformer" || topt.model == "lstm") {  // examples/{transformer,lstm}_lm.cpp's defaults
        if (train->count("--epochs") == 0) topt.epochs = 6;       // 300 steps, as the examples
        if (train->count("--lr") == 0) topt.lr = 3e-3;
        if (train->count("--batch") == 0) topt.batch = 16;
        if (topt.data.empty()) topt.data = "/usr/share/common-licenses/GPL-3";
      }
      if (!replay.empty()) return oxmera_cli::run_replay(replay);
      topt.checkpoint = checkpoint;
      topt.resume = resume;
      if (!topt.distributed) warn_if_launched_without_distributed();
      const int rc = tui ? oxmera_cli::run_tui_training(topt) : cmd_train(topt);
      if (oxmera::distributed::is_initialized()) oxmera::distributed::finalize();
      return rc;
    }
    if (*research) return oxmera_cli::run_research(ropt, std::cout);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    if (oxmera::distributed::is_initialized() && oxmera::distributed::world_size() > 1)
      std::fprintf(stderr, "oxmera: error (rank %d): %s\n", oxmera::distributed::rank(), e.what());
    else
      std::fprintf(stderr, "oxmera: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
