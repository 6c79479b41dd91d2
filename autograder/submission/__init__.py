"""What a student hands in, taken in: folders, zips and notebooks read without following a link (intake),
notebooks turned into modules (notebooks), and what grading knows of the released template (released)."""
