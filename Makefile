# Every target that runs code first makes its own virtual environment and
# installs Antler into it (editable, with the dev tools), so a fresh clone
# needs nothing but python3.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: all install test test-slow lint typecheck demo bench wheel clean postgres-up postgres-down

all: test

# uv (installed from the package index into the venv first) fetches the packages in
# parallel and compiles them on every core: about a third of pip's time from a fresh clone.
# Where uv cannot be installed, pip does the same install.
$(STAMP): pyproject.toml
	@echo "==> Setting up $(VENV): Antler (editable) and its dev tools; the first time takes a minute or two"
	$(PYTHON) -m venv $(VENV)
	if $(PY) -m pip install --quiet uv; then \
	  $(VENV)/bin/uv pip install --python $(PY) --compile-bytecode -e ".[dev]"; \
	else \
	  $(PY) -m pip install --progress-bar off -e ".[dev]"; \
	fi
	touch $(STAMP)
	@echo "==> $(VENV) is ready"

install: $(STAMP)

# `make test` runs these two beside the tests, so each is one command.
LINT = $(PY) -m ruff check core plugins contrib tests benchmarks
lint: $(STAMP)
	$(LINT)

# mypy checks the import package `antler` as installed: core/ with plugins/ and
# contrib/ inside it. A tree of links gives it that layout without a build.
# Its cache (build/mypy-cache) outlives the tree, so a second run checks only what changed.
TYPECHECK_TREE := build/typecheck
TYPECHECK = rm -rf $(TYPECHECK_TREE) && mkdir -p $(TYPECHECK_TREE)/antler \
	&& for entry in core/*; do ln -s "$(CURDIR)/$$entry" $(TYPECHECK_TREE)/antler/; done \
	&& ln -s "$(CURDIR)/plugins" "$(CURDIR)/contrib" $(TYPECHECK_TREE)/antler/ \
	&& cd $(TYPECHECK_TREE) && $(CURDIR)/$(PY) -m mypy --config-file $(CURDIR)/pyproject.toml \
		--cache-dir $(CURDIR)/build/mypy-cache -p antler
typecheck: $(STAMP)
	$(TYPECHECK)

# The tests run in parallel, two workers per core up to eight (many tests wait on the
# processes they start: the CLI, servers, sandboxes; a worker holds about 0.7 GB;
# PYTEST_WORKERS=0: in this process),
# in a random order whose seed is printed first; tests that share a server or a port
# carry one `xdist_group` mark and so run on one worker. PYTEST_ARGS adds options,
# e.g. PYTEST_ARGS=--randomly-seed=1234 to repeat an order.
# The sources are compiled first (half a CPU-second, once), so neither the workers nor
# the interpreters the tests start (`antler run`, the conformance worker, ...) compile
# them again each, as they would where PYTHONDONTWRITEBYTECODE is set. Likewise pytest's
# rewriting of the test modules' asserts is done once, on every core, and cached
# (tests/rewrite_cache.py: 8 CPU-seconds from a fresh clone), instead of by each worker.
# `make test` runs ruff and mypy beside the tests, on the cores the tests leave idle; their
# output (in build/checks/) follows the tests' summary, and any of the three failing fails it.
# Workers: twice the cores, at most one per GB of available memory, at most eight.
PYTEST_WORKERS ?= $(shell awk -v cores="$$(nproc 2>/dev/null || echo 2)" \
  '/^MemAvailable:/ { n = 2 * cores; gb = int($$2 / 1048576); if (gb < n) n = gb; \
                      if (n > 8) n = 8; if (n < 1) n = 1; print n }' /proc/meminfo 2>/dev/null \
  || echo auto)
PYTEST_ARGS    ?=
CHECKS_DIR     := build/checks
test: $(STAMP)
	$(PY) -m compileall -q core plugins contrib
	$(PY) -m tests.rewrite_cache
	@rm -rf $(CHECKS_DIR) && mkdir -p $(CHECKS_DIR)
	@echo "==> ruff and mypy run beside the tests; their results follow the tests' summary"
	@( (echo '$(LINT)' && $(LINT)) > $(CHECKS_DIR)/lint.log 2>&1; \
	  echo $$? > $(CHECKS_DIR)/lint.status ) & \
	( (echo 'mypy -p antler' && $(TYPECHECK)) > $(CHECKS_DIR)/typecheck.log 2>&1; \
	  echo $$? > $(CHECKS_DIR)/typecheck.status ) & \
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS); tests=$$?; \
	wait; status=$$tests; \
	for check in lint typecheck; do \
	  if [ "$$(cat $(CHECKS_DIR)/$$check.status)" = 0 ]; then \
	    echo "==> make $$check: passed"; tail -n 1 $(CHECKS_DIR)/$$check.log; \
	  else \
	    echo "==> make $$check: FAILED"; cat $(CHECKS_DIR)/$$check.log; status=1; \
	  fi; \
	done; \
	[ $$tests = 0 ] || echo "==> the tests FAILED (their summary is above)"; \
	exit $$status

# The long checks `make test` leaves out (100,000-input fuzzing, the twenty-process
# store race, the PostgreSQL restarts, the slower `antler run` process tests, the
# conformance checks that run a plugin's own agents most), and the
# `fuzz` property tests again with all their examples (`make test` draws a quarter);
# CI runs them too.
test-slow: $(STAMP)
	$(PY) -m compileall -q core plugins contrib
	$(PY) -m pytest -m "slow or fuzz" --full-examples $(PYTEST_ARGS)

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
