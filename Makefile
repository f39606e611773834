# Front door over meson. `make demo` and `make test` set up what is missing
# (Debian packages, when run as root), configure, build and run.
BUILD    ?= build
ASAN     ?= build-asan
CLANG    ?= build-clang
RELEASE  ?= build-release
FUZZ     ?= build-fuzz
MESON    ?= meson
DEMO_SPEC ?= plans/examples/llama-3.1-70b-pd.yaml
FUZZ_SECONDS ?= 60

# Debian packages the build and the tests need (chromium and a font: the
# render test loads its pages in headless Chromium; groff, zsh and
# shellcheck: the man page and completion tests). `make deb` needs
# DEB_BUILD_PKGS too.
DEB_PKGS = build-essential clang meson ninja-build pkg-config libyaml-dev \
           libjansson-dev liblua5.4-dev python3 python3-jsonschema python3-yaml \
           libclang-rt-14-dev iproute2 chromium fonts-dejavu-core groff-base zsh shellcheck

.PHONY: all deps setup build demo test test-fast test-asan fuzz bench clean goldens install deb test-deb

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

# The release build (-O3, as tests/gpu/run.sh and most users build): gcc's
# flow analysis at -O3 finds maybe-uninitialized and truncation warnings that
# -O2 does not, and the project's -Werror= flags make them errors.
$(RELEASE)/build.ninja:
	$(MESON) setup $(RELEASE) --buildtype=release -Dwerror=true -Dtests=disabled

setup: deps $(BUILD)/build.ninja

build: setup
	$(MESON) compile -C $(BUILD)

demo: build
	@./scripts/demo.sh $(BUILD) $(DEMO_SPEC)

test: deps $(BUILD)/build.ninja $(ASAN)/build.ninja $(CLANG)/build.ninja $(RELEASE)/build.ninja
	$(MESON) compile -C $(CLANG)
	$(MESON) compile -C $(RELEASE)
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

# `make install PREFIX=/usr DESTDIR=/tmp/stage`: the binaries, the data,
# the man pages and the shell completion (docs/install.md). PREFIX
# reconfigures the build directory; DESTDIR stages the tree elsewhere.
PREFIX ?= /usr/local
install: build
	$(MESON) configure $(BUILD) -Dprefix=$(PREFIX)
	$(MESON) install -C $(BUILD) $(if $(DESTDIR),--destdir $(DESTDIR))

# `make deb`: the Debian package (debian/, debhelper with meson), built in
# place and moved to $(DEB_OUT); `make test-deb` smoke-tests it from its
# installed paths (dpkg -x; with RANKPLAN_DEB_INSTALL=1 as root, also
# dpkg -i into this system and dpkg -r after).
DEB_BUILD_PKGS = debhelper dpkg-dev git
DEB_OUT ?= $(BUILD)/deb
deb: deps
	@./scripts/deps.sh $(DEB_BUILD_PKGS)
	dpkg-buildpackage -b -us -uc -J2
	rm -rf $(DEB_OUT) && mkdir -p $(DEB_OUT)
	v=$$(dpkg-parsechangelog -S Version) && \
	  mv ../rankplan_$${v}_*.deb ../rankplan-dbgsym_$${v}_*.deb ../rankplan_$${v}_*.buildinfo \
	     ../rankplan_$${v}_*.changes $(DEB_OUT)/ 2>/dev/null; ls $(DEB_OUT)/rankplan_$${v}_*.deb

test-deb: deb
	python3 tests/install/test_deb.py $(DEB_OUT)

bench: build
	./tests/bench/run.sh $(BUILD)

goldens: build
	python3 tests/golden/run.py --update

clean:
	rm -rf $(BUILD) $(ASAN) $(CLANG) $(RELEASE) $(FUZZ)
