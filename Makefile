# Two commands for a fresh clone:
#   make setup   create .venv, install (CPU torch pinned first), ingest corpus/ + skills/, ask a first question
#   make test    run the test suite (installs first if needed), WORKERS=2 processes (WORKERS=0: one);
#                the 15 slowest tests are listed last, where CI's time goes
#   make floors  install pyproject's lowest admitted versions in a throwaway venv and run the API tests
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export GRADIO_ANALYTICS_ENABLED := False
export ANONYMIZED_TELEMETRY := False
# test processes: most tests run Triton's interpreter, one core each (2 cores: 19 -> 12 minutes)
WORKERS ?= 2

.PHONY: setup install test floors ui clean

$(BIN)/kernelrag: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first and pinned: a bare 'torch' requirement would pull a multi-GB CUDA build
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
	@touch $@

install: $(BIN)/kernelrag

setup: install
	$(BIN)/kernelrag ingest corpus/ skills/
	$(BIN)/kernelrag ask "how do I avoid shared memory bank conflicts"

test: install
	$(BIN)/python -m pytest -q -n $(WORKERS) --durations=15

floors:
	PYTHON=$(PYTHON) bash .ci/floors

ui: install
	$(BIN)/kernelrag ui

clean:
	rm -rf $(VENV) build *.egg-info
