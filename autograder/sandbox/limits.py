"""What a student process is given: its resource limits (Limits), what it may write (WRITABLE), what it never
sees (INSTRUCTOR_ONLY, forbidden_paths), and the environments of the kit's processes as allow-lists (STUDENT_ENV,
GRADER_ENV; student_env, grader_env)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from autograder.paths import KIT as ROOT

#: What student code may write. At the namespaces level its /tmp (and home) is a tmpfs of `tmp_bytes` and its
#: copy of the submission a tmpfs of `copy_bytes` (at least twice the copy's size), each with at most `files`
#: files and folders (namespaces.py). At the other levels its copy and its home are folders on the disk,
#: held to the same totals by a guard (diskguard.py).
WRITABLE = {"tmp_bytes": 256 << 20, "copy_bytes": 64 << 20, "files": 4096}
#: What the student process never sees, even where it cannot be hidden by namespaces it is never copied.
INSTRUCTOR_ONLY = ("autograder", "parts", "solutions", "assignments", "tests", "examples", "benchmarks", ".git")


@dataclass(frozen=True)
class Limits:
    """Resource limits of each student process (None: no limit). Hitting one ends only student code."""

    cpu_seconds: float | None = 60  # CPU time of the whole process (all checks of one grading)
    # above what Python and torch hold (rlimits.py): a memory bomb fails. 2 GiB is hundreds of times what the
    # exercises need; every GiB a bomb may fill costs the grading machine about 1.2 s of kernel time as its pages are
    # written (4 GiB took 5.7 s), so the allowance is kept to what honest code could use.
    memory_bytes: int | None = 2 << 30
    processes: int | None = 64  # processes and threads: a fork bomb stops here
    output_bytes: int | None = 1 << 20  # what student code may print or write to files

    def to_dict(self) -> dict:
        """The limits as they cross a process boundary (JSON: the grading's spec, autograder/grade/spec.py, and
        the student's config)."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, values: dict) -> "Limits":
        """Back from `to_dict` (a name the dataclass does not have is an error, not ignored)."""
        return cls(**values)

    def describe(self, which):
        value = getattr(self, which)
        if which in ("memory_bytes", "output_bytes"):
            for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
                if value >= size:
                    return f"{value / size:g} {unit}"
            return f"{value} bytes"
        return f"{value:g} s" if which == "cpu_seconds" else str(value)


# The environments of the kit's processes, as allow-lists: no token or CI secret of the grading machine
# reaches a process that does not need it, and none reaches student code.
#: what a student process keeps of the grader's environment (its HOME and TMPDIR are its own)
STUDENT_ENV = ("PATH", "LANG", "LC_ALL", "SYSTEMROOT", "CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH")
#: what the trusted grader processes keep (the hidden graders, run by pytest): also the venv, the kit's test
#: switches (MHA_REFUSE) and the batch's folder of measurements (MHA_BATCH_DIR)
GRADER_ENV = (*STUDENT_ENV, "HOME", "TMPDIR", "VIRTUAL_ENV", "MHA_REFUSE", "MHA_BATCH_DIR")


#: One thread per library, in every process of a grading: the graders' and students' tensors are small, and
#: torch's default (a thread per core, spinning between operators) made two gradings side by side 4x slower each.
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

#: The grader server forks a process per grading, which may run the CUDA checks. Should anything in the server
#: ask torch whether CUDA is there (the graders' `needs_cuda` asks only when a check runs, in the fork), asked
#: the default way, through the CUDA runtime, the question would initialise CUDA in the server and none of its
#: forks could use it; asked through NVML it does not (torch.cuda.is_available's documentation: it "will NOT
#: poison fork"; seen on an H200: a fork after the NVML question ran CUDA, after the default one it could not).
FORK_SAFE_CUDA = {"PYTORCH_NVML_BASED_CUDA_CHECK": "1"}


#: CUDA's compiled-kernel cache lives in ~/.nv, which for a student process is a temporary folder of a bounded
#: size that goes with the grading: a cache that no later process reads, paid for from the student's space.
NO_CUDA_CACHE = {"CUDA_CACHE_DISABLE": "1"}


def student_env(home) -> dict[str, str]:
    """The environment of a student process: STUDENT_ENV, its own HOME, one thread per library, no CUDA cache."""
    env = {k: os.environ[k] for k in STUDENT_ENV if k in os.environ}
    env.update(**ONE_THREAD, **NO_CUDA_CACHE, HOME=str(home), TMPDIR=str(home), PYTHONDONTWRITEBYTECODE="1",
               PYTHONHASHSEED="0")
    return env


def grader_env() -> dict[str, str]:
    """The environment of the grading processes: GRADER_ENV, imports that start at the kit's root, a CUDA check
    that leaves forks able to use CUDA (FORK_SAFE_CUDA), and no pytest plugin but the ones the engine names
    (`-p autograder.grade.plugin`): whatever else is installed beside the kit (xdist, anyio, ...) would be
    imported by every grading and take part in it."""
    env = {k: os.environ[k] for k in GRADER_ENV if k in os.environ}
    return {**env, **ONE_THREAD, **FORK_SAFE_CUDA, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1",
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def forbidden_paths(*extra):
    """What a student process never sees: the kit's instructor files, and `extra` (its own original)."""
    return [str(ROOT / name) for name in INSTRUCTOR_ONLY] + [str(Path(p).resolve()) for p in extra]
