// The collective baseline of `gift-bench cluster`: PyTorch's gloo all-reduce
// of the same tensors with one process per worker (bench/gloo_allreduce.py,
// run with the given Python), on loopback or under a placement's prefixes.
//
// Thread safety: a plain function; it starts and waits for the script.
#ifndef GIFT_BENCH_GLOO_BASELINE_H_
#define GIFT_BENCH_GLOO_BASELINE_H_

#include <string>
#include <vector>

#include "bench/synthetic_model.h"
#include "nlohmann/json.hpp"

namespace gift::bench {

struct GlooOptions {
  std::string python = "/usr/bin/python3";
  std::string script;          // "": gloo_allreduce.py of the source tree or the install
  std::string placement_file;  // "": every rank on loopback
  int world = 1;               // ranks
  std::string mode;            // the script's --mode
  std::string dtype;           // the script's --dtype
};

struct GlooResult {
  bool ran = false;
  std::string skipped;
  nlohmann::json report;  // the script's JSON
  double median_s = 0, p90_s = 0;
};

// All-reduces `tensors` for `warmup` + `steps` steps and reports the median
// and p90 of the slowest rank's step. Never fails as a whole: a run that
// cannot start or finish says why in `skipped`.
GlooResult RunGloo(const GlooOptions& options, const std::vector<ModelTensor>& tensors, int steps,
                   int warmup);

}  // namespace gift::bench

#endif  // GIFT_BENCH_GLOO_BASELINE_H_
