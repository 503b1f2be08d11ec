// Default libFuzzer flags a fuzzer sets for itself, from its
// LLVMFuzzerInitialize, which libFuzzer calls before it parses the command
// line. The defaults go right after the program name, so a flag given on the
// command line still wins (libFuzzer keeps the last of a flag given twice).
//
// Why a harness sets them: the service harnesses (coordinator, giftctl) keep
// one gRPC server across inputs, so an input's allocations are not all freed
// within it and libFuzzer would run a full leak scan after nearly every
// input (-detect_leaks=0); and they touch tens of thousands of coverage
// features per input, where the entropic scheduler's per-feature bookkeeping
// costs more than the input (-entropic=0); and each runs as the only process
// on its corpus (run_fuzzers.sh runs different fuzzers side by side), so
// re-listing the corpus every second for other processes' finds, 3 % of
// giftctl's samples deep in its corpus, buys nothing (-reload=0; give
// -reload=1 to share a corpus between -jobs). docs/fuzzing.md has the
// figures.
//
// GIFT_FUZZ_LIGHT_ASAN_STACKS() (at namespace scope in a harness) sets
// AddressSanitizer's default malloc_context_size to 0: ASan then records no
// stack for each allocation and free. A harness whose inputs allocate a lot
// (giftctl builds a command line parser per input) spent about a fifth of
// its time unwinding and storing those stacks. A report still shows where a
// bad access happened; to see where its memory was allocated and freed,
// replay the input with ASAN_OPTIONS=malloc_context_size=30 (the
// environment wins over these defaults).
//
// Thread safety: call once, from LLVMFuzzerInitialize.
#ifndef GIFT_TESTS_FUZZ_FUZZ_FLAGS_H_
#define GIFT_TESTS_FUZZ_FUZZ_FLAGS_H_

#include <initializer_list>
#include <vector>

namespace gift::fuzz {

inline void PrependDefaultFlags(int* argc, char*** argv, std::initializer_list<const char*> flags) {
  // argv must outlive the fuzzer's run: kept for the life of the process.
  static std::vector<char*>* const args = new std::vector<char*>();
  args->assign(*argv, *argv + *argc);
  args->insert(args->begin() + (args->empty() ? 0 : 1), flags.size(), nullptr);
  int i = args->empty() ? 0 : 1;
  for (const char* flag : flags) (*args)[i++] = const_cast<char*>(flag);
  args->push_back(nullptr);  // argv[argc] is null
  *argc = static_cast<int>(args->size()) - 1;
  *argv = args->data();
}

}  // namespace gift::fuzz

#define GIFT_FUZZ_LIGHT_ASAN_STACKS() \
  extern "C" const char* __asan_default_options() { return "malloc_context_size=0"; }

#endif  // GIFT_TESTS_FUZZ_FUZZ_FLAGS_H_
