# `make demo` and `make test` work on a fresh machine: each creates .venv with pip if missing,
# installs swarmctl editable with its dev extra, then runs.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.swarmctl-installed

.PHONY: demo test test-all lint bench install clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m swarmctl demo

test: $(STAMP)
	$(PY) -m pytest -q

test-all: $(STAMP)
	$(PY) -m pytest -q -m "slow or not slow"

lint: $(STAMP)
	$(PY) -m ruff check swarmctl tests benchmarks

bench: $(STAMP)
	$(PY) benchmarks/layer_throughput.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
