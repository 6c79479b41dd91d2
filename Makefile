# The kit's two everyday commands: `make demo` and `make test`.
# Both create .venv if missing and install the pinned dependencies first.

PYTHON ?= python3
VENV   ?= .venv
TORCH  ?= torch==2.13.0
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(subst =,-,$(TORCH))

.PHONY: setup demo test release check-template bench clean help

help:
	@echo "make demo    set up, then grade the reference solution and the example submissions"
	@echo "make test    set up, then run the kit's whole test suite"
	@echo "make release regenerate student_template/ from solutions/"
	@echo "make bench   time the grading of one complete submission (median of 5)"

setup: $(STAMP)

$(STAMP): requirements.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check "$(TORCH)" -r requirements.txt
	@rm -f $(VENV)/.installed-*
	@touch $@

demo: setup
	@for sub in solutions examples/*/; do \
		echo; echo "================ $$sub"; \
		$(PY) grader_cli.py grade $$sub || exit $$?; \
	done

test: setup
	$(PY) -m pytest

release: setup
	$(PY) grader_cli.py release

check-template: setup
	$(PY) grader_cli.py release --check

bench: setup
	$(PY) benchmarks/grading_time.py

clean:
	rm -rf $(VENV) .pytest_cache
