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

# How to get the strongest level where it is refused (autograder.sandbox.isolation.REMEDY, and every report's
# note when student code ran below it)
NAMESPACES_REMEDY = ("allow user namespaces (on Ubuntu 23.10 and later: sudo sysctl -w "
                     "kernel.apparmor_restrict_unprivileged_userns=0), or run the grader as root; in Docker, root "
                     "needs --cap-add SYS_ADMIN --security-opt seccomp=unconfined (or --privileged)")
