"""A class: many gradings run as one (run: `grade-all`, the plan and the pool; gradebook: OUT/gradebook.csv and
where each submission's files go; fingerprints: what graded a row, so that a rerun grades only what changed;
outlock: one run into OUT at a time), a class split in shards for a cluster (shards: `--shard K/N`) and merged
back (merge: `merge`, `unfinished`), the class page from a run's reports (classpage: `class.html`, `class.csv`)
and submissions whose code is alike (similarity). Each grading is one call of autograder.grade.engine; nothing
here runs a grader."""
