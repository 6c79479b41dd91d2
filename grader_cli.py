#!/usr/bin/env python3
"""The kit's command line, kept here for the README and course materials: autograder/cli.py is the code."""
from autograder.cli import cli, main  # noqa: F401  (cli: what the tests and course materials import)

if __name__ == "__main__":
    main()
