#include "tools/gift-cluster/test_ca.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tools/gift-cluster/subprocess.h"

namespace gift::tools {
namespace {

// The openssl binary on $PATH, or "".
std::string FindOpenssl() {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':')) {
    if (dir.empty()) continue;
    std::string candidate = absl::StrCat(dir, "/openssl");
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

absl::Status Run(std::vector<std::string> argv) {
  auto process = tools::Subprocess::Start(argv);
  if (!process.ok()) return process.status();
  absl::StatusOr<int> code = (*process)->WaitForExit(absl::Seconds(60));
  if (!code.ok()) return code.status();
  if (*code != 0) {
    return absl::InternalError(
        absl::StrCat(absl::StrJoin(argv, " "), " exited ", *code, ": ", (*process)->stderr_text()));
  }
  return absl::OkStatus();
}

}  // namespace

TestCa::TestCa(std::string openssl, std::string dir, std::string name)
    : openssl_(std::move(openssl)),
      dir_(std::move(dir)),
      key_(absl::StrCat(dir_, "/", name, ".key")),
      cert_(absl::StrCat(dir_, "/", name, ".crt")) {}

absl::StatusOr<TestCa> TestCa::Create(const std::string& dir, const std::string& name) {
  std::string openssl = FindOpenssl();
  if (openssl.empty()) return absl::UnavailableError("no openssl command on $PATH");
  TestCa ca(std::move(openssl), dir, name);
  absl::Status made = Run({ca.openssl_,
                           "req",
                           "-x509",
                           "-newkey",
                           "ec",
                           "-pkeyopt",
                           "ec_paramgen_curve:prime256v1",
                           "-nodes",
                           "-keyout",
                           ca.key_,
                           "-out",
                           ca.cert_,
                           "-days",
                           "2",
                           "-subj",
                           absl::StrCat("/CN=", name),
                           "-addext",
                           "basicConstraints=critical,CA:TRUE",
                           "-addext",
                           "keyUsage=critical,keyCertSign,cRLSign"});
  if (!made.ok()) return made;
  return ca;
}

absl::StatusOr<rpc::TlsFiles> TestCa::Issue(const std::string& name,
                                            const std::vector<std::string>& uri_sans) const {
  const std::string base = absl::StrCat(dir_, "/", name);
  rpc::TlsFiles files{.cert = base + ".crt", .key = base + ".key", .ca = cert_};
  std::vector<std::string> sans = {"DNS:localhost", "IP:127.0.0.1"};
  for (const std::string& uri : uri_sans) sans.push_back(absl::StrCat("URI:", uri));
  {
    std::ofstream ext(base + ".ext");
    ext << "basicConstraints=CA:FALSE\n"
        << "keyUsage=critical,digitalSignature,keyEncipherment\n"
        << "extendedKeyUsage=serverAuth,clientAuth\n"
        << "subjectAltName=" << absl::StrJoin(sans, ",") << "\n";
    if (!ext) return absl::InternalError(absl::StrCat("cannot write ", base, ".ext"));
  }
  if (absl::Status s = Run({openssl_, "req", "-new", "-newkey", "ec", "-pkeyopt",
                            "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", files.key, "-out",
                            base + ".csr", "-subj", absl::StrCat("/CN=", name)});
      !s.ok()) {
    return s;
  }
  if (absl::Status s = Run({openssl_, "x509", "-req", "-in", base + ".csr", "-CA", cert_, "-CAkey",
                            key_, "-set_serial", absl::StrCat(std::hash<std::string>{}(name) >> 1),
                            "-days", "2", "-extfile", base + ".ext", "-out", files.cert});
      !s.ok()) {
    return s;
  }
  return files;
}

}  // namespace gift::tools
