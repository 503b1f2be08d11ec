#include "common/transform/blas_runtime.h"

#include <cblas.h>

#include "absl/strings/str_cat.h"

namespace gift::transform {

absl::Status SetBlasThreads(int threads) {
  if (threads < 1 || threads > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("BLAS threads ", threads, " not in [1, 1024]"));
  }
  openblas_set_num_threads(threads);
  return absl::OkStatus();
}

int BlasThreads() { return openblas_get_num_threads(); }

std::string BlasLibrary() {
  const char* config = openblas_get_config();
  const char* core = openblas_get_corename();
  return absl::StrCat(config != nullptr ? config : "OpenBLAS (no config)", ", core ",
                      core != nullptr ? core : "unknown");
}

}  // namespace gift::transform
