#include "common/daemon/daemon_flags.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace gift::daemon {
namespace {

constexpr absl::string_view kUnknownKeyPrefix = "INI was not able to parse ";

}  // namespace

int UsageError(absl::string_view daemon_name, absl::string_view message) {
  std::fprintf(stderr, "%.*s: %.*s\nRun with --help for usage.\n",
               static_cast<int>(daemon_name.size()), daemon_name.data(),
               static_cast<int>(message.size()), message.data());
  return kExitUsage;
}

std::optional<int> ParseDaemonFlags(CLI::App& app, int argc, char** argv,
                                    absl::string_view daemon_name) {
  CLI::Option* config =
      app.set_config("--config", "",
                     "TOML config file: one `key = value` per flag, keyed by the flag's long "
                     "name (e.g. listen = \"0.0.0.0:7070\"); flags on the command line win",
                     /*config_required=*/false);
  config->type_name("FILE");
  app.allow_config_extras(false);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ConfigError& e) {
    std::string file = config->count() > 0 ? config->as<std::string>() : "";
    absl::string_view what = e.what();
    if (absl::ConsumePrefix(&what, kUnknownKeyPrefix)) {
      return UsageError(daemon_name, absl::StrCat("--config ", file, ": unknown key '", what, "'"));
    }
    return UsageError(daemon_name, absl::StrCat("--config ", file, ": ", e.what()));
  } catch (const CLI::FileError& e) {
    return UsageError(daemon_name, absl::StrCat("--config: ", e.what()));
  } catch (const CLI::ParseError& e) {
    return UsageError(daemon_name, e.what());
  } catch (const std::exception& e) {  // CLI11 may throw others from validators
    return UsageError(daemon_name, e.what());
  }
  return std::nullopt;
}

absl::StatusOr<absl::Duration> ParseDurationFlag(absl::string_view text) {
  double seconds = 0;
  if (absl::SimpleAtod(text, &seconds)) {
    if (std::isfinite(seconds)) return absl::Seconds(seconds);
  } else {
    absl::Duration d;
    if (!text.empty() && absl::ParseDuration(text, &d) && d != absl::InfiniteDuration() &&
        d != -absl::InfiniteDuration()) {
      return d;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'", text, "' is not a duration (e.g. 10s, 500ms, 1m, or seconds)"));
}

absl::Status CheckHostPort(absl::string_view text) {
  const size_t colon = text.rfind(':');
  uint32_t port = 0;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(text.substr(colon + 1), &port) || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not HOST:PORT"));
  }
  return absl::OkStatus();
}

}  // namespace gift::daemon
