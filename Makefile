# Every target creates .venv when it is missing and installs the project into it.
# torch is pinned to the CPU build (torch==2.13.*), which pip finds on these machines:
# never let a resolver pull a multi-gigabyte CUDA build.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
ENV := PREFECT_HOME=$(CURDIR)/.prefect \
       PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=90 \
       PREFECT_SERVER_ANALYTICS_ENABLED=false DO_NOT_TRACK=1 \
       PREFECT_LOGGING_LEVEL=WARNING PREFECT_SERVER_LOGGING_LEVEL=CRITICAL \
       HF_HUB_DISABLE_TELEMETRY=1 TRANSFORMERS_VERBOSITY=error

.PHONY: install test bench catalogue clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet 'torch==2.13.*'
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

test: $(STAMP)
	$(ENV) $(PY) -m pytest -q

bench: $(STAMP)
	$(ENV) $(PY) -m bench

catalogue: $(STAMP)
	$(ENV) HF_HUB_OFFLINE=1 $(VENV)/bin/speccat refresh --source snapshot --db catalogue.duckdb

clean:
	rm -rf $(VENV) .prefect build *.egg-info
