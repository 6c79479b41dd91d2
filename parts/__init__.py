"""The parts of the assignment, one folder each (autograder.PARTS lists them in teaching order; autograder/
registry.py reads them; docs/contributing/parts.md says what a folder holds and how a part is added)."""
