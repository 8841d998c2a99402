# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup demo test test-all bench clean

setup: $(STAMP)

# Install the pinned stack, then fetch Delta's JARs from Maven Central once (into ~/.cache/lakeivm/jars)
# and check a session loads them: a missing install step fails here, not in the middle of a run.
# --compile-bytecode: every package's .pyc written once here. uv writes none by default, and where
# PYTHONDONTWRITEBYTECODE is set (this machine's and CI's shells) Python never writes them either, so
# every process compiled pandas, pyspark, Airflow... from source: a `lakeivm refresh` with nothing to
# do took 5.5 s of CPU, 3.9 s of it `compile`; with the .pyc files 1.8 s.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip uv
	$(BIN)/uv pip install --python $(BIN)/python --quiet --compile-bytecode -e ".[dev]"
	$(BIN)/python -m lakeivm.spark --fetch-jars
	touch $(STAMP)

# lakeivm's own modules are installed editable: their .pyc files are (re)written before each use
# (only the changed ones), for the same reason as above.
BYTECODE := $(BIN)/python -m compileall -q lib tests > /dev/null

demo: $(STAMP)
	@$(BYTECODE)
	$(BIN)/lakeivm demo

# The suite is CPU-bound: one test process alone keeps ~1.4 of the 2 cores busy (its JVM: TPC-H q12-q22
# stream, 195 s CPU in 135 s), and `vmstat` showed 0 % idle through a whole run with 3 workers. So it
# runs in 2 worker processes: each JVM JIT-compiles the same code, a third one only added that work.
# The Spark Connect clients (connect, deployment) run at the same
# time in a process of their own (pyspark refuses a Connect session beside a local one), their output
# kept in $(CONNECT_LOG) and printed after the local workers' report. The local workers run under
# `nice`: the deployment test's Airflow tasks have timeouts and a 2-core CI machine starved them
# (its first build took 4 min there), while the local workers only wait longer.
# --dist loadgroup --no-loadscope-reorder: one test (or xdist_group) per hand-out, in the collection
# order conftest gives (heavy tests first, longest first). xdist's default `load` handed each worker a
# first chunk of ~60 consecutive tests, so every heavy test landed on one worker, which ended alone.
CONNECT_LOG := .connect-tests.log
test: $(STAMP)
	@$(BYTECODE)
	@$(BIN)/python -m pytest -m "(connect or deployment) and not slow" -p no:cacheprovider --durations=10 \
	  > $(CONNECT_LOG) 2>&1 & connect=$$!; \
	nice -n 10 $(BIN)/python -m pytest -m "not slow and not connect and not deployment" -n 2 --dist loadgroup --no-loadscope-reorder -p no:cacheprovider --durations=25; \
	local=$$?; wait $$connect; remote=$$?; \
	echo "== the Spark Connect clients (connect, deployment markers), run alongside =="; cat $(CONNECT_LOG); \
	test $$local -eq 0 && test $$remote -eq 0

test-all: $(STAMP)
	@$(BYTECODE)
	$(BIN)/python -m pytest -p no:cacheprovider

# The real deployment on loopback (PostgreSQL, Spark standalone, the Connect server, Airflow 3; lakeivm/infra/deploy.py):
# a small lake, one on-demand refresh, then the UI's URL; Ctrl-C stops every service.
cluster-demo: $(STAMP)
	@$(BYTECODE)
	$(BIN)/python -m lakeivm.infra.deploy

bench: $(STAMP)
	@$(BYTECODE)
	$(BIN)/lakeivm bench all

clean:
	rm -rf lake .lakeivm-airflow spark-warehouse metastore_db .connect-tests.log
