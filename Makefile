# Tidemark developer entry points. `make test` works on a fresh machine: it creates .venv,
# installs everything the tests need from pyproject.toml, lints, type-checks and runs pytest.
# `make demo` runs the embedded pipeline end to end and prints a PASS/FAIL report.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
DEPS_HASH := $(shell cat pyproject.toml | sha1sum | cut -c1-12)
STAMP := $(VENV)/.installed-$(DEPS_HASH)
PYTEST_ARGS ?=
NODE_STAMP := node_modules/.installed-$(shell cat package.json package-lock.json | sha1sum | cut -c1-12)
# jsii prints an end-of-life banner on every synth under Node 20 (end of life 2026-04-30); these
# machines run Node 20 (Node 22 is recommended). The variable takes major versions, not a flag.
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20


.PHONY: java install test unit integration e2e lint typecheck bench demo synth deploy destroy clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is required, found " + sys.version' 
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,cdk,demo,spark,formats]'
	@rm -f $(VENV)/.installed-* && touch $@

# PySpark needs a JVM (Spark 3.5: Java 8, 11 or 17).
java:
	@command -v java >/dev/null || { echo "Java is missing: PySpark needs a JDK (e.g. 'apt-get install openjdk-17-jre-headless')"; exit 1; }

# The CDK CLI, pinned in package.json (`npx cdk ...`).
$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	@rm -f node_modules/.installed-* && touch $@

install: $(STAMP) $(NODE_STAMP) java

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: install
	$(VENV)/bin/mypy

test: lint typecheck
	$(PY) -m pytest $(PYTEST_ARGS)

unit: install
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

integration: install
	$(PY) -m pytest tests/integration $(PYTEST_ARGS)

e2e: install
	$(PY) -m pytest tests/e2e $(PYTEST_ARGS)

# The whole pipeline on this machine (broker or Kinesis on moto, local ESM, archiver):
# `make demo ARGS=--chaos`, `make demo ARGS="--source kinesis --chaos"`.
demo: install
	$(VENV)/bin/tidemark demo $(ARGS)

# `cdk synth` needs no Docker and no AWS account: the core layer is bundled with pip.
synth: install
	npx cdk synth --quiet

deploy: install
	npx cdk deploy $(ARGS)

destroy: install
	npx cdk destroy $(ARGS)

bench: install
	$(PY) bench/handler.py
	$(PY) bench/spark_aggregate.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache cdk.out .hypothesis node_modules .cache
