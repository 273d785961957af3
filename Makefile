# The two set-up commands of the README. Each creates or reuses .venv and installs what it needs.
PY ?= python3
VENV := .venv
STAMP := $(VENV)/.fedmor-installed
DEPS := pyproject.toml Makefile
WARM := import sdk.cli, sdk.reward, sdk.alignment, sdk.router, sdk.ops, sdk.data, server_app._app, client_app._app, attacks, fedmor_local, trl, opacus, pytest, xdist, hypothesis, schemathesis, mkdocs.commands.build, material, mkdocstrings, importlinter, grimp

# Every process the recipes start writes the bytecode of what it imports (an environment that
# turns that off would compile the same modules again in each of the suite's processes).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test bench lint docs docs-serve

$(STAMP): $(DEPS)
	@test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	@$(VENV)/bin/python -m pip install -q --upgrade pip
	@# torch first and pinned: the CPU build that lies on this machine's disk.
	@$(VENV)/bin/python -m pip install -q --no-compile torch==2.13.0
	@# setuptools' default editable mode maps each top-level package to its folder here, so
	@# modules added to them later import too (the deprecated compat mode is not needed)
	@$(VENV)/bin/python -m pip install -q --no-compile -e '.[dev]'
	@# pip's bytecode pass (skipped above) compiles every module of torch, transformers and the
	@# rest, most of which nothing here imports: bytecode is written for what the apps, the CLI
	@# and the tests import, by importing it once.
	@$(VENV)/bin/python -c "$(WARM)"
	@touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/fedmor demo

# Four workers on two cores, whole files each: much of the suite waits on a local
# consortium's processes, which the extra workers fill, and beside other work on the machine
# more of the cores' time goes to the suite; a file's module fixtures (and the order its tests
# rely on) stay on one worker.
test: $(STAMP)
	$(VENV)/bin/python -m pytest -q -n 4 --dist loadfile

# Flower (the `bench` extra) would upgrade fastapi/uvicorn in .venv: it gets a venv of its own,
# which examples/benchmarks/secagg.py drives in a subprocess.
.venv-bench/.installed:
	@test -x .venv-bench/bin/python || $(PY) -m venv .venv-bench
	@.venv-bench/bin/python -m pip install -q flwr==1.42.0 numpy
	@touch $@

bench: $(STAMP) .venv-bench/.installed
	@# exit 5 = no slow test collected, which is fine here
	$(VENV)/bin/python -m pytest -q -m slow || test $$? -eq 5
	@# _*.py are the benchmarks' own modules, not benchmarks
	@for b in examples/benchmarks/[!_]*.py; do echo "== $$b --quick"; $(VENV)/bin/python $$b --quick || exit 1; done

# The benchmark scripts import their helpers by bare name (their own folder is on the path).
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	MYPYPATH=examples/benchmarks $(VENV)/bin/mypy examples/benchmarks

# The manual (mkdocs.yml): built strict into site/, or served with live reload on 127.0.0.1:8000.
docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict

docs-serve: $(STAMP)
	$(VENV)/bin/mkdocs serve
