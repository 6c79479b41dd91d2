"""Grading: one submission (engine: intake, then the hidden graders of parts/<name>/ run by pytest with
the plugin, which records each check), the checks the graders share (checks), the known wrong variants a
failure is matched against (diagnose), the speedup measurement (timing, and bench for the command line), and a
whole class (batch: grade-all)."""
