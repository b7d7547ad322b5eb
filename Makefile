# Tidemark developer entry points. `make test` works on a fresh machine: it creates .venv,
# installs everything the tests need from pyproject.toml, lints, type-checks and runs pytest.
# `make demo` runs the embedded pipeline end to end and prints a PASS/FAIL report.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
DEPS_HASH := $(shell cat pyproject.toml requirements/dev.lock | sha1sum | cut -c1-12)
STAMP := $(VENV)/.installed-$(DEPS_HASH)
PYTEST_ARGS ?=
# `make test` runs pytest in two worker processes (pytest-xdist): the suite waits on brokers,
# moto and child processes much of the time. PYTEST_WORKERS=0 runs it in one process.
PYTEST_WORKERS ?= 2
NODE_STAMP := node_modules/.installed-$(shell cat package.json package-lock.json | sha1sum | cut -c1-12)
# jsii prints an end-of-life banner on every synth under Node 20 (end of life 2026-04-30); these
# machines run Node 20 (Node 22 is recommended). The variable takes major versions, not a flag.
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20


.PHONY: java rabbitmq install lock test unit integration e2e lint typecheck bench demo synth deploy destroy clean

# Every dependency from the lock, by hash (requirements/dev.lock: `make lock` writes it from
# pyproject.toml); then the project itself, whose dependencies the lock already holds (hash mode
# refuses an editable install, so it is a second step, without dependencies).
$(STAMP): pyproject.toml requirements/dev.lock
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is required, found " + sys.version' 
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --require-hashes -r requirements/dev.lock
	$(PY) -m pip install --quiet --no-deps -e .
	@rm -f $(VENV)/.installed-* && touch $@

# Re-resolve requirements/dev.lock from pyproject.toml (pip-tools in a venv of its own; Python 3.11)
# and the Lambda layers' locks, stacks/locks/*.lock.
lock:
	@test -x .cache/pip-tools/bin/pip-compile || { $(PYTHON) -m venv .cache/pip-tools && .cache/pip-tools/bin/pip install --quiet pip-tools; }
	.cache/pip-tools/bin/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras --no-annotate \
	  --no-emit-index-url --no-emit-find-links --no-header $(LOCK_ARGS) \
	  --extra dev --extra cdk --extra demo --extra spark --extra formats --output-file requirements/dev.lock.new pyproject.toml
	$(PY) -m tests.support.dependency_lock finish requirements/dev.lock.new requirements/dev.lock
	$(PY) -m stacks.layer_lock    # the Lambda layers' locks (aarch64, the runtime's Python)

# PySpark needs a JVM (Spark 3.5: Java 8, 11 or 17).
java:
	@command -v java >/dev/null || { echo "Java is missing: PySpark needs a JDK (e.g. 'apt-get install openjdk-17-jre-headless')"; exit 1; }

# The RabbitMQ tests and the demo start their own broker (tidemark.embedded.rabbitmq) on free
# loopback ports with their own data, log and Erlang cookie: they need the server installed, not
# running. Debian's package starts a system broker (5672, epmd on 4369) when it installs: a
# policy-rc.d that exits 101 keeps it from starting (an existing one is put back afterwards, also
# after an interrupted run), and under systemd the service is disabled for the next boots too.
rabbitmq:
	@dpkg-query -W -f='$${Status}' rabbitmq-server 2>/dev/null | grep -qx 'install ok installed' && exit 0; \
	command -v apt-get >/dev/null || { echo "rabbitmq-server is missing: install RabbitMQ 3.x (the tests start their own broker from it)"; exit 1; }; \
	[ "$$(id -u)" = 0 ] || { echo "rabbitmq-server is missing: run 'sudo make rabbitmq' (or 'sudo apt-get install rabbitmq-server'); the tests start their own broker from it"; exit 1; }; \
	set -e; echo "installing rabbitmq-server (its system broker is kept from starting)"; \
	policy=/usr/sbin/policy-rc.d; saved=$$policy.tidemark-saved; \
	if [ -e $$saved ] || [ -L $$saved ]; then rm -f $$policy; \
	elif [ -e $$policy ] || [ -L $$policy ]; then mv -f $$policy $$saved; fi; \
	trap 'trap "" INT TERM HUP; rm -f $$policy; if [ -e $$saved ] || [ -L $$saved ]; then mv -f $$saved $$policy; fi' EXIT; \
	trap 'trap "" INT TERM HUP; exit 130' INT TERM HUP; \
	printf '#!/bin/sh\n# tidemark: make rabbitmq (removed when the install ends)\nexit 101\n' > $$policy; chmod 755 $$policy; \
	export DEBIAN_FRONTEND=noninteractive; \
	apt-get -qq -o DPkg::Lock::Timeout=600 update; \
	apt-get -qq -y -o DPkg::Lock::Timeout=600 install --no-install-recommends rabbitmq-server >/dev/null; \
	if [ -d /run/systemd/system ]; then systemctl disable --now rabbitmq-server.service >/dev/null 2>&1 || true; fi

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

test: rabbitmq lint typecheck
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

unit: install
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

integration: install rabbitmq
	$(PY) -m pytest tests/integration $(PYTEST_ARGS)

e2e: install rabbitmq
	$(PY) -m pytest tests/e2e $(PYTEST_ARGS)

# The whole pipeline on this machine (a Kafka broker, Kinesis on moto or a RabbitMQ queue; the
# local ESM; the archiver): `make demo ARGS=--chaos`, `make demo ARGS="--source kinesis --chaos"`,
# `make demo ARGS="--source rabbitmq --chaos"`.
demo: install rabbitmq
	$(VENV)/bin/tidemark demo $(ARGS)

# `cdk synth` needs no Docker and no AWS account: the core layer is bundled with pip.
synth: install
	npx cdk synth --quiet

deploy: install
	npx cdk deploy $(ARGS)

# The stack has termination protection (it holds the ledger): lift it first, on purpose:
# aws cloudformation update-termination-protection --no-enable-termination-protection --stack-name <name>
destroy: install
	npx cdk destroy $(ARGS)

bench: install
	$(PY) bench/handler.py
	$(PY) bench/spark_aggregate.py
	$(PY) bench/queue_interleavings.py --seeds 200
	$(PY) bench/audit_interleavings.py --seeds 200
	$(PY) bench/replay_interleavings.py --seeds 200
	$(PY) bench/recover_interleavings.py --seeds 200
	$(PY) bench/aggregation_properties.py --seeds 50

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache cdk.out .hypothesis node_modules .cache
