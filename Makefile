# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup demo test test-all bench clean

setup: $(STAMP)

# Install the pinned stack, then start one SparkSession so Delta's JARs are fetched from Maven
# Central now: a missing install step fails here, not in the middle of a run.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip uv
	$(BIN)/uv pip install --python $(BIN)/python --quiet -e ".[dev]"
	$(BIN)/python -m lakeivm.spark --fetch-jars
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/lakeivm demo

test: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" -p no:cacheprovider

test-all: $(STAMP)
	$(BIN)/python -m pytest -p no:cacheprovider

bench: $(STAMP)
	$(BIN)/lakeivm bench all

clean:
	rm -rf lake .lakeivm-airflow spark-warehouse metastore_db
