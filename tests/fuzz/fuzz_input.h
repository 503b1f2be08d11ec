// Helpers the fuzzers share to shape their input: a checksum fix-up, so that
// most inputs get past a CRC check to the code behind it, and a crash that
// names the broken property.
//
// Input convention of the checksummed formats (payload, chunk header, basis):
// byte 0 is a mode byte; bit 0 set means "recompute the checksum (and, for
// the basis, the total size) of the rest before parsing", bit 0 clear means
// "parse the rest as it is" (the checksum and size checks themselves).
//
// Thread safety: stateless functions.
#ifndef GIFT_TESTS_FUZZ_FUZZ_INPUT_H_
#define GIFT_TESTS_FUZZ_FUZZ_INPUT_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace gift::fuzz {

// The rest of the input after the mode byte, and whether to fix it up.
struct ModedInput {
  bool fix_checksum = false;
  std::vector<uint8_t> bytes;
};

inline ModedInput SplitMode(const uint8_t* data, size_t size) {
  ModedInput in;
  if (size == 0) return in;
  in.fix_checksum = (data[0] & 1) != 0;
  in.bytes.assign(data + 1, data + size);
  return in;
}

// A property every input must keep was broken: report and abort, which
// libFuzzer records as a crash (and the replay test as a failure).
[[noreturn]] inline void Fail(const char* what) {
  std::fprintf(stderr, "fuzz property violated: %s\n", what);
  std::abort();
}

}  // namespace gift::fuzz

#endif  // GIFT_TESTS_FUZZ_FUZZ_INPUT_H_
