#!/usr/bin/env python3
"""The kit's command line, kept here for the README and course materials: autograder/cli.py is the code."""
from autograder.cli import cli

if __name__ == "__main__":
    cli()
