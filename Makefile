# nslab: `make demo` (set up + quick reproduction) and `make test` (set up + whole suite).
PY      ?= /usr/bin/python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: setup system venv demo test unit clean-lab help

help:
	@echo "make demo   set up everything missing, then run the quick reproduction of the three studies"
	@echo "make test   set up everything missing, then run the whole test suite (root for integration tests)"

system:
	@scripts/setup-system.sh

$(STAMP): setup.py
	$(PY) -m venv --system-site-packages $(VENV)
	$(BIN)/pip install -q -U pip setuptools wheel
	$(BIN)/pip install -q -e '.[test]'
	@touch $(STAMP)

PKTGEN  := $(BIN)/nslab-pktgen

$(PKTGEN): nslab/csrc/pktgen.c $(STAMP)
	gcc -O2 -Wall -Wextra -o $@ nslab/csrc/pktgen.c -lm

venv: $(STAMP) $(PKTGEN)

setup: system venv

demo: setup
	$(BIN)/nslab reproduce --quick

test: setup
	$(BIN)/python -m pytest $(PYTEST_ARGS)

unit: venv
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

clean-lab: venv
	$(BIN)/nslab clean
