# The two front-door commands (see README.md):
#   make run    install what is missing, build, run the main job on the built-in default
#   make test   install what is missing, build, run every test, then again under ASan + UBSan
BUILD      ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
JOBS       ?= $(shell nproc)

.PHONY: run test test-fast test-asan build build-asan deps clean fuzz

# The main job: check the build, then the sweep of the built-in default (dit-s2, batch 8) on this machine.
run: build
	./$(BUILD)/segtrain selfcheck
	./$(BUILD)/segtrain sweep --warmup 1 --steps 2 --out $(BUILD)/sweep-report

test: test-fast test-asan

test-fast: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# A second build tree with sanitizers: memory errors and undefined behaviour fail the tests.
test-asan: build-asan
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir $(ASAN_BUILD) --output-on-failure -j $(JOBS)

# A new build folder is configured for Ninja, whose build with nothing to do takes 0.2 s where make's walk over the
# ~100 targets takes seconds; a folder made before keeps its generator (CMake refuses a change), and one that was
# generated is not configured again here: `cmake --build` does it itself whenever a CMakeLists.txt or a globbed
# folder changes.
CONFIGURE = $(if $(wildcard $(1)/build.ninja $(1)/Makefile),@:,cmake -S . -B $(1) $(if $(wildcard $(1)/CMakeCache.txt),,-G Ninja))

build: deps
	$(call CONFIGURE,$(BUILD)) -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

build-asan: deps
	$(call CONFIGURE,$(ASAN_BUILD)) -DCMAKE_BUILD_TYPE=Debug -DSEGTRAIN_SANITIZE=ON >/dev/null
	cmake --build $(ASAN_BUILD) -j $(JOBS)

deps:
	@./scripts/install-deps.sh

# libFuzzer targets (fuzz/README.md), built with clang, ASan and UBSan, each run FUZZ_SECONDS on a working copy of
# its corpus in $(FUZZ_BUILD); findings land in $(FUZZ_BUILD)/fuzz-findings. `make test` replays the committed corpora.
fuzz:
	@./scripts/install-deps.sh fuzz
	$(call CONFIGURE,$(FUZZ_BUILD)) -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DSEGTRAIN_SANITIZE=ON \
	  -DSEGTRAIN_FUZZ=ON -DSEGTRAIN_WERROR=OFF >/dev/null
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_targets
	./fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
