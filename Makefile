# Front door over meson. `make demo` and `make test` set up what is missing
# (Debian packages, when run as root), configure, build and run.
BUILD    ?= build
ASAN     ?= build-asan
CLANG    ?= build-clang
FUZZ     ?= build-fuzz
MESON    ?= meson
DEMO_SPEC ?= plans/examples/llama-3.1-70b-pd.yaml
FUZZ_SECONDS ?= 60

# Debian packages the build and the tests need (chromium and a font: the
# render test loads its pages in headless Chromium).
DEB_PKGS = build-essential clang meson ninja-build pkg-config libyaml-dev \
           libjansson-dev liblua5.4-dev python3 python3-jsonschema python3-yaml \
           libclang-rt-14-dev iproute2 chromium fonts-dejavu-core

.PHONY: all deps setup build demo test test-fast test-asan fuzz bench clean goldens

all: build

deps:
	@./scripts/deps.sh $(DEB_PKGS)

$(BUILD)/build.ninja:
	$(MESON) setup $(BUILD) --buildtype=debugoptimized -Dwerror=true

$(ASAN)/build.ninja:
	$(MESON) setup $(ASAN) --buildtype=debug -Dwerror=true -Db_sanitize=address,undefined -Db_lundef=false

# A second compiler keeps the code portable: clang must build it without a warning too.
$(CLANG)/build.ninja:
	CC=clang $(MESON) setup $(CLANG) --buildtype=debugoptimized -Dwerror=true

setup: deps $(BUILD)/build.ninja

build: setup
	$(MESON) compile -C $(BUILD)

demo: build
	@./scripts/demo.sh $(BUILD) $(DEMO_SPEC)

test: deps $(BUILD)/build.ninja $(ASAN)/build.ninja $(CLANG)/build.ninja
	$(MESON) compile -C $(CLANG)
	$(MESON) compile -C $(BUILD)
	$(MESON) test -C $(BUILD) --print-errorlogs
	$(MESON) compile -C $(ASAN)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  $(MESON) test -C $(ASAN) --print-errorlogs --timeout-multiplier 4

test-fast: build
	$(MESON) test -C $(BUILD) --print-errorlogs

fuzz: deps
	@test -f $(FUZZ)/build.ninja || CC=clang $(MESON) setup $(FUZZ) --buildtype=debug -Dfuzz=true -Dtests=disabled -Db_lundef=false
	$(MESON) compile -C $(FUZZ)
	./scripts/fuzz.sh $(FUZZ) $(FUZZ_SECONDS)

bench: build
	./tests/bench/run.sh $(BUILD)

goldens: build
	python3 tests/golden/run.py --update

clean:
	rm -rf $(BUILD) $(ASAN) $(CLANG) $(FUZZ)
