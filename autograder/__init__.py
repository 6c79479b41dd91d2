"""The multi-head-attention exercise kit: graders and release tooling."""

__version__ = "1.1.0"  # the kit's release: `grader_cli.py --version` prints it, and every gradebook

# The parts of the assignment, in teaching order: the one list of them that the kit and its tests read. Each is a
# folder, parts/<name>/ (its solution, source notebook, hidden graders, points, ...; autograder/registry.py reads
# it), and a module of the student contract, <name>.py. docs/contributing/parts.md says how a part is added.
PARTS = ("attention", "heads", "masks", "mha", "positional", "kvcache")
# The optional parts: handed out only where a course file lists them (each says `optional = true` in its
# part.toml; tests/test_parts.py holds the two the same).
OPTIONAL = ("kvcache",)
# The parts handed out with no course file, in teaching order: the modules a submission is graded on by default.
MODULES = tuple(part for part in PARTS if part not in OPTIONAL)

# How student code can be confined, strongest first (autograder/sandbox/student_process.py applies them,
# autograder.sandbox.isolation chooses), and what each means in a report.
LEVELS = ("namespaces", "landlock", "none")
LEVEL_HELP = {
    "namespaces": "own PID, mount and network namespaces; sees only system folders and its copy",
    "landlock": "Landlock: reads only system and Python folders and its copy; no TCP",
    "none": ("WARNING: resource limits and a seccomp filter only: student code could read and write what the "
             "grading user can"),
}

# How to get the strongest level where it is refused (autograder.sandbox.isolation.REMEDY, and every report's
# note when student code ran below it)
NAMESPACES_REMEDY = ("allow user namespaces (on Ubuntu 23.10 and later: sudo sysctl -w "
                     "kernel.apparmor_restrict_unprivileged_userns=0), or run the grader as root; in Docker, root "
                     "needs --cap-add SYS_ADMIN --security-opt seccomp=unconfined (or --privileged)")
