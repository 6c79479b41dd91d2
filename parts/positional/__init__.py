"""The part `positional`: its reference solution, source notebook and hidden graders (docs/contributing/parts.md).

A package so that pytest names its graders `parts.<name>.test_<name>`, the name the warm grader server
preloads them under (autograder/registry.py: grader_module)."""
