#include "common/codec/reduce.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/codec/pieces.h"

namespace gift::codec {

absl::Status ReduceEncoded(absl::Span<const EncodedView> inputs, float* sum, float post_scale,
                           const MutableEncodedView& out, const RngKey& key,
                           const CodecOptions& options) {
  if (inputs.empty()) return absl::InvalidArgumentError("reduce needs at least one input");
  const uint64_t rows = inputs[0].rows, cols = inputs[0].cols;
  std::vector<EncodedLayout> layouts;
  layouts.reserve(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    const EncodedView& in = inputs[k];
    if (in.rows != rows || in.cols != cols) {
      return absl::InvalidArgumentError(absl::StrCat("reduce input ", k, " is ", in.rows, " x ",
                                                     in.cols, ", input 0 is ", rows, " x ", cols));
    }
    absl::StatusOr<EncodedLayout> layout = ComputeLayout(in.spec, rows, cols);
    if (!layout.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("reduce input ", k, ": ", layout.status().message()));
    }
    if (layout->num_elements > 0 &&
        (in.codes == nullptr || (layout->scale_bytes > 0 && in.scales == nullptr))) {
      return absl::InvalidArgumentError(absl::StrCat("reduce input ", k, " has a null buffer"));
    }
    layouts.push_back(*layout);
  }
  if (out.codes != nullptr && (out.rows != rows || out.cols != cols)) {
    return absl::InvalidArgumentError(absl::StrCat("reduce output is ", out.rows, " x ", out.cols,
                                                   ", inputs are ", rows, " x ", cols));
  }
  if (sum == nullptr && layouts[0].num_elements > 0) {
    return absl::InvalidArgumentError("reduce sum buffer is null");
  }
  const internal::ElementLoops& loops = internal::PickLoops(options.use_simd);
  internal::ForEachPiece(rows, cols, options.pool, [&](const internal::Piece& piece) {
    float* row = sum + piece.row * cols;
    for (size_t k = 0; k < inputs.size(); ++k) {
      internal::DecodePiece(inputs[k], layouts[k], loops, piece, row, /*accumulate=*/k > 0);
    }
    if (post_scale != 1.0f) {
      for (uint64_t c = piece.c0; c < piece.c1; ++c) row[c] = row[c] * post_scale;
    }
  });
  if (out.codes == nullptr) return absl::OkStatus();
  return Encode(sum, out, key, options);
}

}  // namespace gift::codec
