"""How running student code fails: the grader's failure (GraderUnavailable: never the student's 0) or the
student's (StudentError)."""


class GraderUnavailable(Exception):
    """The grader cannot run student code here (isolation refused, a student process that cannot start).

    Never the student's fault: `grade` exits 2 with this message, `grade-all` records an `error` row
    (no score), and no report turns it into a 0.
    """


class StudentError(Exception):
    """Student code failed: it raised, crashed, hung, or is missing.

    `kind` is one of "missing", "import" (importing the module raised),
    "raised", "crashed", "timeout", "bad-return", "gave-up". For "import" and
    "raised", `exc_type`, `mro`, `traceback` and `detail` (the exception's own
    message, as the student process sent it) describe the student's exception.
    """

    def __init__(self, message, kind, exc_type=None, mro=(), traceback="", detail=""):
        super().__init__(message)
        self.kind = kind
        self.exc_type = exc_type
        self.mro = tuple(mro)
        self.traceback = traceback
        self.detail = detail

    def raised(self, name):
        """True when the student's code raised `name` (or a subclass of it)."""
        return self.kind == "raised" and name in self.mro
