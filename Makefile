# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast install lint format clean bench-deps browser

# Re-installs only when pyproject.toml changes, so a second run installs nothing.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[embedded,dev,bench]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/barcast demo

# Three test processes (pytest-xdist): the integration tests mostly wait on the broker and their
# worker processes, so a third keeps both cores busy; each process starts its own broker.
test: $(STAMP) browser
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/pytest -n 3 --dist load

# The unit tests alone, one process per core: every test that starts the embedded broker or a
# worker process is marked integration (tests/conftest.py fails one that is not).
test-fast: $(STAMP) browser
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/pytest -n 2 --dist worksteal -m "not integration"

# The live page's browser test (tests/streams/web/test_live_page.py) drives Debian's chromium headless;
# installed here only when missing, and only as root (apt-get), else the package is named.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get install -y --no-install-recommends chromium || \
	      { apt-get update && apt-get install -y --no-install-recommends chromium; }; \
	  else \
	    echo "make browser: the browser tests need Debian's chromium package;" \
	      "run as root: apt-get install -y chromium" >&2; exit 1; \
	  fi; }

# pytorch-forecasting (the model benchmark's anchor) pins pandas < 3.1; it runs with ours, so it
# is installed without its dependency resolution, next to the exact versions it needs.
bench-deps: $(STAMP)
	$(BIN)/python -m pip install --quiet --no-deps pytorch-forecasting==1.8.0 lightning==2.6.6 \
	  pytorch-lightning==2.6.6 lightning-utilities==0.15.3 torchmetrics==1.9.0 \
	  scikit-learn==1.9.1 scipy==1.17.1 scikit-base==1.0.2 joblib==1.6.0 threadpoolctl==3.8.0 \
	  narwhals==2.29.0 cloudpickle==3.1.3

lint: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) var .pytest_cache .ruff_cache
