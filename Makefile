# Every target creates .venv when it is missing and installs the project into it from
# requirements.lock: every dependency of the app and its tests at an exact version with its
# hashes, torch as the CPU build (torch==2.13.0+cpu, the wheel pip finds on these machines),
# so a fresh machine gets exactly the versions the suite passed on. A change to the lock or to
# pyproject.toml makes the venv anew, so nothing installed before outlives the lock.
# `make lock` re-resolves the lock to the newest releases pyproject.toml's ranges allow;
# `make drift` censuses the snapshot on those newest releases and prints what changed
# (docs/refresh.md, "Upgrading a library").
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
LOCK := requirements.lock
# the installer that reads the lock, and the resolver that writes it (in a venv of its own,
# so the project's venv holds exactly the lock)
PIP_VERSION := 26.3
PIP_TOOLS := pip-tools==7.7.0
LOCK_TOOLS := .lock-tools
ENV := PREFECT_HOME=$(CURDIR)/.prefect \
       PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=90 \
       PREFECT_SERVER_ANALYTICS_ENABLED=false DO_NOT_TRACK=1 \
       PREFECT_LOGGING_LEVEL=WARNING PREFECT_SERVER_LOGGING_LEVEL=CRITICAL \
       HF_HUB_DISABLE_TELEMETRY=1 TRANSFORMERS_VERBOSITY=error

.PHONY: install browser test bench catalogue lock drift clean

install: $(STAMP)

$(STAMP): pyproject.toml $(LOCK)
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet 'pip==$(PIP_VERSION)'
	$(PY) -m pip install --quiet --require-hashes --no-deps -r $(LOCK)
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

# The report's tests open its pages in headless Chromium: Debian's chromium and its driver,
# installed from the system's packages when missing (never a browser build of a tool's own).
browser:
	command -v chromium >/dev/null && command -v chromedriver >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null)

# The suite on every core: pytest-xdist's workers, each test file whole on one worker and the
# files that share the session's night, or the shipped configs' specs, on the same one
# (tests/support/workers.py).
test: $(STAMP) browser
	$(ENV) $(PY) -m pytest -q -n auto --dist loadfile

bench: $(STAMP)
	$(ENV) $(PY) -m bench

catalogue: $(STAMP)
	$(ENV) HF_HUB_OFFLINE=1 $(VENV)/bin/speccat refresh --source snapshot --db catalogue.duckdb

# Re-resolve every pin to the newest release pyproject.toml's ranges allow, with hashes.
# pip-tools rather than uv: it resolves through pip, so it reads this machine's pip settings
# and finds the CPU build of torch that pip finds (uv would resolve a CUDA build).
lock:
	test -x $(LOCK_TOOLS)/bin/pip-compile || ($(PYTHON) -m venv $(LOCK_TOOLS) && $(LOCK_TOOLS)/bin/pip install --quiet 'pip==$(PIP_VERSION)' '$(PIP_TOOLS)')
	$(LOCK_TOOLS)/bin/pip-compile --quiet --upgrade --generate-hashes --allow-unsafe --extra test --strip-extras \
		--no-emit-index-url --no-emit-find-links --no-emit-trusted-host --output-file $(LOCK) pyproject.toml

# The newest releases pyproject.toml allows, in a throwaway venv, against the lock: exits
# non-zero when a kind that prices under the lock stops pricing.
drift: $(STAMP)
	$(ENV) $(PY) -m bench drift

clean:
	rm -rf $(VENV) $(LOCK_TOOLS) .prefect build *.egg-info
