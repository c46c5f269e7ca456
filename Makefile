# The two commands of the README's quick start.  Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Two pytest workers (pytest-xdist): most tests wait on real processes, so two run in the
# time of one.  tests/conftest.py keeps each module on one worker (its broker fixture starts
# once) and every Spark test on one worker (one Spark session).  PYTEST_ARGS= runs serially.
PYTEST_ARGS ?= -n 2 --dist loadgroup

.PHONY: run test test-pure install install-test lint clean browser burrow fault-tools verify

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The stamp files make re-runs instant; a change to the packaging or to the C extension's
# source re-installs (an editable install builds the extension once, in place).
# the C extensions' sources (setup.py's EXTENSIONS)
EXTENSION_SOURCES := databus/protocol/_speedups.c databus/protocol/_sidecar_speedups.c \
	databus/client/_producer_speedups.c databus/sdk/_outbox_speedups.c \
	databus/sidecar/produce/_router_speedups.c plugins/index/_json_speedups.c \
	databus/schemas/_avro_speedups.c
BUILD_INPUTS := pyproject.toml setup.py $(EXTENSION_SOURCES)

$(VENV)/.installed: $(BUILD_INPUTS) | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

# The tests include the Spark data source's, so the test install carries the spark extra.
$(VENV)/.installed-test: $(BUILD_INPUTS) | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test,spark]'
	touch $@ $(VENV)/.installed

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

run: install
	$(BIN)/databus up -c sidecar.yaml

# tests/console drive Debian's chromium (a fresh CI machine has none; root installs it).
# Another apt may hold the dpkg lock for a while on a shared machine: apt waits for it
# (DPkg::Lock::Timeout) and the whole step is tried a few times; if it still fails, the run
# goes on and tests/console skip, saying chromium is missing.
CHROMIUM_BINS ?= /usr/bin/chromium /usr/bin/chromedriver
APT_GET ?= apt-get
APT_TRIES ?= 3
APT_RETRY_PAUSE ?= 30
APT := $(APT_GET) -o DPkg::Lock::Timeout=600

browser:
	@missing=; for bin in $(CHROMIUM_BINS); do [ -x "$$bin" ] || missing=1; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    try=1; until $(APT) -qq update && DEBIAN_FRONTEND=noninteractive \
	        $(APT) install -y -qq chromium chromium-driver; do \
	      if [ $$try -ge $(APT_TRIES) ]; then \
	        echo "could not install chromium after $(APT_TRIES) tries: tests/console will skip"; \
	        break; \
	      fi; \
	      try=$$((try + 1)); sleep $(APT_RETRY_PAUSE); \
	    done; \
	  else echo "tests/console need chromium: apt-get install chromium chromium-driver"; fi; \
	fi

# tests/tools/test_burrow.py runs Debian's Burrow, which needs a ZooKeeper for itself; like
# browser: apt waits for the dpkg lock and is tried a few times, and the run goes on (the
# test skips, saying why) if the packages still cannot be installed.
burrow:
	@if [ ! -x /usr/bin/Burrow ] || [ ! -f /usr/share/java/zookeeper.jar ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    try=1; until $(APT) -qq update && DEBIAN_FRONTEND=noninteractive \
	        $(APT) install -y -qq --no-install-recommends burrow zookeeper; do \
	      if [ $$try -ge $(APT_TRIES) ]; then \
	        echo "could not install burrow after $(APT_TRIES) tries: tests/tools/test_burrow.py will skip"; \
	        break; \
	      fi; \
	      try=$$((try + 1)); sleep $(APT_RETRY_PAUSE); \
	    done; \
	  else echo "tests/tools/test_burrow.py needs: apt-get install burrow zookeeper"; fi; \
	fi

# databus verify's partition fault sets iptables rules, its clock fault preloads libfaketime
# (Debian's faketime); a fresh CI machine has neither.  Like browser: apt waits for the dpkg
# lock and is tried a few times; without them those faults are unavailable (said so) and
# the other faults run.
FAULT_TOOLS_MISSING = $(if $(or $(shell command -v iptables),$(wildcard /usr/sbin/iptables)),,iptables) \
	$(if $(wildcard /usr/lib/*/faketime/libfaketime.so.1),,faketime)
fault-tools:
	@missing="$(strip $(FAULT_TOOLS_MISSING))"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    try=1; until $(APT) -qq update && DEBIAN_FRONTEND=noninteractive \
	        $(APT) install -y -qq $$missing; do \
	      if [ $$try -ge $(APT_TRIES) ]; then \
	        echo "could not install $$missing after $(APT_TRIES) tries: databus verify runs without those faults"; \
	        break; \
	      fi; \
	      try=$$((try + 1)); sleep $(APT_RETRY_PAUSE); \
	    done; \
	  else echo "databus verify's partition and clock faults need: apt-get install $$missing"; fi; \
	fi

# The Jepsen-style check (docs/verification.md): the queue workload against the built-in
# broker under every fault that can run here.  VERIFY_TIME=600 VERIFY_SEED=7 make verify
VERIFY_TIME ?= 120
VERIFY_SEED ?=
verify: install fault-tools
	$(BIN)/databus verify --time $(VERIFY_TIME) $(if $(VERIFY_SEED),--seed $(VERIFY_SEED))

test: install-test browser fault-tools burrow
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The whole suite on the pure-Python code instead of the C extension (databus/protocol/
# speedups.py).  `make test` runs only a subset that way: both would not fit its time budget.
test-pure: install-test
	DATABUS_PURE_PYTHON=1 $(BIN)/python -m pytest $(PYTEST_ARGS)

# ruff's rules and mypy's files are in pyproject.toml; the import rules are a test
# (tests/test_layering.py), so `make test` checks those.
lint: install-test
	$(BIN)/ruff check databus plugins spark_sink tests
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info \
		$(foreach c,$(EXTENSION_SOURCES),$(basename $(c)).*.so)
