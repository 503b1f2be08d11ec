#include "common/rpc/credentials.h"

#include <arpa/inet.h>
#include <grpc/grpc_security_constants.h>
#include <grpcpp/security/auth_metadata_processor.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace gift::rpc {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, absl::string_view flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    const std::string message = absl::StrCat(flag, " ", path, ": ", std::strerror(error));
    if (error == EACCES) return absl::PermissionDeniedError(message);
    if (error == ENOENT) return absl::NotFoundError(message);
    return absl::InvalidArgumentError(message);
  }
  std::stringstream bytes;
  bytes << in.rdbuf();
  std::string pem = bytes.str();
  if (pem.find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": not a PEM file"));
  }
  return pem;
}

std::optional<Role> RoleFromUri(absl::string_view uri) {
  if (!absl::ConsumePrefix(&uri, kRoleUriPrefix)) return std::nullopt;
  const absl::string_view name = uri.substr(0, uri.find('/'));
  for (Role role : {Role::kWorker, Role::kServer, Role::kOperator}) {
    if (name == RoleName(role)) return role;
  }
  return std::nullopt;
}

// Fails every call from a peer whose role is not allowed; runs inline in the
// transport's auth filter, before any service sees the call.
class RoleGate final : public grpc::AuthMetadataProcessor {
 public:
  explicit RoleGate(std::vector<Role> allowed) : allowed_(std::move(allowed)) {}

  bool IsBlocking() const override { return false; }

  grpc::Status Process(const InputMetadata& /*auth_metadata*/, grpc::AuthContext* context,
                       OutputMetadata* /*consumed*/, OutputMetadata* /*response*/) override {
    const std::optional<Role> role = PeerRole(*context);
    if (role.has_value() && std::find(allowed_.begin(), allowed_.end(), *role) != allowed_.end()) {
      return grpc::Status::OK;
    }
    std::vector<std::string> names;
    for (Role r : allowed_) names.emplace_back(RoleName(r));
    return grpc::Status(
        grpc::StatusCode::PERMISSION_DENIED,
        absl::StrCat("role ", role ? RoleName(*role) : "(none)",
                     " may not call this endpoint (allowed: ", absl::StrJoin(names, ", "), ")"));
  }

 private:
  const std::vector<Role> allowed_;
};

}  // namespace

absl::string_view RoleName(Role role) {
  switch (role) {
    case Role::kWorker:
      return "worker";
    case Role::kServer:
      return "server";
    case Role::kOperator:
      return "operator";
  }
  return "unknown";
}

absl::StatusOr<TlsPem> ReadTlsFiles(const TlsFiles& files, absl::string_view flag_prefix) {
  std::vector<std::string> missing;
  if (files.cert.empty()) missing.push_back(absl::StrCat(flag_prefix, "cert"));
  if (files.key.empty()) missing.push_back(absl::StrCat(flag_prefix, "key"));
  if (files.ca.empty()) missing.push_back(absl::StrCat(flag_prefix, "ca"));
  if (!missing.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("TLS needs ", flag_prefix, "cert, ", flag_prefix,
                                                   "key and ", flag_prefix, "ca together; missing ",
                                                   absl::StrJoin(missing, ", ")));
  }
  TlsPem pem;
  absl::StatusOr<std::string> cert = ReadPem(files.cert, absl::StrCat(flag_prefix, "cert"));
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPem(files.key, absl::StrCat(flag_prefix, "key"));
  if (!key.ok()) return key.status();
  absl::StatusOr<std::string> ca = ReadPem(files.ca, absl::StrCat(flag_prefix, "ca"));
  if (!ca.ok()) return ca.status();
  pem.cert = *std::move(cert);
  pem.key = *std::move(key);
  pem.ca = *std::move(ca);
  return pem;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& files, std::vector<Role> allowed, absl::string_view flag_prefix) {
  if (!files.enabled()) return grpc::InsecureServerCredentials();
  absl::StatusOr<TlsPem> pem = ReadTlsFiles(files, flag_prefix);
  if (!pem.ok()) return pem.status();
  grpc::SslServerCredentialsOptions options(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = pem->ca;
  options.pem_key_cert_pairs.push_back({pem->key, pem->cert});
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::SslServerCredentials(options);
  if (credentials == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag_prefix, "cert/key/ca: gRPC rejected the TLS configuration"));
  }
  if (!allowed.empty()) {
    credentials->SetAuthMetadataProcessor(std::make_shared<RoleGate>(std::move(allowed)));
  }
  return credentials;
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsFiles& files, absl::string_view flag_prefix) {
  if (!files.enabled()) return grpc::InsecureChannelCredentials();
  absl::StatusOr<TlsPem> pem = ReadTlsFiles(files, flag_prefix);
  if (!pem.ok()) return pem.status();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = pem->ca;
  options.pem_private_key = pem->key;
  options.pem_cert_chain = pem->cert;
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::SslCredentials(options);
  if (credentials == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag_prefix, "cert/key/ca: gRPC rejected the TLS configuration"));
  }
  return credentials;
}

bool IsLoopback(absl::string_view address) {
  if (absl::StartsWith(address, "unix:") || absl::StartsWith(address, "unix-abstract:")) {
    return true;
  }
  absl::ConsumePrefix(&address, "dns:///") || absl::ConsumePrefix(&address, "dns:") ||
      absl::ConsumePrefix(&address, "ipv4:") || absl::ConsumePrefix(&address, "ipv6:");
  absl::string_view host = address;
  if (absl::ConsumePrefix(&host, "[")) {
    host = host.substr(0, host.find(']'));
  } else if (const size_t colon = host.rfind(':'); colon != absl::string_view::npos) {
    host = host.substr(0, colon);
  }
  if (absl::EqualsIgnoreCase(host, "localhost")) return true;
  const std::string text(host);
  in_addr v4{};
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    return std::memcmp(&v6, &in6addr_loopback, sizeof(v6)) == 0;
  }
  return false;
}

absl::Status CheckPlaintextAllowed(absl::string_view what, absl::string_view address,
                                   const TlsFiles& files, bool insecure) {
  if (files.enabled() || insecure || IsLoopback(address)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " ", address,
                   " is not loopback: give --tls-cert, --tls-key and --tls-ca for mutual TLS, "
                   "or --insecure to use plaintext gRPC anyway"));
}

bool IsTlsPeer(const grpc::AuthContext& context) {
  for (const grpc::string_ref& type :
       context.FindPropertyValues(GRPC_TRANSPORT_SECURITY_TYPE_PROPERTY_NAME)) {
    const absl::string_view name(type.data(), type.size());
    if (name == GRPC_SSL_TRANSPORT_SECURITY_TYPE || name == GRPC_TLS_TRANSPORT_SECURITY_TYPE) {
      return true;
    }
  }
  return false;
}

std::optional<Role> PeerRole(const grpc::AuthContext& context) {
  if (!IsTlsPeer(context) || !context.IsPeerAuthenticated()) return std::nullopt;
  // A certificate naming two different roles names none.
  std::optional<Role> found;
  for (const char* property : {GRPC_PEER_URI_PROPERTY_NAME, GRPC_PEER_SPIFFE_ID_PROPERTY_NAME,
                               GRPC_X509_SAN_PROPERTY_NAME}) {
    for (const grpc::string_ref& value : context.FindPropertyValues(property)) {
      std::optional<Role> role = RoleFromUri(absl::string_view(value.data(), value.size()));
      if (!role.has_value()) continue;
      if (found.has_value() && *found != *role) return std::nullopt;
      found = role;
    }
  }
  return found;
}

}  // namespace gift::rpc
