# Every target that runs code first makes its own virtual environment and
# installs Antler into it (editable, with the dev tools), so a fresh clone
# needs nothing but python3.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: all install test test-slow lint typecheck demo bench wheel clean postgres-up postgres-down

all: test

# pip names each package as it goes: the first install takes a minute or two.
$(STAMP): pyproject.toml
	@echo "==> Setting up $(VENV): Antler (editable) and its dev tools; the first time takes a minute or two"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --progress-bar off -e ".[dev]"
	touch $(STAMP)
	@echo "==> $(VENV) is ready"

install: $(STAMP)

lint: $(STAMP)
	$(PY) -m ruff check core plugins contrib tests benchmarks

# mypy checks the import package `antler` as installed: core/ with plugins/ and
# contrib/ inside it. A tree of links gives it that layout without a build.
# Its cache (build/mypy-cache) outlives the tree, so a second run checks only what changed.
TYPECHECK_TREE := build/typecheck
typecheck: $(STAMP)
	rm -rf $(TYPECHECK_TREE) && mkdir -p $(TYPECHECK_TREE)/antler
	for entry in core/*; do ln -s "$(CURDIR)/$$entry" $(TYPECHECK_TREE)/antler/; done
	ln -s "$(CURDIR)/plugins" "$(CURDIR)/contrib" $(TYPECHECK_TREE)/antler/
	cd $(TYPECHECK_TREE) && $(CURDIR)/$(PY) -m mypy --config-file $(CURDIR)/pyproject.toml \
		--cache-dir $(CURDIR)/build/mypy-cache -p antler

# The tests run in parallel, one worker per core up to eight (a worker holds about
# 0.7 GB; PYTEST_WORKERS=0: in this process),
# in a random order whose seed is printed first; tests that share a server or a port
# carry one `xdist_group` mark and so run on one worker. PYTEST_ARGS adds options,
# e.g. PYTEST_ARGS=--randomly-seed=1234 to repeat an order.
# The sources are compiled first (half a CPU-second, once), so neither the workers nor
# the interpreters the tests start (`antler run`, the conformance worker, ...) compile
# them again each, as they would where PYTHONDONTWRITEBYTECODE is set.
PYTEST_WORKERS ?= auto
PYTEST_ARGS    ?=
test: lint typecheck
	$(PY) -m compileall -q core plugins contrib
	$(PY) -m pytest -n $(PYTEST_WORKERS) --maxprocesses 8 --dist loadgroup $(PYTEST_ARGS)

# The long checks `make test` leaves out (100,000-input fuzzing, the twenty-process
# store race, the PostgreSQL restarts); CI runs them too.
test-slow: $(STAMP)
	$(PY) -m compileall -q core plugins contrib
	$(PY) -m pytest -m slow $(PYTEST_ARGS)

demo: $(STAMP)
	$(VENV)/bin/antler demo

bench: $(STAMP)
	$(PY) -m benchmarks

wheel: $(STAMP)
	rm -rf dist
	$(PY) -m build --wheel --outdir dist .

# A throwaway PostgreSQL for the storage tests: `eval "$$(make -s postgres-up)"`
# exports ANTLER_TEST_POSTGRES_URL; `make postgres-down` stops and removes it.
postgres-up:
	@.ci/postgres up

postgres-down:
	@.ci/postgres down

clean:
	rm -rf $(VENV) build dist *.egg-info .antler
