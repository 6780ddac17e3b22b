# The two commands of the quickstart: `make serve` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev

.PHONY: test serve dist bench soak clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

test: $(STAMP)
	$(BIN)/ruff check oma_bridge tests bench
	$(BIN)/ruff format --check oma_bridge tests bench
	$(BIN)/mypy --strict oma_bridge
	$(BIN)/lint-imports --no-logo --no-cache
	$(BIN)/pytest -n 2  # two workers: most of the suite waits on subprocesses and sockets

serve: $(STAMP)
	$(BIN)/oma-bridge serve

# The sdist and the wheel, in dist/ (offline: the dev venv's build and hatchling).
dist: $(STAMP)
	$(BIN)/python -m build --no-isolation --outdir dist

bench: $(STAMP)
	@for f in bench/bench_*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

soak: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,soak]'
	$(BIN)/python bench/soak.py --minutes 30 --clients 20 --churn 4 --out bench/out/soak

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
