"""What one grading is, said once: the engine writes it, the graders' plugin reads it, in another process.

The engine (autograder/grade/engine.py) runs the hidden graders under pytest, in a fresh grader process or a
fork of the warm grader server; everything that grading needs to know crosses that boundary as one JSON
argument, `--spec`, read back into this object by the plugin (autograder/grade/plugin.py), which hands its
parts to the student sandbox. A new parameter of a grading is a field here, nothing more. The key that signs
the results never travels in it (an inherited pipe, `--key-fd`).
"""
from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field, fields

from autograder.sandbox.limits import Limits


@dataclass
class GradingSpec:
    """One grading, as the graders' process receives it.

    `submission`: the private folder of the submission's .py modules (autograder.submission.take.taken);
    `results_file`: where the signed results go; `call_timeout`: seconds for one call into student code;
    `limits`: the student process's limits; `isolation`: the level it runs at ("auto" or one of
    autograder.LEVELS); `student_python`: its interpreter; `zygote`: the channel of a warm student zygote
    (fd:N) or None (a cold student process); `batch_dir`: the class run this grading belongs to
    (autograder/sandbox/batchlock.py) or None; `missing`: {module: why its file was left out};
    `source`: the original submission's path (hidden from student code like its copy); `course`: what the
    course file says of the grading (autograder.course.Course.grading: the parts run, each part's factor on its
    checks' points, the speed thresholds, whether CUDA checks count), {} for the kit as it is.
    """

    submission: str
    results_file: str
    call_timeout: float = 10.0
    limits: Limits = field(default_factory=Limits)
    isolation: str = "auto"
    student_python: str = sys.executable
    zygote: str | None = None
    batch_dir: str | None = None
    missing: dict = field(default_factory=dict)
    source: str = ""
    course: dict = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "limits": self.limits.to_dict()})

    @classmethod
    def from_json(cls, text: str) -> "GradingSpec":
        data = json.loads(text)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:  # an engine and a plugin of two versions of the kit: say so, never guess
            raise ValueError(f"a grading spec with fields this kit does not know: {unknown}")
        return cls(**{**data, "limits": Limits.from_dict(data.get("limits") or {})})

    def intake(self) -> dict:
        """What the student sandbox is told of the intake (autograder.sandbox.client.Sandbox's `intake`)."""
        return {"missing": self.missing, "source": self.source}
