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

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

build-asan: deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DSEGTRAIN_SANITIZE=ON >/dev/null
	cmake --build $(ASAN_BUILD) -j $(JOBS)

deps:
	@./scripts/install-deps.sh

# libFuzzer targets (fuzz/README.md), built with clang, ASan and UBSan, each run FUZZ_SECONDS on a working copy of
# its corpus in $(FUZZ_BUILD); findings land in $(FUZZ_BUILD)/fuzz-findings. `make test` replays the committed corpora.
fuzz:
	@./scripts/install-deps.sh fuzz
	cmake -S . -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DSEGTRAIN_SANITIZE=ON \
	  -DSEGTRAIN_FUZZ=ON -DSEGTRAIN_WERROR=OFF >/dev/null
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_targets
	./fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
