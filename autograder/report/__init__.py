"""The report of a grading: its model (model), and what it is rendered as: markdown and html (html), the CI
platforms' formats (ci), and the one registry of formats that the command line and grade-all use (formats)."""
