# Every target that runs code first makes its own virtual environment and
# installs Antler into it (editable, with the dev tools), so a fresh clone
# needs nothing but python3.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: all install test lint typecheck demo bench wheel clean

all: test

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(PY) -m ruff check core plugins contrib tests benchmarks

typecheck: $(STAMP)
	$(PY) -m mypy core

test: lint typecheck
	$(PY) -m pytest

demo: $(STAMP)
	$(VENV)/bin/antler demo

bench: $(STAMP)
	$(PY) -m benchmarks

wheel: $(STAMP)
	rm -rf dist
	$(PY) -m build --wheel --outdir dist .

clean:
	rm -rf $(VENV) build dist *.egg-info .antler
