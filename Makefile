# The two set-up commands of the README, and a few conveniences.
#
#   make demo    install what is missing, build, run the main job
#   make test    install what is missing, build, run every test (ctest)
#   make study   the training study of every codec over 3 seeds (~75 min)
#
#   make fuzz    build the libFuzzer fuzzers with clang (build-fuzz) and run
#                each for FUZZ_SECONDS over its seed corpus (docs/fuzzing.md)
#
# Variables: BUILD_DIR (build), BUILD_TYPE (Release), CMAKE_FLAGS, JOBS,
# ARGS (passed to the demo, e.g. make demo ARGS=--quick), FUZZ_SECONDS (60
# per fuzzer), FUZZERS (all; or e.g. FUZZERS="payload_fuzzer npy_fuzzer").

BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
ARGS ?=
FUZZ_BUILD_DIR ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZERS ?=

.PHONY: all deps configure build test demo study asan fuzz fuzz-build format clean help install

all: build

help:
	@sed -n '1,12p' Makefile

deps:
	@scripts/install-deps.sh

configure: deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# ctest's record of every test's result and time goes to
# $(BUILD_DIR)/ctest-junit.xml (scripts/build-times.py reads it).
# A test that fails runs once more, alone (ctest --rerun-failed): the suite
# runs real processes on a loaded 2-core machine, where a rare timing failure
# of one test must not sink a run. One that passes alone is named at the
# end as FLAKY (a bug to fix, not a pass); one that fails again fails `make
# test`.
FAILED_LOG = $(BUILD_DIR)/Testing/Temporary/LastTestsFailed.log
test: build
	@ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS) \
	  --output-junit $(abspath $(BUILD_DIR))/ctest-junit.xml || { \
	  flaky=$$(cut -d: -f2 $(FAILED_LOG) | tr '\n' ' '); \
	  echo "== failed: $$flaky; running them again, alone"; \
	  ctest --test-dir $(BUILD_DIR) --output-on-failure --rerun-failed -j 1 || exit 1; \
	  echo "== FLAKY (failed in the suite, passed alone): $$flaky"; }

demo: build
	scripts/demo.sh $(BUILD_DIR) $(ARGS)

# The training study (issue 29; not part of `make test`): every codec over 3
# seeds, about 75 minutes on 2 cores; docs/fidelity.md "The training study".
#   make study ARGS="--netlab-rate 200mbit"   # + every codec's time to FP32's
#                                             # loss on netlab (root; ~45 min more)
study: build
	PYTHONPATH=python /usr/bin/python3 -m gift_ps.demo.study --build-dir $(BUILD_DIR) $(ARGS)

# Binaries, systemd units and default configs (deploy/CMakeLists.txt):
#   sudo make install [PREFIX=/usr] [DESTDIR=/tmp/stage]
install: build
	DESTDIR=$(DESTDIR) cmake --install $(BUILD_DIR) $(if $(PREFIX),--prefix $(PREFIX))

# AddressSanitizer + UndefinedBehaviorSanitizer build and test run.
asan:
	$(MAKE) test BUILD_DIR=build-asan BUILD_TYPE=Debug CMAKE_FLAGS="-DGIFT_SANITIZE=ON -DGIFT_ENABLE_CUDA=OFF"

# libFuzzer + ASan + UBSan fuzzers (tests/fuzz), clang only, in their own build
# directory; only the libraries the fuzzers need are built. Fails on any crash
# (inputs under $(FUZZ_BUILD_DIR)/fuzz-artifacts).
# `make fuzz-build` builds them alone (CI times the build and the run apart).
fuzz: fuzz-build
	tests/fuzz/run_fuzzers.sh $(FUZZ_BUILD_DIR) $(FUZZ_SECONDS) $(FUZZERS)

fuzz-build: deps
	CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DCMAKE_CXX_FLAGS_RELEASE=-O1 -DCMAKE_C_FLAGS_RELEASE=-O1 -DGIFT_FUZZ=ON \
	  -DGIFT_ENABLE_CUDA=OFF -DGIFT_BUILD_TESTS=OFF -DGIFT_BUILD_BENCH=OFF $(CMAKE_FLAGS)
	cmake --build $(FUZZ_BUILD_DIR) -j $(JOBS) --target fuzzers

format:
	git ls-files '*.h' '*.cc' '*.cu' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR) build-asan $(FUZZ_BUILD_DIR)
