# The kit's two everyday commands: `make demo` and `make test` (README.md; the rest of the documentation: docs/).
# Both create .venv if missing and install the pinned dependencies first.

PYTHON ?= python3
VENV   ?= .venv
# the torch the kit is tested with, stated once in autograder/paths.py
TORCH  ?= torch==$(shell sed -n 's/^TORCH_VERSION = "\([^"]*\)".*/\1/p' autograder/paths.py)
PY     := $(VENV)/bin/python
# the Pythons the kit supports, stated once in pyproject.toml: requires-python = ">=3.10,<3.14"
PYTHONS := $(shell sed -n 's/^requires-python = ">=\([0-9.]*\),<\([0-9.]*\)".*/\1 \2/p' pyproject.toml)

# Which build of torch `make setup` installs: cpu, cuda, or auto (the default): cuda where the machine has an
# NVIDIA GPU (/dev/nvidia0, or `nvidia-smi -L` answers), cpu everywhere else. With the CUDA build (the kit's torch,
# Linux x86_64) the set-up downloads about 3 GB and the venv is 5.1 GB; with the CPU build, 0.2 GB of torch and 1.4 GB.
# A build asked for on the command line (or in the environment) is kept in the venv, $(VENV)/.torch-build, and stays
# the choice of every later make (`make setup TORCH_BUILD=cuda`, then `make test`) until another is asked for;
# TORCH_BUILD=auto chooses for the machine again.
ASKED_BUILD := $(if $(filter undefined,$(origin TORCH_BUILD)),,$(TORCH_BUILD))
KEPT_BUILD  := $(if $(ASKED_BUILD),,$(filter cpu cuda,$(shell cat $(VENV)/.torch-build 2>/dev/null)))
TORCH_BUILD ?= $(or $(KEPT_BUILD),auto)
GPU_HERE := $(if $(filter auto,$(TORCH_BUILD)),$(shell { test -e /dev/nvidia0 || nvidia-smi -L; } >/dev/null 2>&1 && echo gpu))
BUILD := $(if $(filter auto,$(TORCH_BUILD)),$(if $(GPU_HERE),cuda,cpu),$(TORCH_BUILD))
# why that build, as the set-up's last line says it
BUILD_WHY := $(if $(KEPT_BUILD),TORCH_BUILD=$(KEPT_BUILD) was asked for by an earlier make setup (kept in $(VENV)/.torch-build; TORCH_BUILD=auto chooses again),$(if $(filter auto,$(TORCH_BUILD)),$(if $(GPU_HERE),this machine has an NVIDIA GPU,this machine has no NVIDIA GPU) (TORCH_BUILD=auto; TORCH_BUILD=$(if $(GPU_HERE),cpu,cuda) for the other),TORCH_BUILD=$(TORCH_BUILD) was asked for))
ifeq ($(filter cpu cuda,$(BUILD)),)
  $(error TORCH_BUILD=$(TORCH_BUILD): cpu, cuda or auto)
endif
# Where torch comes from. The CPU build: from pip's configured sources first, offline (a local wheel store in
# pip's find-links, where it holds the +cpu wheel), else from PyTorch's CPU index, which is probed once (5 s)
# so that a machine that cannot reach it does not wait on pip's retries; unreachable, torch comes from pip's own
# sources (PyPI: on Linux x86_64 its build has CUDA), with a note. The CUDA build: from pip's own sources.
# TORCH_INDEX=URL names another index for either (a mirror of the CPU index, or one of PyTorch's CUDA indexes);
# TORCH_INDEX= (empty) leaves torch to pip's own sources. (The Gradescope set-up defaults to the same CPU index.)
CPU_INDEX   := https://download.pytorch.org/whl/cpu
TORCH_INDEX ?= $(if $(filter cpu,$(BUILD)),$(CPU_INDEX))

STAMP  := $(VENV)/.installed-$(subst =,-,$(TORCH))-$(BUILD)
LOG    := $(VENV)/setup.log
# where torch came from, written by the step that installed it and read by the set-up's last line
SOURCE := $(VENV)/.torch-source
# The venv's own pip, upgraded to this release first: Debian 12's python3 -m venv gives pip 23.0.1, which cannot
# resolve for another Python (--python-version: tests/test_setup.py skipped its five lock checks for it)
PIP_VERSION ?= 26.2.1

# The kit's own tests run in parallel, one pytest-xdist worker per core (at most 4): gradings wait on
# student processes much of the time. TESTFLAGS= runs them in one process.
TESTFLAGS ?= -n auto --maxprocesses=4 --dist worksteal

.PHONY: setup demo test test-fast release check-template bench docs lock clean help

help:
	@echo "make demo    set up, then grade the reference solution and the example submissions, one by one and as a class"
	@echo "make test    set up, then run the kit's whole test suite"
	@echo "make test-fast  the tests that start no grading, no student process and no browser (about a minute on two cores)"
	@echo "make release regenerate student_template/ and the generated tables of README.md and docs/"
	@echo "make bench   time the grading of one complete submission (median of 5)"
	@echo "make docs    build the documentation (docs/, mkdocs.yml) into site/; a broken link or anchor fails"
	@echo "make lock    re-pin requirements.lock for every supported Python (after changing requirements.txt)"
	@echo "make setup TORCH_BUILD=cpu|cuda   another build of torch than the one chosen for this machine, kept for later makes"

# The kit's own modules compiled once, as pip compiles an installed package: its grading processes never write
# bytecode (autograder/sandbox/limits.py), so without it each one compiles them again (~7 % of a cold grade's CPU
# where PYTHONDONTWRITEBYTECODE is set). Up to date, this takes ~0.1 s; a tree it cannot write only goes without.
setup: $(STAMP)
	@$(PY) -m compileall -q autograder parts grader_cli.py >/dev/null 2>&1 || :

# pip, with its whole output in $(LOG); when it fails, the end of what it said (its own error; not its progress notes,
# INFO, nor a local index's gaps) and where the rest is
PIP_FAILED = { status=$$?; echo "make setup: pip failed (exit status $$status); the end of what it said (all of it: $(LOG)):" >&2; \
  grep -v -e "^INFO: " -e "^WARNING: Location '.*' is ignored: it is neither a file nor a directory" $(LOG) | tail -n 30 >&2; \
  exit $$status; }
pip = $(PY) -m pip --disable-pip-version-check $(1) >>$(LOG) 2>&1 || $(PIP_FAILED)

# The CPU build from pip's configured sources, offline: find-links (a local wheel store) holding the +cpu wheel
TORCH_FROM_STORE = $(PY) -m pip --disable-pip-version-check install --no-deps --no-index "$(TORCH)+cpu" >>$(LOG) 2>&1 \
  && echo "pip's configured sources (find-links), offline" > $(SOURCE)
# torch from TORCH_INDEX, once a request to it (5 s at most) shows that it can be reached; else a note, and pip's own sources
TORCH_FROM_INDEX = if $(PY) -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)' "$(TORCH_INDEX)/torch/" 2>/dev/null; then \
    echo "$(TORCH_INDEX)" > $(SOURCE); $(call pip,install --no-deps "$(TORCH)" --index-url "$(TORCH_INDEX)"); \
  else echo "make setup: note: $(TORCH_INDEX) cannot be reached from here$(NO_STORE_BUILD): torch comes from pip's own sources$(CUDA_SIZE)." \
    "Another source: make setup TORCH_INDEX=URL" >&2; echo "pip's own sources, $(TORCH_INDEX) not reached" > $(SOURCE); fi
NO_STORE_BUILD = $(if $(filter cpu,$(BUILD)), and pip's configured sources hold no CPU build of $(TORCH))
CUDA_SIZE = $(if $(filter cpu,$(BUILD)), (PyPI: on Linux x86_64 the build with CUDA; about 3 GB to download))

# The set-up's one statement of which torch it installed, from where and why, read from torch's version.py (without
# importing torch); where it is not the build chosen, why not and what to do.
define TORCH_SAYS
import importlib.util as u, os, runpy, sys
v = runpy.run_path(os.path.join(u.find_spec("torch").submodule_search_locations[0], "version.py"))
chosen, why, source, cuda = sys.argv[1], sys.argv[2], sys.argv[3].strip() or "pip's own sources", v.get("cuda")
got = f"the build with CUDA {cuda}" if cuda else "the CPU build"
said = f"make setup: installed torch {v['__version__']}, {got}, from {source}: "
if (chosen == "cuda") == bool(cuda):
    print(said + f"the {chosen.upper() if chosen == 'cpu' else 'CUDA'} build because {why}")
elif cuda:
    print(said + f"not the CPU build chosen ({why}): pip had no CPU build to hand; about 3 GB more on disk."
          " Another source: make setup TORCH_INDEX=URL")
else:
    print(said + f"not the CUDA build chosen ({why}): a wheel in pip's find-links (a local store: pip config list)"
          " wins over any index; PIP_CONFIG_FILE=/dev/null, without PIP_FIND_LINKS, leaves it out")
endef
export TORCH_SAYS

# The build of the torch installed in the venv, "cpu" or "cuda" (nothing where there is none), from its version.py
define TORCH_BUILT
import importlib.util as u, os, runpy
spec = u.find_spec("torch")
if spec:
    print("cuda" if runpy.run_path(os.path.join(spec.submodule_search_locations[0], "version.py")).get("cuda") else "cpu")
endef
export TORCH_BUILT

$(STAMP): requirements.txt requirements.lock pyproject.toml
	@test -x $(PY) || { \
	  $(PYTHON) -c 'import sys; lo, hi = (tuple(map(int, v.split("."))) for v in sys.argv[1:]); sys.exit(not lo <= sys.version_info[:2] < hi)' $(PYTHONS) \
	  || { echo "make setup: the kit supports Python >= $(word 1,$(PYTHONS)), < $(word 2,$(PYTHONS)) (pyproject.toml); $(PYTHON) is $$($(PYTHON) -V 2>&1). Another: make setup PYTHON=python3.12" >&2; exit 1; }; \
	  $(PYTHON) -m venv $(VENV); }
	@: > $(LOG)
	@# not done until it is done: a set-up stopped half-way (Ctrl-C, a failure) leaves no stamp, and is run again
	@rm -f $(VENV)/.installed-*
	@echo "make setup: pip $(PIP_VERSION), $(TORCH), then requirements.txt (every package pinned: requirements.lock); pip's output: $(LOG)"
	@$(call pip,install "pip==$(PIP_VERSION)")
	@# a venv that holds the other build of torch (read from its version.py, not from a stamp): that build goes first
	@# (pip would take it as satisfying $(TORCH))
	@old=$$($(PY) -c "$$TORCH_BUILT" 2>/dev/null); if [ -n "$$old" ] && [ "$$old" != $(BUILD) ]; then \
	  echo "make setup: replacing the $$old build of torch (TORCH_BUILD=$(BUILD))"; $(call pip,uninstall -y torch); fi
	@rm -f $(SOURCE)
	@# torch first, alone (--no-deps), from where its build is; its dependencies come with the rest, under the lock
	@$(if $(filter cpu,$(BUILD)),$(TORCH_FROM_STORE) ||) $(if $(TORCH_INDEX),{ $(TORCH_FROM_INDEX); },:)
	@$(call pip,install "$(TORCH)" -r requirements.txt -c requirements.lock)
	@# the kit itself, editable (it runs from this checkout): python -m autograder, mha-grader
	@$(call pip,install --no-deps --no-build-isolation -e .)
	@$(PY) -c "$$TORCH_SAYS" $(BUILD) "$(BUILD_WHY)" "$$(cat $(SOURCE) 2>/dev/null)"
	@rm -f $(VENV)/.installed-*
	@$(if $(ASKED_BUILD),$(if $(filter auto,$(ASKED_BUILD)),rm -f $(VENV)/.torch-build,echo $(ASKED_BUILD) > $(VENV)/.torch-build),:)
	@touch $@

# The demo ends with the class page of the same submissions, graded as a class (grade-all) in build/ (ignored by git)
DEMO_CLASS  := build/demo-class
DEMO_GRADED := build/demo-graded

demo: setup
	@for sub in solutions examples/*/; do \
		echo; echo "================ $$sub"; \
		$(PY) grader_cli.py grade $$sub || exit $$?; \
	done
	@rm -rf $(DEMO_CLASS) $(DEMO_GRADED) && mkdir -p $(DEMO_CLASS)
	@cp -R solutions $(DEMO_CLASS)/reference && rm -rf $(DEMO_CLASS)/reference/__pycache__
	@for sub in examples/*/; do sub=$${sub%/}; cp -R $$sub $(DEMO_CLASS)/$${sub##*/}; done
	@echo; echo "================ the class: $(DEMO_CLASS) (the reference and examples/*), graded together"
	@$(PY) grader_cli.py grade-all $(DEMO_CLASS) --output $(DEMO_GRADED)
	@echo; echo "Open $(DEMO_GRADED)/class.html in a browser: the class at a glance (docs/instructor/class-overview.md)"

# pytest keeps its rewritten test modules in tests/__pycache__ (ignored by git) even where PYTHONDONTWRITEBYTECODE is
# set: rewriting them again costs each worker ~6 s of its start
test: setup
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest $(TESTFLAGS)

# the unit tier: everything that starts no grading and no student process (tests/conftest.py: the tiers)
test-fast: setup
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest $(TESTFLAGS) -m "not grading"

release: setup
	$(PY) grader_cli.py release

check-template: setup
	$(PY) grader_cli.py release --check

bench: setup
	$(PY) benchmarks/grading_time.py

# The documentation by reader (docs/, its nav in mkdocs.yml) built into site/, strict: a link to a missing page or
# heading fails (tests/test_docs.py builds it too). `$(VENV)/bin/mkdocs serve` serves it while you edit.
# NO_MKDOCS_2_WARNING: the theme's notice about MkDocs 2.0, printed at every build otherwise.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

# After changing requirements.txt (or TORCH_VERSION): re-pin requirements.lock for every supported Python at once
# (its header says how, and why uv). uv comes from PyPI into a scratch venv that goes when the lock is written (it is
# not a dependency of the kit), or UV=path/to/uv. tests/test_setup.py checks the result with pip, for each Python.
UV_VERSION ?= 0.13.9
UV ?=
define LOCK_HEADER
# Every package the kit's set-up installs besides torch (torch's own dependencies included: the Makefile pins torch,
# autograder/paths.py's TORCH_VERSION), at the exact version, for every Python the kit supports (pyproject.toml's
# requires-python: 3.10 to 3.13) and every platform: one release per package for all of them (--fork-strategy
# fewest); a marker only where a package is needed on some Pythons or platforms alone. Never a pin that differs by
# Python: pip, asked to check this lock for another Python (--python-version), reads markers off the Python it runs
# on, so such a pin failed there (numpy 2.4.6 for 3.10, soupsieve 4.1.3 for 3.11.2).
# make setup passes this file to pip as constraints (-c), so that every set-up is the same.
# Written by `uv pip compile --universal` (make lock): one resolution for all Pythons at once, without their
# interpreters, keeping each version already pinned here wherever it still fits; pip-tools resolves for the Python
# it runs on only (one run per Python, merged by hand). uv is the lock's tool, not a dependency of the kit.
# After changing requirements.txt: make lock
endef
export LOCK_HEADER

lock:
	@set -e; tmp="$$(mktemp -d)"; trap 'rm -rf "$$tmp"' EXIT; \
	uv="$(UV)"; if [ -z "$$uv" ]; then \
	  $(PYTHON) -m venv "$$tmp/venv"; \
	  "$$tmp/venv/bin/python" -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION); uv="$$tmp/venv/bin/uv"; \
	fi; \
	echo "$(TORCH)" > "$$tmp/torch.txt"; \
	cp requirements.lock "$$tmp/requirements.lock"; \
	echo "uv pip compile --universal --fork-strategy fewest --python-version $(word 1,$(PYTHONS)) requirements.txt (and $(TORCH), left out)"; \
	UV_PYTHON_DOWNLOADS=never "$$uv" pip compile --quiet --universal --fork-strategy fewest \
	  --python-version $(word 1,$(PYTHONS)) \
	  --no-emit-package torch --custom-compile-command "make lock" \
	  requirements.txt "$$tmp/torch.txt" -o "$$tmp/requirements.lock"; \
	{ echo "$$LOCK_HEADER"; cat "$$tmp/requirements.lock"; } > requirements.lock

clean:
	rm -rf $(VENV) .pytest_cache site
