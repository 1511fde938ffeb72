# One entry point. `make demo` sets everything up and runs the demo; `make test` runs every check.
VENV ?= .venv
PY := $(VENV)/bin/python
LITELLM := litellm[proxy]==1.106.12
# LiteLLM otherwise fetches its model price map from the internet at import.
export LITELLM_LOCAL_MODEL_COST_MAP := True

.PHONY: setup build demo test lint rust-test py-test bench bench-inprocess bench-gateway bench-media bench-sha256 bench-soak clean

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

setup: $(PY)
	$(PY) -m pip install -q '$(LITELLM)' maturin pytest pytest-timeout pytest-asyncio ruff mypy
	$(MAKE) build

build: $(PY)
	$(VENV)/bin/maturin develop --release -q

demo: setup
	$(PY) -m litellm_fastpath.demo

lint: $(PY)
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings
	PYO3_PYTHON=$(abspath $(PY)) cargo clippy --all-targets --features python -- -D warnings
	$(VENV)/bin/ruff check python tests benches
	$(VENV)/bin/ruff format --check python tests benches
	$(PY) -m mypy.stubtest litellm_fastpath._native --ignore-missing-stub

rust-test:
	cargo test

py-test: $(PY)
	$(PY) -m pytest

test: setup lint rust-test py-test

bench: bench-inprocess bench-gateway bench-media bench-sha256

bench-inprocess: $(PY)
	$(PY) benches/inprocess.py

bench-gateway: $(PY)
	$(PY) -m pip install -q matplotlib py-spy
	$(PY) benches/gateway.py

bench-media: $(PY)
	$(PY) -m pip install -q matplotlib
	$(PY) benches/media.py
	$(PY) benches/proxy_media.py

bench-sha256: $(PY)
	$(PY) benches/sha256.py

# Not part of `bench`: 10 minutes per arm (~22 min in all).
bench-soak: $(PY)
	$(PY) -m pip install -q matplotlib
	$(PY) benches/soak.py

clean:
	rm -rf target $(VENV)
