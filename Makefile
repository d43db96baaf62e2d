# nslab: `make demo` (set up + quick reproduction) and `make test` (set up + whole suite).
PY      ?= /usr/bin/python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
# the 20 slowest tests are listed at the end of each run of pytest; `make test` ends
# with one table of every tier and the ten slowest tests overall (scripts/tiers.py)
PYTEST_ARGS ?= --durations=20
# The unit tier needs no root and no lab: it runs on every CPU (pytest-xdist).
UNIT_WORKERS ?= auto
# Where each tier's JUnit XML and time go (scripts/tiers.py); TIER names them.
CI_DIR  ?= results/ci
TIER    ?= host
TIERS   := $(PY) scripts/tiers.py
# The stock kernel the kernel tier boots (unpacked into .cache/kernel, never
# installed): a metapackage or an exact package, e.g. linux-image-6.1.0-56-amd64.
KERNEL_PKG ?= linux-image-amd64
# The guest tier boots each of these (Debian 12's kernel on this machine's userland,
# Debian 13's on the Debian 13 root); the two-box tier boots the first.
KERNEL_DISTS ?= bookworm,trixie
# The Debian 13 tier: a debootstrapped root in .cache/debian13 (scripts/setup-debian13.sh),
# entered with scripts/in-debian13.sh; the project is set up there with its own venv.
DEBIAN13_VENV ?= .venv-debian13
IN_DEBIAN13 := scripts/in-debian13.sh make --no-print-directory VENV=$(DEBIAN13_VENV) PY=/usr/bin/python3

# The tiers make namespaces and labs: never two at once, even under make -j.
.NOTPARALLEL:

.PHONY: setup system venv demo bed-kernel check test test-tiers test-host test-host-unit test-host-labs test-debian13 test-debian13-unit test-debian13-labs test-kernel kernel-setup \
        debian13-setup debian13-project unit clean-lab help

help:
	@echo "make demo         set up everything missing, then run the quick reproduction of the four studies"
	@echo "make test         set up everything missing, then run the whole suite: the host tier, the"
	@echo "                  Debian 13 tier, then the stock-kernel tier (QEMU guests on Debian 12's and"
	@echo "                  Debian 13's kernels, two boxes with real NIC drivers)"
	@echo "make check        no root, no labs: ruff, mypy, import contracts, the unit tier and the"
	@echo "                  docs build, on every CPU (the inner loop; a few minutes)"
	@echo "make test-host    the unit, integration and smoke tiers on this machine's kernel"
	@echo "make test-debian13  inside a Debian 13 root (.cache/debian13): the unit tier, and the"
	@echo "                    integration and smoke tests marked versioned (a tool's version differs)"
	@echo "make test-kernel  the stock-kernel tier only"

system:
	@scripts/setup-system.sh
	@scripts/setup-sshd.sh
	@scripts/setup-prometheus.sh

$(STAMP): pyproject.toml nslab/__init__.py  # the version is read from nslab/__init__.py
	$(PY) -m venv --system-site-packages $(VENV)
	$(BIN)/pip install -q -U pip setuptools wheel
	$(BIN)/pip install -q -e '.[test]'
	@touch $(STAMP)

# Linked statically: the virtual RFC 2544 bed runs it from its guest's RAM, with no
# library to read from the host's files while a trial runs.
PKTGEN  := $(BIN)/nslab-pktgen

$(PKTGEN): nslab/csrc/pktgen.c nslab/csrc/xdplive.c nslab/csrc/xdplive.h $(STAMP)
	gcc -O2 -Wall -Wextra -static -o $@ nslab/csrc/pktgen.c nslab/csrc/xdplive.c -lm

venv: $(STAMP) $(PKTGEN)

setup: system venv

# The kernel the virtual RFC 2544 bed boots: this machine's release's, unpacked into
# .cache/kernel (never installed), with QEMU (scripts/setup-kernel.sh).
bed-kernel: system
	@KERNEL_PKG=$(KERNEL_PKG) scripts/setup-kernel.sh

# The set-up's output goes to a log (its last lines shown if it fails), then the
# quick reproduction, which ends with the report's path.
demo:
	@mkdir -p results
	@echo "nslab: setting up what is missing (apt, the venv, the virtual bed's kernel); log: $(CURDIR)/results/setup.log"
	@$(MAKE) --no-print-directory setup bed-kernel > results/setup.log 2>&1 || \
	  { tail -n 20 results/setup.log; echo "nslab: set-up failed; the whole log: $(CURDIR)/results/setup.log"; exit 1; }
	$(BIN)/nslab reproduce --quick

# Every tier, ordered and overlapped to keep within CI's time (scripts/ci.py says
# what runs beside what), then one table: each part's tests and minutes, the ten
# slowest tests.
test: setup
	$(BIN)/python scripts/ci.py

# The same tiers one after the other.
test-tiers: test-host test-debian13 test-kernel

# The unit tier (no root: on every CPU), then the integration and smoke tiers (root,
# labs: one test at a time, since they measure rates and CPUs). Each half is a
# target of its own (CI runs Debian 13's unit half beside the host's labs).
test-host: test-host-unit test-host-labs

# TIMED=skip leaves out the unit tests marked `timed` (they assert a wall-clock time),
# TIMED=only runs only them: `make test` runs Debian 13's unit tier at the idle
# policy beside the host's labs, and its timed tests apart, at normal priority.
TIMED ?=
ifneq ($(filter-out skip only,$(TIMED)),)
$(error TIMED=$(TIMED): skip, only, or unset)
endif
UNIT_SELECT_skip := -m "not vm and not timed"
UNIT_SELECT_only := -m "timed and not vm"
UNIT_NAME := unit$(if $(TIMED),-timed-$(TIMED))
UNIT_LABEL_skip := unit, untimed
UNIT_LABEL_only := unit, timed

test-host-unit: setup
	@mkdir -p $(CI_DIR)
	@$(TIERS) run "$(TIER): $(or $(UNIT_LABEL_$(TIMED)),unit)" --junit $(CI_DIR)/junit-$(TIER)-$(UNIT_NAME).xml -- \
	  $(BIN)/python -m pytest tests/unit -n $(UNIT_WORKERS) $(UNIT_SELECT_$(TIMED)) $(PYTEST_ARGS) \
	  --junitxml=$(CI_DIR)/junit-$(TIER)-$(UNIT_NAME).xml

test-host-labs: setup
	@mkdir -p $(CI_DIR)
	@$(TIERS) run "$(TIER): labs" --junit $(CI_DIR)/junit-$(TIER)-labs.xml -- \
	  $(BIN)/python -m pytest tests/integration tests/smoke $(PYTEST_ARGS) \
	  --junitxml=$(CI_DIR)/junit-$(TIER)-labs.xml

# The inner loop: no root, no lab (the unit tier holds ruff, mypy, import-linter and
# the strict docs build).
check: venv
	$(BIN)/python -m pytest tests/unit -n $(UNIT_WORKERS) -q -p no:cacheprovider

# Made (debootstrap) only when missing or when setup-system.sh or the script changed.
debian13-setup: system
	@scripts/setup-debian13.sh

# `make test-host` inside the root: the project set up there by the README's commands.
# Integration and smoke tests not marked `versioned` skip there (nslab's own logic:
# they ran in the host tier); the unit tier runs whole.
test-debian13: debian13-setup
	$(IN_DEBIAN13) test-host PYTEST_ARGS="$(PYTEST_ARGS)" NSLAB_TIER=debian13 TIER=debian13

test-debian13-unit test-debian13-labs: test-debian13-%: debian13-setup
	$(IN_DEBIAN13) test-host-$* PYTEST_ARGS="$(PYTEST_ARGS)" NSLAB_TIER=debian13 TIER=debian13 \
	  TIMED=$(TIMED)

# The project set up inside the root (what its test targets would fetch first).
debian13-project: debian13-setup
	$(IN_DEBIAN13) setup

kernel-setup: setup debian13-setup
	@KERNEL_PKG=$(KERNEL_PKG) scripts/setup-kernel.sh
	@KERNEL_DIST=trixie scripts/setup-kernel.sh
	@$(IN_DEBIAN13) venv

test-kernel: kernel-setup
	$(BIN)/python scripts/kernel-tier.py --kernels $(KERNEL_DISTS) $(if $(PYTEST_ARGS),-- $(PYTEST_ARGS))

unit: venv
	$(BIN)/python -m pytest tests/unit -n $(UNIT_WORKERS) $(PYTEST_ARGS)

clean-lab: venv
	$(BIN)/nslab clean
