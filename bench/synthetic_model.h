// The synthetic model of `gift-bench cluster` and `gift-bench model`'s
// calibration runs: the tensor list of a Llama-style model and deterministic
// gradient-like data for every (tensor, step, worker).
//
// Thread safety: GradientSource is immutable after construction; Fill may be
// called from any number of threads at once.
#ifndef GIFT_BENCH_SYNTHETIC_MODEL_H_
#define GIFT_BENCH_SYNTHETIC_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gift::bench {

struct ModelTensor {
  std::string name;
  std::vector<int64_t> shape;
  int64_t rows = 0;  // 1 for a vector
  int64_t cols = 0;
  size_t elements() const { return static_cast<size_t>(rows * cols); }
  bool matrix() const { return shape.size() == 2; }
};

// One Llama-style block per layer: attention q, k, v, o (d x d), MLP gate and
// up (2.75d x d), down (d x 2.75d), and the two RMSNorm weights (d).
std::vector<ModelTensor> ModelTensors(int64_t d, int layers);

// Gradients: a fixed Gaussian field per tensor, rolled by a (step, worker)
// dependent number of rows, times a per-tensor column profile spanning three
// decades (columns in a random order: a property of the "model", the same
// for every worker and step, so a learned basis has something to find) and a
// per-(step, worker, column) jitter in [1/2, 2]. Cheap to apply every step
// (two multiplies per element), deterministic.
//
// kLowRank adds to every matrix's field a component shared by all workers
// and steps in its subspace, as real gradients have (docs/fidelity.md): A
// diag(s c) B with A (rows x 16) and B (16 x cols) fixed Gaussian per tensor,
// strengths s_j = 1/j scaled so that the component's RMS is twice the
// field's, and Gaussian coefficients c per (step, worker): what a learned
// basis can use. One 16-deep SGEMM per matrix and fill.
//
// Keeps a reference to `tensors`, which must outlive it.
enum class GradientShape { kField, kLowRank };

class GradientSource {
 public:
  explicit GradientSource(const std::vector<ModelTensor>& tensors,
                          GradientShape shape = GradientShape::kField);

  // Writes tensor t's gradient of (step, worker) to out[0, elements).
  void Fill(size_t t, uint64_t step, int worker, float* out) const;

 private:
  const std::vector<ModelTensor>& tensors_;
  std::vector<std::vector<float>> fields_;
  std::vector<std::vector<float>> profiles_;
  // kLowRank: A and B of each matrix (empty otherwise: Fill adds no component).
  std::vector<std::vector<float>> left_, right_;
};

// A 64-bit hash of the bytes of data[0, n), chained from `h`: to compare
// buffers across workers without copying them.
uint64_t HashFloats(const float* data, size_t n, uint64_t h);

}  // namespace gift::bench

#endif  // GIFT_BENCH_SYNTHETIC_MODEL_H_
