# One entry point. `make demo` sets everything up and runs the demo; `make test` runs every check.
VENV ?= .venv
PY := $(VENV)/bin/python
LITELLM := litellm[proxy]==1.106.12
# `make wheel-test`'s fresh venv (under target/, so `make clean` removes it).
WHEEL_VENV ?= target/venv-wheel
# LiteLLM otherwise fetches its model price map from the internet at import.
export LITELLM_LOCAL_MODEL_COST_MAP := True

.PHONY: setup build demo test lint rust-test py-test wheel wheel-test bench bench-inprocess bench-gateway bench-media bench-streaming bench-messages bench-lane bench-lane-messages bench-realtime bench-warm clean

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

setup: $(PY)
	$(PY) -m pip install -q '$(LITELLM)' maturin pytest pytest-timeout pytest-asyncio ruff mypy 'anthropic>=0.69,<1' prometheus_client
	$(MAKE) build

build: $(PY)
	$(VENV)/bin/maturin develop --release -q

demo: setup
	$(PY) -m devtools.demo

lint: $(PY)
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings
	PYO3_PYTHON=$(abspath $(PY)) cargo clippy --all-targets --features python -- -D warnings
	$(VENV)/bin/ruff check python devtools tests benches
	$(VENV)/bin/ruff format --check python devtools tests benches
	$(PY) -m mypy.stubtest litellm_fastpath._native
	$(PY) -m mypy python/litellm_fastpath devtools

rust-test:
	cargo test

py-test: $(PY)
	$(PY) -m pytest

# The abi3 wheel users install (CPython >= 3.11), in dist/.
wheel: $(PY)
	$(PY) -m pip install -q maturin
	rm -f dist/*.whl
	$(VENV)/bin/maturin build --release -q -o dist

# What users install is what CI tests: the wheel in a fresh venv, run from outside the repo (so
# `litellm_fastpath` can only come from the wheel) behind the real LiteLLM proxy.
wheel-test: wheel
	rm -rf $(WHEEL_VENV)
	python3 -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/python -m pip install -q '$(LITELLM)' pytest pytest-timeout pytest-asyncio \
		httpx pyyaml dist/*.whl
	cd "$$(mktemp -d)" && \
		$(abspath $(WHEEL_VENV))/bin/python -c \
			'import litellm_fastpath; print("litellm_fastpath from", litellm_fastpath.__file__)' && \
		$(abspath $(WHEEL_VENV))/bin/pytest -p no:cacheprovider -c $(CURDIR)/pyproject.toml \
			$(CURDIR)/tests/smoke/test_wheel_proxy.py

test: setup lint rust-test py-test wheel-test

bench: bench-inprocess bench-gateway bench-media bench-streaming bench-messages bench-lane bench-lane-messages bench-realtime

bench-inprocess: $(PY)
	$(PY) -m benches.inprocess

bench-gateway: $(PY)
	$(PY) -m pip install -q matplotlib
	$(PY) -m benches.gateway

# media.py compares body builders through `prepare_converse_body`, built only with `bench`;
# `make build` (and so `make test`) reinstalls the extension without it.
bench-media: $(PY)
	$(VENV)/bin/maturin develop --release -q --features python,bench
	$(PY) -m benches.media
	$(PY) -m benches.media --proxy

bench-streaming: $(PY)
	for provider in openai anthropic bedrock; do $(PY) -m benches.streaming --provider $$provider; done

bench-messages: $(PY)
	$(PY) -m benches.messages

bench-lane: $(PY)
	$(PY) -m pip install -q matplotlib
	$(PY) -m benches.lane
	$(PY) -m benches.lane --no-callbacks
	$(PY) -m benches.lane --stream
	$(PY) -m benches.lane --stream-usage
	$(PY) -m benches.lane --slots 64
	$(PY) -m benches.lane --usage
	$(PY) -m benches.lane --stream --usage
	$(PY) -m benches.lane --routing
	$(PY) -m benches.lane --route keyed
	$(PY) -m benches.lane --route keyed-limits
	$(PY) -m benches.lane --route keyed-limits --no-redis
	$(PY) -m benches.lane --route keyed-spend
	$(PY) -m benches.lane --route keyed-budget
	$(PY) -m benches.lane --route keyed-limits-spend

bench-lane-messages: $(PY)
	$(PY) -m benches.lane --route messages
	$(PY) -m benches.lane --route messages --provider bedrock

bench-realtime: $(PY)
	$(PY) -m benches.realtime

# Not part of `bench`: five 2-minute idle spells (~12 min).
bench-warm: $(PY)
	$(PY) -m benches.warm

clean:
	rm -rf target $(VENV) dist
