"""A class: many gradings run as one (batch: `grade-all`, its gradebook and the fingerprints that let a rerun
skip what it graded before), a class split in shards for a cluster and merged back (shards: `--shard K/N`,
`merge`), the class page from a run's reports (classpage: `class.html`, `class.csv`) and submissions whose code
is alike (similarity). Each grading is one call of autograder.grade.engine; nothing here runs a grader."""
