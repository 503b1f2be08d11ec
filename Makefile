# The two set-up commands of the README, and a few conveniences.
#
#   make demo    install what is missing, build, run the main job
#   make test    install what is missing, build, run every test (ctest)
#
# Variables: BUILD_DIR (build), BUILD_TYPE (Release), CMAKE_FLAGS, JOBS,
# ARGS (passed to the demo, e.g. make demo ARGS=--quick).

BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
ARGS ?=

.PHONY: all deps configure build test demo asan format clean help install

all: build

help:
	@sed -n '1,10p' Makefile

deps:
	@scripts/install-deps.sh

configure: deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

demo: build
	scripts/demo.sh $(BUILD_DIR) $(ARGS)

# Binaries, systemd units and default configs (deploy/CMakeLists.txt):
#   sudo make install [PREFIX=/usr] [DESTDIR=/tmp/stage]
install: build
	DESTDIR=$(DESTDIR) cmake --install $(BUILD_DIR) $(if $(PREFIX),--prefix $(PREFIX))

# AddressSanitizer + UndefinedBehaviorSanitizer build and test run.
asan:
	$(MAKE) test BUILD_DIR=build-asan BUILD_TYPE=Debug CMAKE_FLAGS="-DGIFT_SANITIZE=ON -DGIFT_ENABLE_CUDA=OFF"

format:
	git ls-files '*.h' '*.cc' '*.cu' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR) build-asan
