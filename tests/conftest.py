"""Shared fixtures of the kit's own tests."""
from pathlib import Path

import pytest

from autograder.engine import grade

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"
TEMPLATE = ROOT / "student_template"
MODULES = ("attention", "heads", "masks", "mha", "positional")


@pytest.fixture(scope="session")
def reference_report():
    """The reference solution, graded once for the session."""
    return grade(SOLUTIONS)


@pytest.fixture(scope="session")
def template_report():
    """The untouched student template, graded once for the session."""
    return grade(TEMPLATE)
