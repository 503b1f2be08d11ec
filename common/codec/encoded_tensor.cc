#include "common/codec/encoded_tensor.h"

namespace gift::codec {

absl::StatusOr<EncodedTensor> EncodedTensor::Create(const CodecSpec& spec, uint64_t rows,
                                                    uint64_t cols) {
  absl::StatusOr<EncodedLayout> layout = ComputeLayout(spec, rows, cols);
  if (!layout.ok()) return layout.status();
  return EncodedTensor(spec, *layout);
}

EncodedView EncodedTensor::view() const {
  return EncodedView{spec_, layout_.rows, layout_.cols, codes_.data(), scales_.data()};
}

MutableEncodedView EncodedTensor::mutable_view() {
  return MutableEncodedView{spec_, layout_.rows, layout_.cols, codes_.data(), scales_.data()};
}

}  // namespace gift::codec
