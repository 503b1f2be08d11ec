// A throwaway certificate authority made with the `openssl` command, for tests
// and benchmarks of the mutual-TLS endpoints (common/rpc/credentials.h).
//
//   auto ca = TestCa::Create(dir, "ca");                 // dir/ca.key, dir/ca.crt
//   if (absl::IsUnavailable(ca.status())) GTEST_SKIP();  // no openssl
//   auto worker = ca->Issue("worker", {"spiffe://gift/worker"});  // {cert, key, ca}
//
// Every issued certificate is for client and server use and names DNS
// localhost and IP 127.0.0.1 (so it also serves loopback endpoints), plus the
// given URI SANs. Keys are EC P-256; certificates last two days.
//
// Thread safety: immutable after Create; Issue may run concurrently for
// different names.
#ifndef GIFT_TOOLS_GIFT_CLUSTER_TEST_CA_H_
#define GIFT_TOOLS_GIFT_CLUSTER_TEST_CA_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/rpc/credentials.h"

namespace gift::tools {

class TestCa {
 public:
  // Writes `dir`/`name`.key and `dir`/`name`.crt. UNAVAILABLE when no
  // `openssl` is on $PATH; INTERNAL with openssl's output when it fails.
  static absl::StatusOr<TestCa> Create(const std::string& dir, const std::string& name);

  // Writes `dir`/`name`.key and `dir`/`name`.crt signed by this CA; returns
  // them with this CA's certificate as the trust bundle.
  absl::StatusOr<rpc::TlsFiles> Issue(const std::string& name,
                                      const std::vector<std::string>& uri_sans) const;

  const std::string& cert_file() const { return cert_; }

 private:
  TestCa(std::string openssl, std::string dir, std::string name);

  std::string openssl_;
  std::string dir_;
  std::string key_;
  std::string cert_;
};

}  // namespace gift::tools

#endif  // GIFT_TOOLS_GIFT_CLUSTER_TEST_CA_H_
