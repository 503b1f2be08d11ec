// What the push-pull engine tests share: an engine on the in-process
// transport, test tensors, their chunk routes and gradients, and a local
// re-computation of what the servers and the engine do (the exact reference
// results are compared with, bit for bit).
#ifndef GIFT_TESTS_WORKER_ENGINE_TEST_UTIL_H_
#define GIFT_TESTS_WORKER_ENGINE_TEST_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/codec/codec.h"
#include "common/codec/reduce.h"
#include "common/dataplane/chunk_rng_key.h"
#include "common/dataplane/chunk_shape.h"
#include "common/transform/gradient_transform.h"
#include "common/transport/inproc/inproc_transport.h"
#include "gtest/gtest.h"
#include "worker/engine/push_pull_engine.h"

namespace gift::worker::testing {

// A push-pull engine on the in-process transport of `hub` (not owned; it
// outlives the engine) whose steps time out after `timeout`.
inline absl::StatusOr<std::unique_ptr<PushPullEngine>> InprocEngine(transport::InprocHub* hub,
                                                                    absl::Duration timeout) {
  return PushPullEngine::Create(
      [hub](transport::TransportHandlers h) {
        return transport::CreateInprocTransport(hub, std::move(h));
      },
      {.timeout = timeout});
}

// The shapes of `t`'s chunks, in order (what TensorBufferCache::For takes).
inline std::vector<dataplane::ChunkShape> ChunkShapes(const TensorStep& t) {
  std::vector<dataplane::ChunkShape> shapes;
  for (const ChunkRoute& c : t.chunks) {
    shapes.push_back(
        dataplane::ChunkShapeOf(t.rows * t.cols, t.cols, c.offset, c.num_elements).value());
  }
  return shapes;
}

struct Tensor {
  uint64_t id, rows, cols;
  uint64_t rows_per_chunk;  // 0: pieces of 512 of a single row
  bool transformed;
};

inline std::vector<ChunkRoute> Routes(const Tensor& t, const std::vector<std::string>& servers) {
  std::vector<ChunkRoute> routes;
  const uint64_t total = t.rows * t.cols;
  const uint64_t step = t.rows_per_chunk == 0 ? 512 : t.rows_per_chunk * t.cols;
  for (uint64_t offset = 0, i = 0; offset < total; offset += step, ++i) {
    routes.push_back({.index = static_cast<uint32_t>(i),
                      .offset = offset,
                      .num_elements = std::min(step, total - offset),
                      .server = servers[(t.id + i) % servers.size()]});
  }
  return routes;
}

inline std::vector<float> Gradient(const Tensor& t, uint32_t rank, uint64_t step) {
  std::mt19937 rng(static_cast<uint32_t>(t.id * 1000 + step * 10 + rank));
  std::normal_distribution<float> normal;
  std::vector<float> g(t.rows * t.cols);
  for (float& x : g) x = normal(rng) * (1.0f + 0.1f * rank);
  return g;
}

// The average the engines must produce for `t` at `step`, computed locally:
// each rank's gradient (through `transform` when not null) encoded per chunk
// with `push`, the servers' FP32 sum with 1/world re-encoded with `pull`,
// decoded, and inverse-transformed.
inline std::vector<float> LocalAverage(const Tensor& t, uint64_t step, uint32_t world,
                                       const std::vector<std::string>& servers,
                                       const codec::CodecSpec& push, const codec::CodecSpec& pull,
                                       const transform::GradientTransform* transform) {
  const auto rows = static_cast<int64_t>(t.rows), cols = static_cast<int64_t>(t.cols);
  std::vector<std::vector<float>> x;
  for (uint32_t r = 0; r < world; ++r) {
    x.push_back(Gradient(t, r, step));
    if (transform != nullptr) {
      EXPECT_TRUE(transform->Forward(x.back().data(), rows, cols, x.back().data()).ok());
    }
  }
  std::vector<float> avg(t.rows * t.cols);
  for (const ChunkRoute& c : Routes(t, servers)) {
    const auto shape = dataplane::ChunkShapeOf(t.rows * t.cols, t.cols, c.offset, c.num_elements);
    std::vector<codec::EncodedTensor> encoded;
    std::vector<codec::EncodedView> views;
    for (uint32_t r = 0; r < world; ++r) {
      encoded.push_back(codec::EncodedTensor::Create(push, shape->rows, shape->cols).value());
      EXPECT_TRUE(codec::Encode(x[r].data() + c.offset, encoded.back().mutable_view(),
                                dataplane::ChunkRngKey(t.id, c.index, step, r))
                      .ok());
    }
    for (const auto& e : encoded) views.push_back(e.view());
    auto out = codec::EncodedTensor::Create(pull, shape->rows, shape->cols).value();
    std::vector<float> sum(c.num_elements);
    EXPECT_TRUE(codec::ReduceEncoded(views, sum.data(), 1.0f / world, out.mutable_view(),
                                     {.tensor = t.id, .step = step, .rank = 0})
                    .ok());
    EXPECT_TRUE(codec::Decode(out.view(), avg.data() + c.offset).ok());
  }
  if (transform != nullptr) {
    EXPECT_TRUE(transform->Inverse(avg.data(), rows, cols, avg.data()).ok());
  }
  return avg;
}

}  // namespace gift::worker::testing

#endif  // GIFT_TESTS_WORKER_ENGINE_TEST_UTIL_H_
