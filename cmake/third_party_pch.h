// The project's precompiled header (cmake/GiftPrecompiledHeaders.cmake): the
// third-party and standard headers that most of its sources include,
// directly or through the project's own headers, parsed once per build
// instead of once per source. Only headers that change with the installed
// packages belong here; the project's own headers change with every commit,
// and each source still includes everything it uses itself.
//
// Nor does every third-party header pay: a precompiled header costs each
// source whatever it must instantiate and emit. CLI11 defines namespace-scope
// validator objects (ExistingFile, PositiveNumber, ...) whose constructors
// every including source compiles; with CLI11 and nlohmann/json here, an
// empty source took 5 s at -O3, without them 0.8 s (crc32c.cc: 0.2 s
// without any precompiled header). The sources that use them include them.
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

#endif  // GIFT_CMAKE_THIRD_PARTY_PCH_H_
