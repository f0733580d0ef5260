# The two set-up commands in the README are `make demo` and `make test`.
# Both create .venv on first use and install the project into it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test install clean-venv

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# Demo: a small reproduction of the paper's Fig. 9 point (proportional vs tune).
demo: $(STAMP)
	$(VENV)/bin/synergy-sim compare --mechanisms proportional,greedy,tune --servers 16 --load 9 --jobs 3000 --measure 1500:2500

test: $(STAMP)
	$(PY) -m pytest -n 2 -q

clean-venv:
	rm -rf $(VENV)
