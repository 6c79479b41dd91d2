"""Where the kit's parts live, and the torch it is tested with: each stated once.

The kit runs from its checkout (`pip install -e .` keeps it there): the graders read the reference solution
and the released template beside the package, so every root below is found from this file.
"""
from pathlib import Path

KIT = Path(__file__).resolve().parent.parent  # the checkout: autograder/, parts/, solutions/, student_template/, ...
PACKAGE = KIT / "autograder"
PARTS_DIR = KIT / "parts"  # a folder per part of the assignment (solution, notebook, hidden graders): instructor-only
GRADERS = PACKAGE / "graders"  # the graders' library and pytest.ini; each part's graders are in its folder
SOLUTIONS = KIT / "solutions"  # the reference implementation, copied from parts/ by the release: instructor-only
STUDENT_TEMPLATE = KIT / "student_template"  # what students get, written by the release step
ASSIGNMENTS = KIT / "assignments"  # the nbgrader source notebooks, copied from parts/ by the release
README = KIT / "README.md"  # the front door; the rest of the documentation is in DOCS
DOCS = KIT / "docs"  # the documentation by reader (mkdocs.yml builds it)

# The torch the kit is tested with. The Makefile reads this line (TORCH ?= torch==...), and so do the Gradescope
# set-up and the CLI's defaults; tests/test_layout.py checks that the Classroom templates say the same.
TORCH_VERSION = "2.13.0"
TORCH = f"torch=={TORCH_VERSION}"
