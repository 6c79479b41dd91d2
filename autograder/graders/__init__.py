"""The hidden graders: one file per module of the student contract."""
