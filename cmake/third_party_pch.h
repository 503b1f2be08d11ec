// The project's precompiled header (cmake/GiftPrecompiledHeaders.cmake): the
// third-party and standard headers that most of its sources include,
// directly or through the project's own headers, parsed once per build
// instead of once per source. Only headers that change with the installed
// packages belong here; the project's own headers change with every commit,
// and each source still includes everything it uses itself.
#ifndef GIFT_CMAKE_THIRD_PARTY_PCH_H_
#define GIFT_CMAKE_THIRD_PARTY_PCH_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <Eigen/Dense>
#include <google/protobuf/generated_message_reflection.h>
#include <google/protobuf/message.h>
#include <google/protobuf/repeated_field.h>
#include <grpcpp/grpcpp.h>

#include "CLI/CLI.hpp"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "nlohmann/json.hpp"

#endif  // GIFT_CMAKE_THIRD_PARTY_PCH_H_
