#include "bench/npy_file.h"

#include <Eigen/Core>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/base/status_macros.h"

namespace gift::bench {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;

// What the header dict says.
struct Header {
  NpyDtype dtype = NpyDtype::kFloat32;
  std::vector<uint64_t> shape;
  size_t data_offset = 0;
};

absl::Status Error(absl::string_view name, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(name, ": not a supported .npy file: ", problem));
}

size_t ItemSize(NpyDtype dtype) {
  switch (dtype) {
    case NpyDtype::kFloat16:
      return 2;
    case NpyDtype::kFloat32:
      return 4;
    case NpyDtype::kFloat64:
      return 8;
  }
  return 0;
}

absl::string_view Descr(NpyDtype dtype) {
  switch (dtype) {
    case NpyDtype::kFloat16:
      return "<f2";
    case NpyDtype::kFloat32:
      return "<f4";
    case NpyDtype::kFloat64:
      return "<f8";
  }
  return "";
}

// A recursive-descent reader of the Python dict literal NumPy writes, e.g.
// {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
class DictReader {
 public:
  explicit DictReader(absl::string_view text) : text_(text) {}

  // Fills descr, fortran_order and shape; fails on anything unexpected.
  absl::Status Read(std::string* descr, bool* fortran_order, std::vector<uint64_t>* shape) {
    bool have_descr = false, have_fortran = false, have_shape = false;
    if (!Consume('{')) return Problem("the header does not start with '{'");
    while (true) {
      SkipSpace();
      if (Consume('}')) break;
      std::string key;
      GIFT_RETURN_IF_ERROR(ReadString(&key));
      if (!Consume(':')) return Problem(absl::StrCat("no ':' after key '", key, "'"));
      if (key == "descr") {
        GIFT_RETURN_IF_ERROR(ReadString(descr));
        have_descr = true;
      } else if (key == "fortran_order") {
        GIFT_RETURN_IF_ERROR(ReadBool(fortran_order));
        have_fortran = true;
      } else if (key == "shape") {
        GIFT_RETURN_IF_ERROR(ReadShape(shape));
        have_shape = true;
      } else {
        return Problem(absl::StrCat("unexpected header key '", key, "'"));
      }
      if (Consume(',')) continue;
      if (Consume('}')) break;
      return Problem("expected ',' or '}' in the header dict");
    }
    SkipSpace();
    if (pos_ != text_.size()) return Problem("unexpected text after the header dict");
    if (!have_descr || !have_fortran || !have_shape) {
      return Problem("the header lacks one of 'descr', 'fortran_order', 'shape'");
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Problem(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(what, " (at header offset ", pos_, ")"));
  }

  void SkipSpace() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }

  bool Consume(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  absl::Status ReadString(std::string* out) {
    SkipSpace();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) {
      return Problem("expected a quoted string");
    }
    const char quote = text_[pos_++];
    const size_t end = text_.find(quote, pos_);
    if (end == absl::string_view::npos) return Problem("unterminated string");
    *out = std::string(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return absl::OkStatus();
  }

  absl::Status ReadBool(bool* out) {
    SkipSpace();
    for (const auto& [word, value] : {std::pair<absl::string_view, bool>{"True", true},
                                      std::pair<absl::string_view, bool>{"False", false}}) {
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        *out = value;
        return absl::OkStatus();
      }
    }
    return Problem("'fortran_order' is not True or False");
  }

  // A tuple of non-negative integers: (), (3,), (3, 4), (3, 4,).
  absl::Status ReadShape(std::vector<uint64_t>* shape) {
    shape->clear();
    if (!Consume('(')) return Problem("'shape' is not a tuple");
    while (true) {
      SkipSpace();
      if (Consume(')')) return absl::OkStatus();
      const size_t start = pos_;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
      uint64_t dim = 0;
      if (pos_ == start || pos_ - start > 19 ||
          !absl::SimpleAtoi(text_.substr(start, pos_ - start), &dim)) {
        return Problem("'shape' holds something other than a non-negative integer");
      }
      shape->push_back(dim);
      if (shape->size() > 32) return Problem("'shape' has more than 32 dimensions");
      if (Consume(',')) continue;
      if (Consume(')')) return absl::OkStatus();
      return Problem("expected ',' or ')' in 'shape'");
    }
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

absl::StatusOr<Header> ParseHeader(absl::string_view bytes, absl::string_view name) {
  if (bytes.size() < kMagicSize + 2 || bytes.substr(0, kMagicSize) != kMagic) {
    return Error(name, "the magic string \\x93NUMPY is missing");
  }
  const auto major = static_cast<uint8_t>(bytes[6]);
  const auto minor = static_cast<uint8_t>(bytes[7]);
  if (major < 1 || major > 3 || minor != 0) {
    return Error(name,
                 absl::StrCat("format version ", major, ".", minor, " (supported: 1.0, 2.0, 3.0)"));
  }
  const size_t length_bytes = major == 1 ? 2 : 4;
  const size_t header_start = kMagicSize + 2 + length_bytes;
  if (bytes.size() < header_start) return Error(name, "the file ends inside the preamble");
  uint32_t header_len = 0;
  for (size_t i = 0; i < length_bytes; ++i) {
    header_len |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[kMagicSize + 2 + i])) << (8 * i);
  }
  if (header_len > kMaxNpyHeaderBytes) {
    return Error(name, absl::StrCat("the header claims ", header_len, " bytes (more than ",
                                    kMaxNpyHeaderBytes, ")"));
  }
  if (header_len > bytes.size() - header_start) {
    return Error(name, absl::StrCat("the header claims ", header_len, " bytes but only ",
                                    bytes.size() - header_start, " follow the preamble"));
  }
  const absl::string_view text = bytes.substr(header_start, header_len);
  if (major < 3) {
    for (char c : text) {
      if (static_cast<unsigned char>(c) > 127) {
        return Error(name, "the header of a version 1/2 file is not ASCII");
      }
    }
  }

  std::string descr;
  bool fortran_order = false;
  Header h;
  if (absl::Status s = DictReader(text).Read(&descr, &fortran_order, &h.shape); !s.ok()) {
    return Error(name, s.message());
  }
  if (descr == "<f2") {
    h.dtype = NpyDtype::kFloat16;
  } else if (descr == "<f4") {
    h.dtype = NpyDtype::kFloat32;
  } else if (descr == "<f8") {
    h.dtype = NpyDtype::kFloat64;
  } else {
    return Error(name, absl::StrCat("dtype '", descr,
                                    "' (supported: '<f2', '<f4', '<f8', little-endian floats)"));
  }
  if (fortran_order) {
    return Error(name, "fortran_order is True; save a C-order array (np.ascontiguousarray)");
  }
  if (h.shape.size() != 2) {
    return Error(name, absl::StrCat("the array has ", h.shape.size(), " dimensions, not 2"));
  }
  h.data_offset = header_start + header_len;
  return h;
}

// Element i of the data as double.
double LoadElement(const char* data, NpyDtype dtype, size_t i) {
  switch (dtype) {
    case NpyDtype::kFloat16: {
      uint16_t bits;
      std::memcpy(&bits, data + 2 * i, 2);
      return static_cast<double>(static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(bits)));
    }
    case NpyDtype::kFloat32: {
      float v;
      std::memcpy(&v, data + 4 * i, 4);
      return v;
    }
    case NpyDtype::kFloat64: {
      double v;
      std::memcpy(&v, data + 8 * i, 8);
      return v;
    }
  }
  return 0.0;
}

template <typename T>
absl::StatusOr<NpyMatrix<T>> Parse(absl::string_view bytes, absl::string_view name,
                                   bool allow_float64) {
  static_assert(std::numeric_limits<float>::is_iec559 && std::endian::native == std::endian::little,
                "the .npy reader assumes a little-endian host with IEEE floats");
  GIFT_ASSIGN_OR_RETURN(Header h, ParseHeader(bytes, name));
  if (!allow_float64 && h.dtype == NpyDtype::kFloat64) {
    return Error(name, "dtype '<f8' where '<f2' or '<f4' is expected (gradients are read as FP32)");
  }
  const uint64_t rows = h.shape[0], cols = h.shape[1];
  constexpr uint64_t kMaxDim = uint64_t{1} << 40;
  const size_t item = ItemSize(h.dtype);
  if (rows == 0 || cols == 0) {
    return Error(name, absl::StrCat("the shape (", rows, ", ", cols, ") is empty"));
  }
  if (rows > kMaxDim || cols > kMaxDim || rows > (uint64_t{1} << 60) / item / cols) {
    return Error(name, absl::StrCat("the shape (", rows, ", ", cols, ") is too large"));
  }
  const uint64_t count = rows * cols;
  const uint64_t data_bytes = count * item;
  const uint64_t available = bytes.size() - h.data_offset;
  if (available != data_bytes) {
    return Error(name, absl::StrCat("the shape (", rows, ", ", cols, ") of ", Descr(h.dtype),
                                    " needs ", data_bytes, " data bytes but the file has ",
                                    available, available < data_bytes ? " (truncated)" : ""));
  }
  NpyMatrix<T> m;
  m.rows = static_cast<int64_t>(rows);
  m.cols = static_cast<int64_t>(cols);
  m.stored = h.dtype;
  m.values.resize(count);
  const char* data = bytes.data() + h.data_offset;
  for (uint64_t i = 0; i < count; ++i) {
    m.values[i] = static_cast<T>(LoadElement(data, h.dtype, i));
  }
  return m;
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return absl::InvalidArgumentError(absl::StrCat(path, ": read error"));
  return std::move(buffer).str();
}

}  // namespace

absl::StatusOr<NpyMatrix<float>> ParseNpyFloat(absl::string_view bytes, absl::string_view name) {
  return Parse<float>(bytes, name, /*allow_float64=*/false);
}

absl::StatusOr<NpyMatrix<double>> ParseNpyDouble(absl::string_view bytes, absl::string_view name) {
  return Parse<double>(bytes, name, /*allow_float64=*/true);
}

absl::StatusOr<NpyMatrix<float>> ReadNpyFloat(const std::string& path) {
  GIFT_ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(path));
  return ParseNpyFloat(bytes, path);
}

absl::StatusOr<NpyMatrix<double>> ReadNpyDouble(const std::string& path) {
  GIFT_ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(path));
  return ParseNpyDouble(bytes, path);
}

absl::StatusOr<std::string> EncodeNpy(absl::Span<const double> values, int64_t rows, int64_t cols,
                                      NpyDtype dtype, int major_version) {
  if (rows < 1 || cols < 1 ||
      static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols) !=
          static_cast<uint64_t>(values.size())) {
    return absl::InvalidArgumentError(absl::StrCat("EncodeNpy: shape ", rows, "x", cols,
                                                   " does not match ", values.size(), " values"));
  }
  if (major_version < 1 || major_version > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("EncodeNpy: format version ", major_version, " (supported: 1, 2, 3)"));
  }
  std::string dict =
      absl::StrCat("{'descr': '", Descr(dtype), "', 'fortran_order': False, 'shape': (", rows, ", ",
                   cols, "), }");
  // Pad with spaces and a final newline so the data starts on a 64-byte
  // boundary, as NumPy does.
  const size_t preamble = kMagicSize + 2 + (major_version == 1 ? 2 : 4);
  const size_t total = (preamble + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - preamble - dict.size() - 1, ' ');
  dict.push_back('\n');
  if (major_version == 1 && dict.size() > 0xffff) {
    return absl::InvalidArgumentError("EncodeNpy: the header does not fit a version 1 file");
  }

  std::string out(kMagic, kMagicSize);
  out.push_back(static_cast<char>(major_version));
  out.push_back('\0');
  const auto len = static_cast<uint32_t>(dict.size());
  for (size_t i = 0; i < preamble - kMagicSize - 2; ++i) {
    out.push_back(static_cast<char>((len >> (8 * i)) & 0xff));
  }
  out += dict;
  const size_t item = ItemSize(dtype);
  const size_t data_start = out.size();
  out.resize(data_start + values.size() * item);
  char* data = out.data() + data_start;
  for (size_t i = 0; i < values.size(); ++i) {
    switch (dtype) {
      case NpyDtype::kFloat16: {
        const auto bits = Eigen::numext::bit_cast<uint16_t>(Eigen::half(values[i]));
        std::memcpy(data + 2 * i, &bits, 2);
        break;
      }
      case NpyDtype::kFloat32: {
        const auto v = static_cast<float>(values[i]);
        std::memcpy(data + 4 * i, &v, 4);
        break;
      }
      case NpyDtype::kFloat64:
        std::memcpy(data + 8 * i, &values[i], 8);
        break;
    }
  }
  return out;
}

absl::Status WriteNpy(const std::string& path, absl::Span<const double> values, int64_t rows,
                      int64_t cols, NpyDtype dtype, int major_version) {
  GIFT_ASSIGN_OR_RETURN(std::string bytes, EncodeNpy(values, rows, cols, dtype, major_version));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot open for writing: ", std::strerror(errno)));
  }
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return absl::InvalidArgumentError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

}  // namespace gift::bench
