"""Grading one submission, on the trusted side: the engine (intake, then the hidden graders of
parts/<name>/ run by pytest in the graders' process), the grading as the engine hands it over (spec), the
pytest plugin that records each check there (plugin), the warm servers that spare a class run's gradings their
imports (servers), and bench (the command line's timing of MHA implementations side by side, on the graders'
speed measurement). A whole class is autograder/classrun/.

diagnose (the shared machinery the parts' own diagnoses, parts/<name>/diagnose.py, are matched with) is the graders'
library and belongs beside them; it is here for now (tests/test_layout.py places it in the graders' layer: STRAYS)."""
