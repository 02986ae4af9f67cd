# Two set-up commands: `make demo` and `make test`. Each creates .venv if needed.
# TORCH_SPEC pins torch: the default is the CPU build; a GPU user can run e.g.
#   make install TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
PYTHON ?= python3
TORCH_SPEC ?= torch==2.13.0
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test test-slow lint bench clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check -q $(TORCH_SPEC)
	$(BIN)/pip install --disable-pip-version-check -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# The Multi30k folder the demo scores the released models on (test_2016_flickr.{de,en}[.gz]).
MULTI30K ?= ../shared/data/multi30k

demo: $(STAMP)
	$(BIN)/gmlm reproduce --preset demo --out runs/demo data.corpus=multi30k:$(MULTI30K)

test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"
	$(BIN)/ruff check src tests
	$(BIN)/mypy

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/gmlm theory bench

clean:
	rm -rf $(VENV) runs .pytest_cache .mypy_cache .ruff_cache
