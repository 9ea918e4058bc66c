# The two front-door commands (see README.md):
#   make run    install what is missing, build, run the main job on the built-in default
#   make test   install what is missing, build, run every test, then again under ASan + UBSan
BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc)

.PHONY: run test test-fast test-asan build build-asan deps clean

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

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
