"""`python -m autograder`: the kit's command line (autograder/cli.py), as `grader_cli.py` runs it."""
from autograder.cli import cli

cli(prog_name="python -m autograder")
