"""What is the student's, in the student process (standard library only): the files of its copy, its modules,
imported on request, and what its code raises, reported with its own frames only (request_server.py).

Loaded by path by the student process before it confines itself.
"""
import importlib
import os
import traceback

#: the real path of the student's copy, whose files are the only ones that are the student's (set by
#: request_server.serve)
submission = None


class ImportFailed(Exception):
    """Importing a student module raised: reported as such, with the original exception."""

    def __init__(self, module, exc):
        super().__init__(module)
        self.module = module
        self.exc = exc


def student_module(name):
    try:
        return importlib.import_module(name)
    except BaseException as exc:  # SyntaxError, SystemExit, anything raised at import
        raise ImportFailed(name, exc) from None


def is_student_file(filename):
    return os.path.isabs(filename) and os.path.realpath(filename).startswith(submission + os.sep)


def student_traceback(exc):
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if is_student_file(f.filename)]
    lines = [f'  File "{os.path.basename(f.filename)}", line {f.lineno}, in {f.name}\n    {f.line or ""}'
             for f in frames[-5:]]
    return "\n".join(lines)


def error(exc):
    during_import = None
    if isinstance(exc, ImportFailed):
        during_import, exc = exc.module, exc.exc
    if isinstance(exc, SystemExit):
        message = f"sys.exit({exc.code!r})"
    elif isinstance(exc, SyntaxError):
        message = f"{exc.msg} ({os.path.basename(exc.filename or '?')}, line {exc.lineno})"
    else:
        message = str(exc)
    return {
        "type": type(exc).__name__,
        "mro": [c.__name__ for c in type(exc).__mro__],
        "message": message[:2000],
        "traceback": student_traceback(exc)[:4000],
        "during_import": during_import,
    }
