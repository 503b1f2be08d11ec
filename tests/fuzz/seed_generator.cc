// Writes the generated part of the seed corpora (tests/fuzz/corpus): valid
// examples of each binary format, built with the project's own writers, so
// that the fuzzers start from inputs that parse. The text seeds (TOML
// configs, giftctl command lines) are written by hand; see docs/fuzzing.md.
//
//   gift_fuzz_seed_generator tests/fuzz/corpus
//
// Deterministic: the same bytes every run.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "Eigen/Core"
#include "absl/strings/str_cat.h"
#include "bench/npy_file.h"
#include "common/codec/codec.h"
#include "common/codec/payload.h"
#include "common/dataplane/chunk_header.h"
#include "common/transform/basis_serialization.h"
#include "tests/fuzz/fuzz_inputs.pb.h"

namespace {

namespace fs = std::filesystem;
using gift::fuzz::CoordinatorCall;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "seed generator: %s\n", what.c_str());
  std::exit(1);
}

void Write(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << bytes;
}

// The mode byte of the checksummed formats (fuzz_input.h) + the bytes.
std::string Moded(bool fix, const std::string& bytes) {
  return std::string(1, fix ? '\1' : '\0') + bytes;
}

std::string Payload(const std::string& spec_text, std::vector<uint64_t> shape) {
  auto spec = gift::codec::ParseCodecSpec(spec_text);
  if (!spec.ok()) Die(spec.status().ToString());
  uint64_t elements = 1;
  for (uint64_t d : shape) elements *= d;
  const uint64_t cols = shape.back(), rows = elements / cols;
  std::vector<float> x(elements);
  for (uint64_t i = 0; i < elements; ++i) x[i] = static_cast<float>(i % 13) * 0.37f - 2.0f;
  auto tensor = gift::codec::EncodedTensor::Create(*spec, rows, cols);
  if (!tensor.ok()) Die(tensor.status().ToString());
  if (auto s = gift::codec::Encode(x.data(), tensor->mutable_view()); !s.ok()) Die(s.ToString());
  auto bytes = gift::codec::SerializePayload(tensor->view(), shape);
  if (!bytes.ok()) Die(bytes.status().ToString());
  return std::string(bytes->begin(), bytes->end());
}

std::string Basis(gift::transform::Sides sides, gift::transform::ResidualModel residual,
                  int64_t d_out, int64_t d_in, int64_t rank) {
  auto side = [&](int64_t n) {
    Eigen::MatrixXd a = Eigen::MatrixXd::Zero(n, n);
    for (int64_t i = 0; i < n; ++i) {
      a(i, i) = 1.0 + static_cast<double>(n - i);
      if (i + 1 < n) a(i, i + 1) = a(i + 1, i) = 0.25;
    }
    auto b = gift::transform::SideBasis::FromFactor(a, rank, {.residual = residual});
    if (!b.ok()) Die(b.status().ToString());
    return *std::move(b);
  };
  std::optional<gift::transform::SideBasis> out, in;
  if (sides == gift::transform::Sides::kOutput || sides == gift::transform::Sides::kBoth) {
    out = side(d_out);
  }
  if (sides == gift::transform::Sides::kInput || sides == gift::transform::Sides::kBoth) {
    in = side(d_in);
  }
  auto basis = gift::transform::TensorBasis::Create(
      {.tensor_id = 1, .version = 1, .d_out = d_out, .d_in = d_in, .config = {.sides = sides}},
      std::move(out), std::move(in));
  if (!basis.ok()) Die(basis.status().ToString());
  return gift::transform::SerializeTensorBasis(*basis);
}

void PayloadSeeds(const fs::path& dir) {
  int i = 0;
  for (const auto& [spec, shape] : std::vector<std::pair<std::string, std::vector<uint64_t>>>{
           {"e4m3/block128/rne", {4, 64}}, {"e5m2/tensor/sr", {3, 5}}, {"nvfp4", {2, 32}},
           {"bf16", {17}}, {"fp32", {2, 2, 3}}, {"e4m3/mx32/rne", {1, 64}},
           {"e4m3/block32/rne", {2, 40}}}) {
    const std::string bytes = Payload(spec, shape);
    Write(dir, absl::StrCat("valid-", i, ".bin"), Moded(false, bytes));
    Write(dir, absl::StrCat("fix-", i++, ".bin"), Moded(true, bytes));
  }
}

void ChunkHeaderSeeds(const fs::path& dir) {
  using gift::dataplane::ChunkKind;
  int i = 0;
  for (const gift::dataplane::ChunkHeader& h :
       {gift::dataplane::ChunkHeader{.kind = ChunkKind::kPush, .epoch = 3, .step = 10,
                                     .tensor_id = 7, .chunk_index = 2, .rank = 1, .world_size = 4},
        gift::dataplane::ChunkHeader{.kind = ChunkKind::kResult, .epoch = 1, .step = 1,
                                     .tensor_id = 1, .basis_version = 2, .rank = 4,
                                     .world_size = 4},
        gift::dataplane::ChunkHeader{.kind = ChunkKind::kAbort, .epoch = 2, .world_size = 2,
                                     .status_code = 10}}) {
    const auto bytes = gift::dataplane::SerializeChunkHeader(h);
    const std::string s(bytes.begin(), bytes.end());
    Write(dir, absl::StrCat("valid-", i, ".bin"), Moded(false, s));
    Write(dir, absl::StrCat("fix-", i++, ".bin"), Moded(true, s));
  }
}

void BasisSeeds(const fs::path& dir) {
  using gift::transform::ResidualModel;
  using gift::transform::Sides;
  Write(dir, "input-isotropic.bin", Moded(false, Basis(Sides::kInput, ResidualModel::kIsotropic, 3, 6, 2)));
  Write(dir, "output-diagonal.bin", Moded(true, Basis(Sides::kOutput, ResidualModel::kDiagonal, 5, 2, 2)));
  Write(dir, "both-isotropic.bin", Moded(true, Basis(Sides::kBoth, ResidualModel::kIsotropic, 4, 4, 1)));
  Write(dir, "both-diagonal.bin", Moded(false, Basis(Sides::kBoth, ResidualModel::kDiagonal, 3, 5, 2)));
}

void NpySeeds(const fs::path& dir) {
  using gift::bench::NpyDtype;
  const std::vector<double> v = {0.5, -1.25, 3.0, 1e-3, -7.5, 65504.0};
  int i = 0;
  for (NpyDtype dtype : {NpyDtype::kFloat16, NpyDtype::kFloat32, NpyDtype::kFloat64}) {
    for (int version : {1, 2, 3}) {
      auto bytes = gift::bench::EncodeNpy(v, 2, 3, dtype, version);
      if (!bytes.ok()) Die(bytes.status().ToString());
      Write(dir, absl::StrCat("npy-", i++, ".npy"), *bytes);
    }
  }
}

void PolicySeeds(const fs::path& dir) {
  gift::fuzz::PolicyInput in;
  Write(dir, "empty.bin", in.SerializeAsString());
  gift::v1::Policy* p = in.mutable_policy();
  p->mutable_transform()->set_rank(8);
  p->mutable_transform()->add_powers(0.25);
  p->mutable_transform()->add_powers(0.5);
  p->mutable_transform()->set_ema_decay(0.9);
  p->mutable_refresh()->set_period_steps(100);
  p->mutable_selection()->add_include("layers.*.weight");
  p->mutable_selection()->add_exclude("*.bias");
  gift::v1::TensorOverride* o = p->add_overrides();
  o->set_glob("embed*");
  o->set_enabled(false);
  gift::v1::TensorOverride* o2 = p->add_overrides();
  o2->set_glob("layers.?.attn*");
  o2->set_rank(4);
  for (const auto& [name, shape] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
           {"layers.0.weight", {64, 32}}, {"layers.1.bias", {64}}, {"embed.weight", {1000, 64}},
           {"layers.3.attn.q", {64, 64}}}) {
    gift::fuzz::PolicyQuery* q = in.add_queries();
    q->set_name(name);
    for (int64_t d : shape) q->add_shape(d);
    q->set_glob("layers.*");
  }
  Write(dir, "overrides.bin", in.SerializeAsString());
}

gift::fuzz::CoordinatorCall* Join(gift::fuzz::CoordinatorInput* in, const std::string& name,
                                  gift::v1::MemberRole role) {
  CoordinatorCall* c = in->add_calls();
  c->mutable_join()->set_name(name);
  c->mutable_join()->set_role(role);
  c->mutable_join()->set_data_address(absl::StrCat("inproc:", name));
  return c;
}

void CoordinatorSeeds(const fs::path& dir) {
  using gift::v1::MEMBER_ROLE_SERVER;
  using gift::v1::MEMBER_ROLE_WORKER;
  gift::fuzz::CoordinatorInput in;
  Join(&in, "w0", MEMBER_ROLE_WORKER);
  Join(&in, "w1", MEMBER_ROLE_WORKER);
  Join(&in, "s0", MEMBER_ROLE_SERVER);
  in.add_calls()->mutable_get_status();
  Write(dir, "joins.bin", in.SerializeAsString());

  // Register a tensor, publish a basis for it (the first worker owns the
  // first tensor), fetch and acknowledge it, heartbeat, leave.
  CoordinatorCall* reg = in.add_calls();
  reg->set_member_ref(1);
  gift::v1::TensorSpec* t = reg->mutable_register_tensors()->add_tensors();
  t->set_name("layers.0.weight");
  t->add_shape(3);
  t->add_shape(6);
  t->set_dtype(gift::v1::DTYPE_FLOAT32);
  for (int ref : {1, 2}) {
    CoordinatorCall* pub = in.add_calls();
    pub->set_member_ref(ref);
    gift::fuzz::PublishBasisCall* p = pub->mutable_publish_basis();
    p->set_fix_header(true);
    const std::string basis =
        Basis(gift::transform::Sides::kInput, gift::transform::ResidualModel::kIsotropic, 3, 6, 2);
    gift::v1::PublishBasisRequest* first = p->add_messages();
    first->mutable_header()->set_tensor_id(1);
    first->mutable_header()->set_version(1);
    first->mutable_header()->set_rank(2);
    first->set_data(basis.substr(0, 100));
    p->add_messages()->set_data(basis.substr(100));
  }
  for (int ref : {1, 2}) {
    CoordinatorCall* f = in.add_calls();
    f->set_member_ref(ref);
    f->mutable_fetch_basis()->set_tensor_id(1);
    f->mutable_fetch_basis()->set_version(1);
    CoordinatorCall* a = in.add_calls();
    a->set_member_ref(ref);
    a->mutable_ack_basis()->set_tensor_id(1);
    a->mutable_ack_basis()->set_version(1);
  }
  CoordinatorCall* hb = in.add_calls();
  hb->set_member_ref(2);
  hb->set_advance_ms(3000);
  hb->mutable_heartbeat()->set_last_step(5);
  in.add_calls()->mutable_watch();
  Write(dir, "refresh.bin", in.SerializeAsString());

  // The operator calls, then an expiry and a leave.
  CoordinatorCall* sp = in.add_calls();
  sp->mutable_set_policy()->mutable_policy()->mutable_transform()->set_rank(4);
  sp->mutable_set_policy()->mutable_policy()->mutable_refresh()->set_period_steps(10);
  in.add_calls()->mutable_get_policy();
  in.add_calls()->mutable_request_refresh()->set_tensor_glob("layers.*");
  in.add_calls()->mutable_set_rank()->set_rank(3);
  CoordinatorCall* drain = in.add_calls();
  drain->mutable_drain()->set_name("w1");
  CoordinatorCall* leave = in.add_calls();
  leave->set_member_ref(1);
  leave->mutable_leave();
  CoordinatorCall* expire = in.add_calls();
  expire->set_advance_ms(20000);
  expire->mutable_get_status();
  Write(dir, "operator.bin", in.SerializeAsString());
}

gift::v1::BufferSpec* Buffer(gift::v1::RegisterBuffersRequest* r, const std::string& name,
                             int64_t rows, int64_t cols, const std::string& shm, uint64_t offset) {
  gift::v1::BufferSpec* b = r->add_buffers();
  b->set_name(name);
  b->add_shape(rows);
  b->add_shape(cols);
  b->set_dtype(gift::v1::DTYPE_FLOAT32);
  b->mutable_buffer()->set_shm_name(shm);
  b->mutable_buffer()->set_offset_bytes(offset);
  b->mutable_buffer()->set_size_bytes(static_cast<uint64_t>(rows * cols) * 4);
  return b;
}

// The shared-memory objects worker_fuzzer.cc creates.
void WorkerSeeds(const fs::path& dir) {
  gift::fuzz::WorkerInput in;
  in.add_calls()->mutable_get_worker_info();
  in.add_calls()->mutable_push_pull()->set_step(1);  // nothing registered yet
  Write(dir, "info.bin", in.SerializeAsString());

  gift::fuzz::WorkerInput reg;
  gift::v1::RegisterBuffersRequest* r = reg.add_calls()->mutable_register_buffers();
  Buffer(r, "layers.0.weight", 16, 16, "/gift-fuzz-worker-a", 0);
  Buffer(r, "layers.0.bias", 1, 16, "/gift-fuzz-worker-a", 1024);
  reg.add_calls()->mutable_get_worker_info();
  Write(dir, "register.bin", reg.SerializeAsString());

  gift::fuzz::WorkerInput step = reg;
  for (uint64_t s : {1, 2}) {
    gift::v1::PushPullRequest* p = step.add_calls()->mutable_push_pull();
    p->set_step(s);
    p->set_measure_error(s == 2);
  }
  gift::v1::SubmitActivationStatsRequest* a = step.add_calls()->mutable_submit_activation_stats();
  a->set_tensor_id(1);
  a->set_step(2);
  a->set_num_samples(8);
  a->mutable_gram()->set_shm_name("/gift-fuzz-worker-b");
  a->mutable_gram()->set_size_bytes(16 * 16 * 4);
  step.add_calls()->mutable_push_pull()->set_step(3);
  step.mutable_calls(step.calls_size() - 1)->mutable_push_pull()->add_tensor_ids(2);
  Write(dir, "steps.bin", step.SerializeAsString());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) Die("usage: gift_fuzz_seed_generator CORPUS_DIR");
  const fs::path root(argv[1]);
  PayloadSeeds(root / "payload_fuzzer");
  ChunkHeaderSeeds(root / "chunk_header_fuzzer");
  BasisSeeds(root / "basis_fuzzer");
  NpySeeds(root / "npy_fuzzer");
  PolicySeeds(root / "policy_fuzzer");
  CoordinatorSeeds(root / "coordinator_fuzzer");
  WorkerSeeds(root / "worker_fuzzer");
  std::printf("seeds written under %s\n", root.c_str());
  return 0;
}
