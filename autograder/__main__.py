"""`python -m autograder`: the kit's command line (autograder/cli.py), as `grader_cli.py` runs it."""
from autograder.cli import main

main(prog_name="python -m autograder")
