#include "common/transform/basis_serialization.h"

#include <bit>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/crc32c.h"
#include "common/base/status_macros.h"

namespace gift::transform {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the basis byte form is written with memcpy on little-endian hosts");

constexpr uint32_t kMagic = 0x42544647;  // "GFTB" in little-endian byte order
// magic, format version, total size, tensor id, version, d_out, d_in, sides
// + padding, power.
constexpr size_t kHeaderBytes = 4 + 4 + 8 + 8 + 8 + 8 + 8 + 8 + 8;
constexpr size_t kCrcBytes = 4;

class Writer {
 public:
  template <typename T>
  void Put(T value) {
    char bytes[sizeof(T)];
    std::memcpy(bytes, &value, sizeof(T));
    out_.append(bytes, sizeof(T));
  }
  void PutZeros(size_t n) { out_.append(n, '\0'); }
  void PutDoubles(const double* data, size_t n) {
    out_.append(reinterpret_cast<const char*>(data), n * sizeof(double));
  }
  std::string& bytes() { return out_; }

 private:
  std::string out_;
};

// Bounds-checked reads from a byte range.
class Reader {
 public:
  explicit Reader(absl::string_view bytes) : bytes_(bytes) {}

  size_t remaining() const { return bytes_.size() - pos_; }

  template <typename T>
  absl::Status Get(T* value) {
    if (remaining() < sizeof(T)) return Truncated();
    std::memcpy(value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return absl::OkStatus();
  }
  absl::Status ExpectZeros(size_t n) {
    if (remaining() < n) return Truncated();
    for (size_t i = 0; i < n; ++i) {
      if (bytes_[pos_ + i] != '\0') return absl::InvalidArgumentError("nonzero reserved bytes");
    }
    pos_ += n;
    return absl::OkStatus();
  }
  // Reads `count` doubles; count was bounded by the caller so that
  // count * 8 does not overflow.
  absl::Status GetDoubles(double* data, size_t count) {
    if (count > remaining() / sizeof(double)) return Truncated();
    std::memcpy(data, bytes_.data() + pos_, count * sizeof(double));
    pos_ += count * sizeof(double);
    return absl::OkStatus();
  }

 private:
  static absl::Status Truncated() { return absl::DataLossError("basis bytes are truncated"); }

  absl::string_view bytes_;
  size_t pos_ = 0;
};

void WriteSide(const SideBasis& side, Writer& w) {
  const SideBasis::Parts& p = side.parts();
  const int64_t n = side.dim();
  const int64_t r = side.rank();
  w.Put(static_cast<uint8_t>(p.residual));
  w.PutZeros(7);
  w.Put(static_cast<uint64_t>(n));
  w.Put(static_cast<uint64_t>(r));
  w.Put(p.damping_eps);
  w.Put(p.damping);
  w.Put(p.trace);
  w.PutDoubles(p.lam.data(), r);
  w.PutDoubles(p.d.data(), p.d.size());
  w.PutDoubles(p.u.data(), n * r);
  if (p.residual == ResidualModel::kDiagonal) w.PutDoubles(p.z.data(), n * r);
  w.PutDoubles(p.one_plus_sig.data(), r);
}

absl::StatusOr<SideBasis> ReadSide(Reader& reader, uint64_t expected_dim) {
  uint8_t residual = 0;
  uint64_t n = 0, r = 0;
  SideBasis::Parts p;
  GIFT_RETURN_IF_ERROR(reader.Get(&residual));
  GIFT_RETURN_IF_ERROR(reader.ExpectZeros(7));
  GIFT_RETURN_IF_ERROR(reader.Get(&n));
  GIFT_RETURN_IF_ERROR(reader.Get(&r));
  if (residual != static_cast<uint8_t>(ResidualModel::kIsotropic) &&
      residual != static_cast<uint8_t>(ResidualModel::kDiagonal)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown residual model ", residual));
  }
  p.residual = static_cast<ResidualModel>(residual);
  if (n != expected_dim || r < 1 || r > n) {
    return absl::InvalidArgumentError(absl::StrCat("side of dimension ", n, " and rank ", r,
                                                   " where ", expected_dim, " was expected"));
  }
  // Every array must fit in what is left, which bounds n * r * 8.
  const size_t max_doubles = reader.remaining() / sizeof(double);
  if (n > max_doubles || r > max_doubles / n) {
    return absl::DataLossError("basis bytes are truncated");
  }
  const auto ni = static_cast<int64_t>(n);
  const auto ri = static_cast<int64_t>(r);
  GIFT_RETURN_IF_ERROR(reader.Get(&p.damping_eps));
  GIFT_RETURN_IF_ERROR(reader.Get(&p.damping));
  GIFT_RETURN_IF_ERROR(reader.Get(&p.trace));
  p.lam.resize(ri);
  GIFT_RETURN_IF_ERROR(reader.GetDoubles(p.lam.data(), r));
  p.d.resize(p.residual == ResidualModel::kIsotropic ? 1 : ni);
  GIFT_RETURN_IF_ERROR(reader.GetDoubles(p.d.data(), p.d.size()));
  p.u.resize(ni, ri);
  GIFT_RETURN_IF_ERROR(reader.GetDoubles(p.u.data(), n * r));
  if (p.residual == ResidualModel::kDiagonal) {
    p.z.resize(ni, ri);
    GIFT_RETURN_IF_ERROR(reader.GetDoubles(p.z.data(), n * r));
  } else {
    p.z = p.u;
  }
  p.one_plus_sig.resize(ri);
  GIFT_RETURN_IF_ERROR(reader.GetDoubles(p.one_plus_sig.data(), r));
  return SideBasis::FromParts(std::move(p));
}

}  // namespace

std::string SerializeTensorBasis(const TensorBasis& basis) {
  const TensorBasisHeader& h = basis.header();
  Writer w;
  w.Put(kMagic);
  w.Put(kBasisFormatVersion);
  w.Put(uint64_t{0});  // total size, patched below
  w.Put(h.tensor_id);
  w.Put(h.version);
  w.Put(static_cast<uint64_t>(h.d_out));
  w.Put(static_cast<uint64_t>(h.d_in));
  w.Put(static_cast<uint8_t>(h.config.sides));
  w.PutZeros(7);
  w.Put(h.config.power);
  if (basis.output_side().has_value()) WriteSide(*basis.output_side(), w);
  if (basis.input_side().has_value()) WriteSide(*basis.input_side(), w);
  std::string& out = w.bytes();
  const uint64_t total = out.size() + kCrcBytes;
  std::memcpy(out.data() + 8, &total, sizeof(total));
  w.Put(crc32c::Value(out.data(), out.size()));
  return std::move(out);
}

absl::StatusOr<TensorBasis> ParseTensorBasis(absl::string_view bytes) {
  if (bytes.size() < kHeaderBytes + kCrcBytes) {
    return absl::DataLossError(absl::StrCat("basis bytes are truncated (", bytes.size(), ")"));
  }
  const size_t body = bytes.size() - kCrcBytes;
  Reader body_reader(bytes.substr(0, body));
  uint32_t magic = 0, format_version = 0;
  uint64_t total = 0;
  GIFT_RETURN_IF_ERROR(body_reader.Get(&magic));
  GIFT_RETURN_IF_ERROR(body_reader.Get(&format_version));
  GIFT_RETURN_IF_ERROR(body_reader.Get(&total));
  if (total != bytes.size()) {
    return absl::DataLossError(
        absl::StrCat("basis bytes hold ", bytes.size(), " bytes, the header says ", total));
  }
  uint32_t stored_crc = 0;
  std::memcpy(&stored_crc, bytes.data() + body, kCrcBytes);
  if (crc32c::Value(bytes.data(), body) != stored_crc) {
    return absl::DataLossError("basis checksum mismatch");
  }
  if (magic != kMagic) return absl::InvalidArgumentError("not a basis (bad magic)");
  if (format_version != kBasisFormatVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("basis format version ", format_version, " is not supported"));
  }

  TensorBasisHeader h;
  uint64_t d_out = 0, d_in = 0;
  uint8_t sides = 0;
  GIFT_RETURN_IF_ERROR(body_reader.Get(&h.tensor_id));
  GIFT_RETURN_IF_ERROR(body_reader.Get(&h.version));
  GIFT_RETURN_IF_ERROR(body_reader.Get(&d_out));
  GIFT_RETURN_IF_ERROR(body_reader.Get(&d_in));
  GIFT_RETURN_IF_ERROR(body_reader.Get(&sides));
  GIFT_RETURN_IF_ERROR(body_reader.ExpectZeros(7));
  GIFT_RETURN_IF_ERROR(body_reader.Get(&h.config.power));
  constexpr uint64_t kMaxDim = std::numeric_limits<int32_t>::max();
  if (d_out < 1 || d_in < 1 || d_out > kMaxDim || d_in > kMaxDim) {
    return absl::InvalidArgumentError(absl::StrCat("bad tensor shape ", d_out, "x", d_in));
  }
  if (sides < static_cast<uint8_t>(Sides::kInput) || sides > static_cast<uint8_t>(Sides::kBoth)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown sides ", sides));
  }
  h.d_out = static_cast<int64_t>(d_out);
  h.d_in = static_cast<int64_t>(d_in);
  h.config.sides = static_cast<Sides>(sides);

  std::optional<SideBasis> output_side, input_side;
  if (h.config.sides != Sides::kInput) {
    GIFT_ASSIGN_OR_RETURN(SideBasis side, ReadSide(body_reader, d_out));
    output_side.emplace(std::move(side));
  }
  if (h.config.sides != Sides::kOutput) {
    GIFT_ASSIGN_OR_RETURN(SideBasis side, ReadSide(body_reader, d_in));
    input_side.emplace(std::move(side));
  }
  if (body_reader.remaining() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(body_reader.remaining(), " unexpected bytes after the basis"));
  }
  return TensorBasis::Create(h, std::move(output_side), std::move(input_side));
}

}  // namespace gift::transform
