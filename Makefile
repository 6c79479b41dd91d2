# The kit's two everyday commands: `make demo` and `make test`.
# Both create .venv if missing and install the pinned dependencies first.

PYTHON ?= python3
VENV   ?= .venv
# the torch the kit is tested with, stated once in autograder/paths.py
TORCH  ?= torch==$(shell sed -n 's/^TORCH_VERSION = "\([^"]*\)".*/\1/p' autograder/paths.py)
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(subst =,-,$(TORCH))

# The kit's own tests run in parallel, one pytest-xdist worker per core (at most 4): gradings wait on
# student processes much of the time. TESTFLAGS= runs them in one process.
TESTFLAGS ?= -n auto --maxprocesses=4 --dist worksteal

.PHONY: setup demo test test-fast release check-template bench lock clean help

help:
	@echo "make demo    set up, then grade the reference solution and the example submissions"
	@echo "make test    set up, then run the kit's whole test suite"
	@echo "make test-fast  the tests that start no grading and no student process (under a minute)"
	@echo "make release regenerate student_template/ from solutions/"
	@echo "make bench   time the grading of one complete submission (median of 5)"
	@echo "make lock    pin every installed package in requirements.lock (after changing requirements.txt)"

setup: $(STAMP)

$(STAMP): requirements.txt requirements.lock pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check "$(TORCH)" -r requirements.txt -c requirements.lock
	@# the kit itself, editable (it runs from this checkout): python -m autograder, mha-grader
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	@rm -f $(VENV)/.installed-*
	@touch $@

demo: setup
	@for sub in solutions examples/*/; do \
		echo; echo "================ $$sub"; \
		$(PY) grader_cli.py grade $$sub || exit $$?; \
	done

test: setup
	$(PY) -m pytest $(TESTFLAGS)

# the unit tier: everything that starts no grading and no student process (tests/conftest.py: the tiers)
test-fast: setup
	$(PY) -m pytest $(TESTFLAGS) -m "not grading"

release: setup
	$(PY) grader_cli.py release

check-template: setup
	$(PY) grader_cli.py release --check

bench: setup
	$(PY) benchmarks/grading_time.py

# after changing requirements.txt: pin every package the set-up installs (torch aside: the Makefile pins it)
lock: setup
	@{ sed -n 1,3p requirements.lock; $(PY) -m pip freeze --exclude torch; } > requirements.lock.new
	@mv requirements.lock.new requirements.lock

clean:
	rm -rf $(VENV) .pytest_cache
