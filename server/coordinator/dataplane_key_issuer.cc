#include "server/coordinator/dataplane_key_issuer.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"

namespace gift::coordinator {

absl::StatusOr<std::unique_ptr<DataPlaneKeyIssuer>> DataPlaneKeyIssuer::FromFile(
    const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read the data-plane secret ", path));
  std::string secret((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (secret.size() < dataplane::kMacKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the data-plane secret ", path, " has ",
                                                   secret.size(), " bytes, at least ",
                                                   dataplane::kMacKeyBytes, " are needed"));
  }
  return std::unique_ptr<DataPlaneKeyIssuer>(new DataPlaneKeyIssuer(std::move(secret)));
}

absl::StatusOr<std::unique_ptr<DataPlaneKeyIssuer>> DataPlaneKeyIssuer::Random() {
  std::string secret(dataplane::kMacKeyBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(secret.data()),
                 static_cast<int>(secret.size())) != 1) {
    return absl::InternalError("RAND_bytes failed");
  }
  return std::unique_ptr<DataPlaneKeyIssuer>(new DataPlaneKeyIssuer(std::move(secret)));
}

absl::StatusOr<std::unique_ptr<DataPlaneKeyIssuer>> DataPlaneKeyIssuer::KeptAt(
    const std::string& path) {
  if (access(path.c_str(), F_OK) == 0) return FromFile(path);
  absl::StatusOr<std::unique_ptr<DataPlaneKeyIssuer>> drawn = Random();
  if (!drawn.ok()) return drawn.status();
  const std::string& secret = (*drawn)->secret_;
  const std::string temporary = path + ".tmp";
  const int fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  bool written =
      fd >= 0 && write(fd, secret.data(), secret.size()) == static_cast<ssize_t>(secret.size());
  written = written && fsync(fd) == 0;
  if (fd >= 0) close(fd);
  if (!written || rename(temporary.c_str(), path.c_str()) != 0) {
    unlink(temporary.c_str());
    return absl::InternalError(
        absl::StrCat("cannot write the data-plane secret ", path, ": ", std::strerror(errno)));
  }
  return drawn;
}

DataPlaneKeyIssuer::~DataPlaneKeyIssuer() { OPENSSL_cleanse(secret_.data(), secret_.size()); }

namespace {

absl::StatusOr<dataplane::MacKey> Derive(const std::string& secret, absl::string_view salt,
                                         absl::string_view info) {
  return dataplane::DeriveKey(
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(secret.data()), secret.size()), salt,
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(info.data()), info.size()));
}

}  // namespace

absl::StatusOr<dataplane::MacKey> DataPlaneKeyIssuer::MemberKey(absl::string_view member_id) const {
  return Derive(secret_, "gift-dataplane-member-v1", member_id);
}

absl::StatusOr<dataplane::MacKey> DataPlaneKeyIssuer::NodeKey(absl::string_view node) const {
  return Derive(secret_, "gift-dataplane-node-v1", node);
}

}  // namespace gift::coordinator
