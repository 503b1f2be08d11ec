// The tests' precompiled header (tests/CMakeLists.txt): the third-party and
// standard headers that most test sources include, directly or through the
// project's headers, parsed once for the whole suite instead of once per
// test source. Only headers that change with the installed packages belong
// here; the project's own headers change with every commit, and each test
// source still includes everything it uses itself.
#ifndef GIFT_TESTS_TESTING_TEST_PCH_H_
#define GIFT_TESTS_TESTING_TEST_PCH_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include <Eigen/Dense>
#include <google/protobuf/message.h>
#include <google/protobuf/repeated_field.h>
#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#endif  // GIFT_TESTS_TESTING_TEST_PCH_H_
