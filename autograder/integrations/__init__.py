"""The platforms the kit grades for: Gradescope (gradescope: the autograder zip) and nbgrader (nbgrader_sync:
scores into a course's gradebook)."""
