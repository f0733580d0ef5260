# The two set-up commands in the README are `make demo` and `make test`.
# Both create .venv on first use and install the project into it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo reproduce test install clean-venv

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# Demo: a local cluster on this machine (synergyd + two agents on disjoint cores, fake GPUs,
# a temporary state dir) running a mixed workload, with a live table and a summary; about a
# minute, at most 3. Ctrl-C stops everything. Flags: DEMO_ARGS="--keep", "--workload FILE".
demo: $(STAMP)
	$(PY) examples/local_cluster/demo.py $(DEMO_ARGS)

# The paper's Fig. 9 point in the simulator (FIFO, 128 GPUs, load 9 jobs/h, 6000 jobs,
# measuring jobs 4000:5000): GPU-proportional vs Synergy-GREEDY vs Synergy-TUNE side by side.
reproduce: $(STAMP)
	$(VENV)/bin/synergy-sim compare --mechanisms proportional,greedy,tune

test: $(STAMP)
	$(PY) -m pytest -n 2 -q

clean-venv:
	rm -rf $(VENV)
