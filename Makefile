# nslab: `make demo` (set up + quick reproduction) and `make test` (set up + whole suite).
PY      ?= /usr/bin/python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
PYTEST_ARGS ?=
# The stock kernel the kernel tier boots (unpacked into .cache/kernel, never
# installed): a metapackage or an exact package, e.g. linux-image-6.1.0-56-amd64.
KERNEL_PKG ?= linux-image-amd64

.PHONY: setup system venv demo test test-host test-kernel kernel-setup unit clean-lab help

help:
	@echo "make demo         set up everything missing, then run the quick reproduction of the four studies"
	@echo "make test         set up everything missing, then run the whole suite: the host tier, then"
	@echo "                  the stock-kernel tier (QEMU guests on $(KERNEL_PKG), two boxes with real NIC drivers)"
	@echo "make test-host    the unit, integration and smoke tiers on this machine's kernel"
	@echo "make test-kernel  the stock-kernel tier only"

system:
	@scripts/setup-system.sh
	@scripts/setup-sshd.sh

$(STAMP): setup.py
	$(PY) -m venv --system-site-packages $(VENV)
	$(BIN)/pip install -q -U pip setuptools wheel
	$(BIN)/pip install -q -e '.[test]'
	@touch $(STAMP)

PKTGEN  := $(BIN)/nslab-pktgen

$(PKTGEN): nslab/csrc/pktgen.c nslab/csrc/xdplive.c nslab/csrc/xdplive.h $(STAMP)
	gcc -O2 -Wall -Wextra -o $@ nslab/csrc/pktgen.c nslab/csrc/xdplive.c -lm

venv: $(STAMP) $(PKTGEN)

setup: system venv

demo: setup
	$(BIN)/nslab reproduce --quick

test: test-host test-kernel

test-host: setup
	$(BIN)/python -m pytest $(PYTEST_ARGS)

kernel-setup: setup
	@KERNEL_PKG=$(KERNEL_PKG) scripts/setup-kernel.sh

test-kernel: kernel-setup
	$(BIN)/python scripts/kernel-tier.py $(if $(PYTEST_ARGS),-- $(PYTEST_ARGS))

unit: venv
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

clean-lab: venv
	$(BIN)/nslab clean
