# `make demo` and `make test` work on a fresh machine: each creates .venv with pip if missing,
# installs swarmctl editable with its dev extra, then runs.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.swarmctl-installed

.PHONY: demo test test-all lint bench install clean campaign-commit figures

install: $(STAMP)

# pip compiles what it installs one file at a time; compileall does the same on every core, in half the time.
# swarmctl's own modules are compiled too, so that each of the suite's processes reads them instead of
# compiling them. Bytecode only saves time: like pip, this skips what does not compile (one of torch's tests
# is Python 3.12 syntax), and an install goes on where compiling fails.
$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --no-compile -e '.[dev]'
	$(PY) -m compileall -qq -j 0 "$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" \
		swarmctl tools || true
	touch $(STAMP)

# The main job end to end on small defaults (a few minutes on 2 CPU cores): a 2,000-task dataset,
# SWARM (64-10-1) trained for 2 net minutes, evaluated against the true mixture's oracle, and its
# entropy map for one validation task.
DEMO_DATA := data/demo-seed0.h5
demo: $(STAMP)
	test -f $(DEMO_DATA) || $(PY) -m swarmctl gen-data --tasks 2000 --n-max 300 --out $(DEMO_DATA)
	rm -rf runs/demo-swarm
	$(PY) -m swarmctl train swarm --hidden 64 --iters 10 --minutes 2 --data $(DEMO_DATA) --name demo-swarm
	$(PY) -m swarmctl eval demo-swarm
	$(PY) -m swarmctl plot-entropy demo-swarm --clusters 7 --size 250 --grid 100
	@echo "demo run: runs/demo-swarm (curves.png, eval-val.json, entropy/entropy.png, entropy/classes.png)"

# The default suite on two worker processes where there are two cores or more, in this process on one core.
TEST_JOBS ?= $(shell python3 -c 'import os; n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1; print(2 if n >= 2 else 0)')
test: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_JOBS)

test-all: $(STAMP)
	$(PY) -m pytest -q -m "slow or not slow"

lint: $(STAMP)
	$(PY) -m ruff check swarmctl tests benchmarks tools

bench: $(STAMP)
	$(PY) benchmarks/layer_throughput.py

# Every figure in docs/ drawn again from the shipped models and the committed runs (tools/figures.py lists each
# figure's source; `$(PY) -m tools.figures --list`), on the CPU with fixed seeds: about 3 CPU minutes, most of
# them the exact entropy map.
figures: $(STAMP)
	$(PY) -m tools.figures

# After a GPU job (the maintainers' campaigns, tools/campaigns): FROM is the folder its output files were copied back to (the job's $OUT);
# COMMIT_OPTS passes options on (e.g. COMMIT_OPTS="--data-dir DIR", or "--keep-shipped").
# Checks everything it was given, then puts it into campaigns/ (and swarmctl/pretrained/ when a campaign
# beat a shipped model on its re-evaluation), all or nothing, then commits. FROM reaches the shell through
# the environment ("$$FROM"), so a folder with spaces or shell characters is one argument and never runs.
export FROM
campaign-commit: $(STAMP)
	@test -n "$$FROM" || { echo "usage: make campaign-commit FROM=<folder with session.json> [COMMIT_OPTS=...]"; exit 1; }
	$(PY) -m tools.campaigns commit "$$FROM" $(COMMIT_OPTS)
	git add campaigns swarmctl/pretrained
	git commit -m "Campaigns: results of the GPU job in $$FROM"

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
