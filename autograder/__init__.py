"""The multi-head-attention exercise kit: graders and release tooling."""

__version__ = "1.1.0"  # the kit's release: `grader_cli.py --version` prints it, and every gradebook

# The five modules of the student contract, in its order: the one list the library uses.
MODULES = ("attention", "heads", "masks", "mha", "positional")

# How student code can be confined, strongest first (autograder/sandbox/student_process.py applies them,
# autograder.sandbox.isolation chooses), and what each means in a report.
LEVELS = ("namespaces", "landlock", "none")
LEVEL_HELP = {
    "namespaces": "own PID, mount and network namespaces; sees only system folders and its copy",
    "landlock": "Landlock: reads only system and Python folders and its copy; no TCP",
    "none": ("WARNING: resource limits and a seccomp filter only: student code could read and write what the "
             "grading user can"),
}
