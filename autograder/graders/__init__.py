"""The hidden graders, one file per module of the student contract, and their library, all run in the graders'
process: checks (what the graders share: comparisons, points, notes), timing (the speedup measurement), common
(their inputs), blame (whether a failing module only inherits a fault of its parts)."""
