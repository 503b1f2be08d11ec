// gift-bench: benchmarks and reports for the GIFT-PS codec.
//
//   gift-bench codec      encode/decode/reduce throughput against memcpy
//   gift-bench fidelity   round-trip error of each format on synthetic gradients, or of
//                         each transform + format on real gradients (--grads)
//   gift-bench control-plane  refresh negotiation and watch fan-out of gift-coordinator
//   gift-bench transform  transform + quantize against direct quantize, CPU and GPU
//   gift-bench refresh    a basis refresh (statistics EMA + TensorBasis), CPU and GPU (--gpu)
//   gift-bench cluster    push-pull of a local cluster against ucx_perftest, gloo, memcpy
//   gift-bench model      predicted step time: rings against the service (nothing measured)
//   gift-bench faults     kill -9 / SIGSTOP of each daemon kind: exact-once counts and stalls
//   gift-bench soak       one cluster, every feature on, random faults and repairs for a set time
//   gift-bench mac        the data-plane MAC candidates (OpenSSL EVP) in GB/s on this machine
//   gift-bench gpu-share  one side (trainer or worker) of the GPU-sharing measurement
//                         (scripts/gpu-share.sh runs both)
//
// Every subcommand lives in its own file and registers itself through a
// bench::Command; see command.h.
#include <exception>
#include <iostream>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "bench/cluster_bench.h"
#include "bench/codec_bench.h"
#include "bench/command.h"
#include "bench/control_plane_bench.h"
#include "bench/fault_suite.h"
#include "bench/fidelity_report.h"
#include "bench/gpu_share_bench.h"
#include "bench/mac_bench.h"
#include "bench/model_bench.h"
#include "bench/refresh_bench.h"
#include "bench/soak.h"
#include "bench/transform_bench.h"

namespace {

int Main(int argc, char** argv) {
  CLI::App app{
      "gift-bench: benchmarks and reports for the GIFT-PS low-precision codec.\n"
      "Every number printed is measured in the run that prints it.",
      "gift-bench"};
  app.require_subcommand(1, 1);
  app.footer(
      "Examples:\n"
      "  gift-bench codec                          all default specs, 64 MiB, 5 reps\n"
      "  gift-bench codec --mib 16 --reps 3 --specs e4m3/tensor,nvfp4\n"
      "  gift-bench codec --json codec.json        table on stdout, numbers in codec.json\n"
      "  gift-bench fidelity --shapes 4096x1024 --json -   JSON on stdout, table on stderr\n"
      "  gift-bench control-plane --members 256 --json cp.json   refresh and watch latency\n"
      "  gift-bench cluster --servers 2 --workers 4 --steps 20   push-pull of a local cluster\n"
      "  gift-bench model --params 6.7e9 --d-model 4096 --gpus 64   predicted step times\n"
      "Run gift-bench SUBCOMMAND --help for the options of each.");
  app.fallthrough(false);

  std::vector<gift::bench::Command> commands;
  commands.push_back(gift::bench::AddCodecCommand(app));
  commands.push_back(gift::bench::AddFidelityCommand(app));
  commands.push_back(gift::bench::AddControlPlaneCommand(app));
  commands.push_back(gift::bench::AddTransformCommand(app));
  commands.push_back(gift::bench::AddRefreshCommand(app));
  commands.push_back(gift::bench::AddClusterCommand(app));
  commands.push_back(gift::bench::AddModelCommand(app));
  commands.push_back(gift::bench::AddFaultsCommand(app));
  commands.push_back(gift::bench::AddSoakCommand(app));
  commands.push_back(gift::bench::AddMacCommand(app));
  commands.push_back(gift::bench::AddGpuShareCommand(app));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);  // prints help or the parse error; its exit code
  }

  for (const gift::bench::Command& command : commands) {
    if (!command.app->parsed()) continue;
    const absl::Status status = command.run();
    if (!status.ok()) {
      std::cerr << "gift-bench " << command.app->get_name() << ": error: " << status.message()
                << " (" << absl::StatusCodeToString(status.code()) << ")\n";
      return command.exit_code ? command.exit_code(status) : 1;
    }
    return 0;
  }
  std::cerr << "gift-bench: no subcommand given; see gift-bench --help\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Main(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "gift-bench: error: " << e.what() << '\n';
  } catch (...) {
    std::cerr << "gift-bench: error: unknown exception\n";
  }
  return 1;
}
