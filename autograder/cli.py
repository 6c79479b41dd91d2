"""Command line of the multi-head-attention exercise kit (`grader_cli.py`, `python -m autograder`).

A thin layer over the `autograder` library: every command calls a library
function that the kit's tests call directly.
"""
from __future__ import annotations

import sys
import time
from contextlib import ExitStack
from pathlib import Path

import click

EXIT_OK, EXIT_BELOW_MIN, EXIT_CANNOT_RUN = 0, 1, 2
from autograder import LEVELS, MODULES  # noqa: E402  (the package's __init__ imports nothing)
from autograder.scoring import NOTEBOOK_RANGE, count_word  # noqa: E402  (stdlib only)
from autograder.paths import TORCH_VERSION  # noqa: E402  (stdlib only)
from autograder.sandbox.forkserver import undumpable  # noqa: E402  (stdlib only)
from autograder.report.formats import FORMATS as _FORMATS, render as render_report  # noqa: E402  (stdlib only)
FORMATS = list(_FORMATS)  # autograder/report/formats.py: the one registry of formats
FORMAT_HELP = ("text: a readable report; json: all data for other tools; gradescope: results.json per "
               "Gradescope's autograder specification; markdown, html: feedback for the student (html with "
               "heatmaps of their attention weights); junit: JUnit XML for CI test reports; classroom: the "
               "base64 result that GitHub Classroom's grading reporter reads.")


class ShardSpec(click.ParamType):
    """K/N: shard K of N, K counting from 0 (autograder.classrun.shards.parse)."""

    name = "K/N"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        from autograder.classrun.shards import parse

        try:
            return parse(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class Size(click.ParamType):
    """A size such as 4GiB, 512MiB, 1MiB or a number of bytes."""

    name = "size"
    UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30}

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        text = str(value).strip().lower().replace(" ", "")
        number = text.rstrip("abcdefghijklmnopqrstuvwxyz")
        try:
            return int(float(number) * self.UNITS[text[len(number):]])
        except (ValueError, KeyError):
            self.fail(f"{value!r} is not a size such as 4GiB, 512MiB or 1048576", param, ctx)


def sandbox_options(command):
    """The limits of the student process and its isolation, shared by `grade` and `grade-all`."""
    options = [
        click.option("--memory-limit", type=Size(), default="2GiB", show_default=True,
                     help="Memory that student code gets above what Python and torch hold (either build, GPU or "
                          "not): its private memory and its address space, each bounded at what the student "
                          "process holds once torch has loaded plus this; a memory bomb fails there. At least "
                          "64MiB."),
        click.option("--cpu-limit", type=click.FloatRange(1), default=60, show_default=True,
                     help="CPU seconds of the student process over a whole grading."),
        click.option("--max-processes", type=click.IntRange(1), default=64, show_default=True,
                     help="Processes and threads the student code may have; a fork bomb stops there."),
        click.option("--max-output", type=Size(), default="1MiB", show_default=True,
                     help="What the student code may print or write to files."),
        click.option("--isolation", type=click.Choice(["auto", *LEVELS]), default="auto", show_default=True,
                     help="How student code is confined. namespaces: own PID, mount and network namespaces, a "
                          "private filesystem view; landlock: Linux Landlock, reads only system and Python "
                          "folders and its copy, no TCP; none: resource limits only. auto: the strongest that "
                          "works here (probed once per run)."),
        click.option("--require-isolation", type=click.Choice(LEVELS), default=None,
                     help="Refuse to grade below this level: exit 2 with the cause and the remedy."),
        click.option("--no-isolation", is_flag=True, help="Same as --isolation none."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _sandbox(memory_limit, cpu_limit, max_processes, max_output, isolation, require_isolation, no_isolation,
             max_unzipped):
    from autograder.sandbox.limits import Limits

    return {"limits": Limits(cpu_seconds=cpu_limit, memory_bytes=memory_limit, processes=max_processes,
                             output_bytes=max_output),
            "isolation": "none" if no_isolation else isolation, "require_isolation": require_isolation,
            "max_unzipped": max_unzipped}


def intake_options(command):
    """How much of a submission is taken in, shared by `grade` and `grade-all`."""
    return click.option(
        "--max-unzipped", type=Size(), default="50MiB", show_default=True,
        help="The most a submission may unpack to (a zip, as its directory declares it, checked before a byte "
             "is unpacked) or hold (a folder). The reason: a zip bomb of a few KB can unpack to many GB and fill "
             "the disk or the memory of the grading machine; "
             f"{count_word(len(MODULES))} modules and their notebooks take well under "
             "1MiB. Raise it for notebooks with large embedded outputs.")(command)


def _read_course(ctx, param, value):
    """--course FILE, read and checked before anything else runs (autograder.course.load): a file that cannot be
    used is a usage error (exit 2) that names the key."""
    if value is None:
        return None
    from autograder.course import CourseError, load

    try:
        return load(value)
    except CourseError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def course_option(what, dest="course"):
    """--course FILE, the same on every command that takes it; `what`: what the course file does there; `dest`:
    the name of the command's parameter (nbgrader-sync's COURSE is the nbgrader course folder)."""
    return click.option(
        "--course", dest, type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
        callback=_read_course, metavar="FILE",
        help=f"A course file (TOML: docs/instructor/course.md): the parts handed out and their worths, the speed "
             f"thresholds, the time limits, whether CUDA checks count. {what} Without it, the kit as it is: "
             f"{count_word(len(MODULES))} parts, out of 100.")


def _course_limits(ctx, course, call_timeout, submission_timeout):
    """The call and submission time limits: the command line's where given, else the course file's, else the
    defaults."""
    if course is None:
        return call_timeout, submission_timeout
    from click.core import ParameterSource

    given = (lambda name: ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, None))
    limits = course.time_limits
    return (call_timeout if given("call_timeout") else limits.get("call_seconds", call_timeout),
            submission_timeout if given("submission_timeout") else limits.get("submission_seconds",
                                                                               submission_timeout))


CALL_TIMEOUT_HELP = "Seconds allowed for one call into the student's code (a hang costs that check only)."
SUBMISSION_TIMEOUT_HELP = "Seconds allowed for the whole grading of one submission; past it, the grading has no score."


def timeout_options(submission_default, alias):
    """--call-timeout and --submission-timeout, shared by `grade` and `grade-all` (defaults differ), and the
    hidden, deprecated --timeout, an alias of the option named `alias` on that command."""
    def decorate(command):
        for option in reversed([
            click.option("--call-timeout", type=click.FloatRange(0, min_open=True), default=10.0,
                         show_default=True, help=CALL_TIMEOUT_HELP),
            click.option("--submission-timeout", type=click.FloatRange(0, min_open=True),
                         default=submission_default, show_default=True, help=SUBMISSION_TIMEOUT_HELP),
            click.option("--timeout", type=float, default=None, hidden=True, help=f"Deprecated: {alias}."),
        ]):
            command = option(command)
        return command
    return decorate


def _timeout_alias(value, meaning, option):
    """The old --timeout, kept as a deprecated alias of `option`; None when not given."""
    if value is not None:
        click.echo(f"warning: --timeout is deprecated: it meant {meaning} here; use {option}", err=True)
    return value


def _write(report, text, output):
    """The report to OUTPUT (its folder made) or to stdout."""
    if output:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text + "\n", encoding="utf-8")
        click.echo(f"{report.summary_line()}; report written to {output}", err=True)
    else:
        click.echo(text)


def _print_version(ctx, param, value):
    if not value or ctx.resilient_parsing:
        return
    from autograder.classrun.fingerprints import versions

    v = versions()
    click.echo(f"mha-kit {v['kit']}\ntorch {v['torch']}\npython {v['python']}\n"
               f"graders sha256 {v['graders_sha256']}")
    ctx.exit()


def _parts_said(command):
    """The help of `command` with the parts said from the kit's list (autograder.MODULES): {five} (their count),
    {modules} (their names), {notebooks} (their notebooks, first ... last)."""
    command.__doc__ = (command.__doc__.replace("{five}", count_word(len(MODULES)))
                       .replace("{modules}", ", ".join(MODULES)).replace("{notebooks}", NOTEBOOK_RANGE))
    return command


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Print the kit's version, torch's, Python's and the checksum of the graders (the code that "
                   "decides a grade), then exit.")
@_parts_said
def cli():
    """Auto-graded exercises on multi-head attention in PyTorch.

    Students implement {five} modules ({modules}); the hidden graders run their code in a separate process and
    score it out of 100.

    \b
    Typical use:
      python grader_cli.py grade examples/buggy-student
      python grader_cli.py grade submission.zip --format gradescope --output results.json
      python grader_cli.py release --check
      python grader_cli.py render report.json --format junit -o junit.xml
      python grader_cli.py grade-all submissions/ --output graded/
      python grader_cli.py check my-submission/
      python grader_cli.py gradescope-zip --output autograder.zip
      python grader_cli.py bench my-submission/ --plot bench.png
    """


@cli.command(short_help="Grade one submission (folder, zip or notebook).")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True, help=FORMAT_HELP)
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the report to this file instead of stdout.")
@click.option("--min-score", type=click.FloatRange(0, 100), default=None,
              help="Exit with status 1 when the score (out of 100) is below this.")
@timeout_options(submission_default=600.0, alias="--call-timeout")
@intake_options
@sandbox_options
@course_option("The report names it, with its checksum.")
@click.pass_context
@_parts_said
def grade(ctx, path, fmt, output, min_score, call_timeout, submission_timeout, timeout, course, **sandbox):
    """Grade one submission: a folder of the {five} modules (as .py files or as
    the notebooks {notebooks}), a zip of one,
    or a single notebook such as 03_masks.ipynb (or a name that ends with
    it: bea_03_masks.ipynb, "03_masks (1).ipynb"; docs/instructor/uploads.md
    gives the rule).

    Student code runs in a separate process and never in the grader's; a
    missing module, a crash or a hang costs only the checks that need it.
    Every figure is out of 100 (docs/instructor/grading.md, "Points"). A
    submission with no student work in it (every module missing, or the
    untouched template) is reported as "empty": 0, with what was looked for.

    \b
    Exit status:
      0  grading completed (whatever the score, "empty" included)
      1  the score is below --min-score
      2  the grader could not run: a bad path, an unreadable zip, or student
         code that cannot be run here (isolation refused, a student process
         that cannot start); the cause and the remedy are printed. With
         --format other than text a report is still written: "empty" (0,
         and why) for a submission that cannot be read, "error" (no score,
         never 0) when the grader failed.
    """
    from autograder.submission.take import SubmissionError, submission_id
    from autograder.grade.engine import grade as grade_submission
    from autograder.report.model import GradeReport, safe_line, safe_text
    from autograder.sandbox.errors import GraderUnavailable

    call_timeout = _timeout_alias(timeout, "seconds per call", "--call-timeout") or call_timeout
    call_timeout, submission_timeout = _course_limits(ctx, course, call_timeout, submission_timeout)
    extra = {"course": course} if course is not None else {}
    shape = {"course": course.report()} if course is not None else {}  # the reports written without a grading
    try:
        report = grade_submission(path, call_timeout=call_timeout, timeout=submission_timeout, **_sandbox(**sandbox),
                                  **extra)
    except SubmissionError as exc:  # its text may name the submission's files: escaped, as in every report
        click.echo(f"error: {safe_text(exc, '  ')}", err=True)
        if fmt != "text":  # CI formats still get a file: nothing to grade, and why
            empty = GradeReport(submission=submission_id(path), status="empty",
                                error=f"no student work found: {exc}", **shape)
            _write(empty, render_report(empty, fmt), output)
        sys.exit(EXIT_CANNOT_RUN)
    except GraderUnavailable as exc:
        click.echo(f"error: the grader cannot run student code here: {safe_text(exc, '  ')}", err=True)
        if fmt != "text":  # CI formats still get a file, that says error
            failed = GradeReport(submission=submission_id(path), status="error", error=str(exc), grader_failure=True,
                                 **shape)
            _write(failed, render_report(failed, fmt), output)
        sys.exit(EXIT_CANNOT_RUN)
    _write(report, render_report(report, fmt), output)
    if fmt != "text" and report.isolation_note():
        click.echo(report.isolation_note(), err=True)
    if report.status != "graded":
        click.echo(f"warning: {report.status}: {safe_line(report.error.splitlines()[0]) if report.error else ''}",
                   err=True)
    if min_score is not None and report.score < min_score:
        click.echo(f"score {report.score:g} is below --min-score {min_score:g}", err=True)
        sys.exit(EXIT_BELOW_MIN)


@cli.command(short_help="Render a saved JSON report in another format.")
@click.argument("report_json", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True,
              help=FORMAT_HELP)
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the report to this file instead of stdout.")
def render(report_json, fmt, output):
    """Render a saved report (from `grade --format json`) in another format, without grading again.

    One grading, several formats that agree: a CI job's points, its summary
    and its JUnit file come from the same run, even where a timing check
    could come out differently a second time. Exit status 2 when REPORT_JSON
    is not such a report.
    """
    import json

    from autograder.report.model import GradeReport, safe_line

    try:
        report = GradeReport.from_dict(json.loads(report_json.read_text(encoding="utf-8")))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        click.echo(f"error: {report_json} is not a report written by `grade --format json`: {safe_line(exc)}",
                   err=True)
        sys.exit(EXIT_CANNOT_RUN)
    _write(report, render_report(report, fmt), output)


@cli.command(short_help="Run the students' public self-check.")
@click.argument("path", type=click.Path(path_type=Path))
def check(path):
    """Run the students' public self-check on a submission.

    The same checks students run with `python selfcheck.py` in their
    template (the worked examples, shapes, the causal mask); no hidden
    grader. The student's code runs in a separate process. Exit status: 0
    when every check passes, 1 when one fails, 2 when PATH cannot be read.
    """
    import subprocess

    from autograder.submission.take import SubmissionError, prepared
    from autograder.release import SELF_CHECK
    from autograder.report.model import safe_text

    try:
        with prepared(path) as folder:
            folder = folder.resolve()
            proc = subprocess.run([sys.executable, str(SELF_CHECK), str(folder)], cwd=folder)
    except SubmissionError as exc:
        click.echo(f"error: {safe_text(exc, '  ')}", err=True)
        sys.exit(EXIT_CANNOT_RUN)
    sys.exit(1 if proc.returncode else 0)


@cli.command("grade-all", short_help="Grade a class in parallel, resumable.")
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--output", "-o", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for OUT/<id>/results.json, feedback.md, feedback.html and OUT/gradebook.csv "
                   "(an id named gradebook.csv, or ending in ~, gets OUT/<id>~/).")
@click.option("--jobs", "-j", type=click.IntRange(1), default=None, help="Parallel gradings [default: core count].")
@click.option("--force", is_flag=True, help="Grade again what OUT/gradebook.csv already holds.")
@click.option("--shard", type=ShardSpec(), default=None, metavar="K/N",
              help="Grade only shard K of N of the class, K counting from 0 (0 <= K < N, as Slurm's "
                   "SLURM_ARRAY_TASK_ID and Kubernetes' JOB_COMPLETION_INDEX count): the submissions whose id's "
                   "SHA-256 modulo N is K, the same list on every run. Give each shard its own OUT (it records "
                   "what it was given and what graded it in OUT/shard.json), run the N shards anywhere, in any "
                   "order, again after a failure (resumed as without --shard), then `merge` their OUTs.")
@timeout_options(submission_default=300.0, alias="--submission-timeout")
@intake_options
@sandbox_options
@course_option("Every report and the class page name it, with its checksum; a row graded under another course "
               "file (or none) is graded again.")
@click.pass_context
def grade_all(ctx, folder, output, jobs, force, shard, call_timeout, submission_timeout, timeout, course, **sandbox):
    """Grade every submission in FOLDER (a class).

    Each entry of FOLDER is one submission: a folder of .py modules, a folder
    of notebooks, a zip, or a single notebook; the entry's name is its id.
    One that crashes, hangs or fills memory gets a row with its status and
    never stops the others. The gradebook is rewritten atomically after each
    submission; a second run skips what is already graded (resume), unless
    --force. Row statuses: graded; empty (no student work found: every
    module missing, the untouched template, or a zip that cannot be read: 0,
    with what was looked for in the error column); timeout and error (the
    grading did not complete: no score, graded again by the next run).

    The gradebook and every report are made under your umask (0644 with
    the usual 022): they hold students' names and grades, so on a shared
    file system that only the course's group should read, run it under
    umask 027 (files 0640, folders 0750).

    On a cluster (Slurm, Kubernetes, a CI matrix), run N jobs, job K with
    --shard K/N and an OUT of its own, then `merge` the N OUTs into one
    gradebook (templates/ holds ready-made jobs).

    \b
    Exit status: 0 when the run completed; 2 when the isolation cannot be
    had (--require-isolation; or, as a normal user, auto finds only the none
    level, at which student code would share your uid: nothing is graded,
    and the message says how to get a stronger level; an explicit
    --isolation none grades, with a warning) or the grader could not run
    the student code of some submissions (their rows: "error", no score; a
    second run grades them again), or OUT holds another shard's results, or
    another grade-all is grading into OUT (it holds OUT/.grade-all.lock:
    the second run is refused at once, naming the first, and grades
    nothing; the lock goes when that process ends, however it ends), or
    a file system of OUT ran out of room (space, inodes, quota): the rows it
    could not write are left to a second run, which picks up where this one
    stopped; 130 after Ctrl-C.
    """
    from autograder.classrun import outlock
    from autograder.sandbox.errors import GraderUnavailable
    from autograder.sandbox.isolation import choose_isolation

    timeout = _timeout_alias(timeout, "seconds per submission", "--submission-timeout") or submission_timeout
    call_timeout, timeout = _course_limits(ctx, course, call_timeout, timeout)
    options = _sandbox(**sandbox)
    options["call_timeout"] = call_timeout
    if course is not None:
        options["course"] = course
    try:  # once for the whole class, before anything is graded
        options["isolation"] = choose_isolation(options["isolation"], options.pop("require_isolation"),
                                                class_run=True)
    except GraderUnavailable as exc:
        click.echo(f"error: the grader cannot run student code here: {exc}", err=True)
        sys.exit(EXIT_CANNOT_RUN)
    with ExitStack() as stack:  # one run into OUT at a time, from before its plan to its end
        try:
            stack.enter_context(outlock.output_lock(output))
        except outlock.Busy as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(EXIT_CANNOT_RUN)
        _grade_all(folder, output, jobs, force, shard, timeout, options)


def _grade_all(folder, output, jobs, force, shard, timeout, options):
    """grade-all, once OUT is locked (released when this returns or exits, and by the kernel when the process
    ends however it ends)."""
    from autograder.classrun import gradebook, run, shards
    from autograder.report.model import GradeReport, safe_line

    try:
        if shard:  # the shard's submissions alone, its manifest (OUT/shard.json) written before any grading
            planned = shards.prepare(folder, output, *shard, force=force, timeout=timeout, **options)
        else:
            shards.check_whole_run(output)
            planned = run.plan(folder, output, force=force, timeout=timeout, **options)  # hashed once, used twice
    except shards.ShardError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_CANNOT_RUN)
    entries, todo, changed = planned.entries, len(planned.todo), planned.changed
    since = f" ({changed} changed since the last run)" if changed else ""
    of_class = f" (shard {shard[0]}/{shard[1]} of the class)" if shard else ""
    click.echo(f"{len(entries)} submissions{of_class}, {len(entries) - todo} already graded, {todo} to grade{since}",
               err=True)
    start = time.monotonic()

    def stopping(running):
        click.echo(f"\nStopping: no new grading starts; waiting for the {running} running to finish and be saved "
                   "(Ctrl-C again to stop them now, unsaved)", err=True)

    try:
        with click.progressbar(length=todo, label="grading", show_pos=True, show_eta=True, file=sys.stderr,
                               item_show_func=lambda row: safe_line(row.id) if row else "") as bar:
            rows = run.grade_all(folder, output, jobs=jobs, force=force, timeout=timeout,
                                 progress=lambda row, saved: bar.update(saved - bar.pos, row),
                                 on_interrupt=stopping,
                                 planned=planned, **options)
    except run.Interrupted as stop:
        killed = f"; {stop.killed} grading(s) stopped halfway were not recorded" if stop.killed else ""
        click.echo(f"Interrupted: {len(stop.rows)} rows saved in {output / gradebook.GRADEBOOK}, {stop.left} "
                   f"submission(s) not graded{killed}. Run the same command again to grade the rest.", err=True)
        sys.exit(130)
    except run.OutputFull as full:  # never a success: one line, what ran out, and that a rerun resumes
        click.echo(f"error: {len(full.unwritten)} submission(s) graded but not written: out of {full.why}. Free "
                   "some and run the same command again: it picks up where it stopped.", err=True)
        sys.exit(EXIT_CANNOT_RUN)
    click.echo(GradeReport(submission="", isolation=options["isolation"]).isolation_line(), err=True)
    note = GradeReport(submission="", isolation=options["isolation"]).isolation_note()
    if note:  # once per run, not once per student
        click.echo(note, err=True)
    elapsed = time.monotonic() - start
    for line in gradebook.status_lines(rows):
        click.echo(line, err=True)
    rate = f", {60 * todo / elapsed:.1f} per minute" if todo and elapsed > 0 else ""
    of_shard = f"; shard {shard[0]}/{shard[1]}" if shard else ""
    click.echo(f"{len(rows)} rows in {output / gradebook.GRADEBOOK} ({elapsed:.0f} s{rate}{of_shard})")
    _class_page(output)
    failures = gradebook.grader_failures(rows)
    if failures:
        click.echo(f"{len(failures)} submission(s) could not be graded because the grader could not run student "
                   "code (status error, no score); run the same command again once the cause is fixed", err=True)
        sys.exit(EXIT_CANNOT_RUN)


@cli.command(short_help="Merge the outputs of grade-all --shard into one gradebook.")
@click.argument("shard_outputs", nargs=-1, required=True, metavar="OUT1 OUT2 ...",
                type=click.Path(file_okay=False, path_type=Path))  # one not there: a shard never started (exit 1)
@click.option("--output", "-o", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the merged gradebook.csv and every submission's folder, laid out as the OUT of one "
                   "grade-all run of the whole class (a folder of its own: no shard's OUT; new, empty or an earlier "
                   "merge's, which is replaced whole).")
@course_option("The shards must have been graded under it (refused, exit 2, where one was not).")
def merge(shard_outputs, output, course):
    """Merge the OUT folders of the N shards of one class into OUTPUT.

    Give every shard's OUT (grade-all --shard K/N, K = 0 ... N-1). OUTPUT
    gets one gradebook.csv, with the columns and the row order of grade-all,
    and a copy of each submission's folder (results.json, feedback), as one
    grade-all run of the whole class would have written them; the summary is
    grade-all's.

    Nothing is guessed: the merge refuses shards graded with a different kit
    version, graders or reference, torch, Python or settings (timeouts,
    limits, --max-unzipped), or of a different N, saying what differs and in
    which shard (each shard records them in its OUT/shard.json); and it
    lists, by id, what keeps the gradebook from being whole: shards not given
    or given twice, submissions with no row (a shard killed or still running:
    run it again, it resumes), outputs with nothing in them yet (a shard
    never started: a folder not there counts so), rows graded before the kit
    or the settings changed, rows a shard was not assigned, ids in two
    shards. Either way it writes nothing, and an earlier merge in OUTPUT is
    moved to OUTPUT.stale-<date>-<time> (it says so), so that no gradebook
    there passes for this run's. The merge is built in a fresh folder beside
    OUTPUT and swapped in whole; an OUTPUT that exists must be empty or an
    earlier merge's.

    \b
    Exit status: 0 when OUTPUT holds the merged class; 1 when shards or rows
    are missing, unfinished or overlap (the ids listed); 2 when the shards
    cannot be merged (graded differently, or not shards' outputs), or
    OUTPUT is a shard's folder or a folder that holds something but no
    earlier merge.
    """
    from autograder.classrun import gradebook, shards
    from autograder.classrun import merge as merging

    try:
        merged = merging.merge(shard_outputs, output, course)
    except shards.Incomplete as exc:
        click.echo("error: the shards do not make a whole class; nothing written:", err=True)
        for problem in exc.problems:
            click.echo(f"  - {problem}", err=True)
        _said_aside(exc, output)
        sys.exit(1)
    except shards.ShardError as exc:
        click.echo(f"error: {exc}; nothing written", err=True)
        _said_aside(exc, output)
        sys.exit(EXIT_CANNOT_RUN)
    levels = sorted({r.isolation for r in merged.rows.values() if r.isolation})
    if levels:
        click.echo(f"Isolation: {', '.join(levels)}", err=True)
    for line in gradebook.status_lines(merged.rows):
        click.echo(line, err=True)
    click.echo(f"{len(merged.rows)} rows in {output / gradebook.GRADEBOOK} (merged from {merged.shards} shards)")
    _class_page(output)
    failures = gradebook.grader_failures(merged.rows)
    if failures:
        click.echo(f"{len(failures)} submission(s) could not be graded because the grader could not run student "
                   "code (status error, no score); run their shards again once the cause is fixed, then merge",
                   err=True)


def _class_page(output) -> bool:
    """Write OUT/class.html and OUT/class.csv from OUT's reports (autograder.classrun.classpage) and say where; a
    page that cannot be written is a warning, never a failed run (the gradebook and the reports are written)."""
    from autograder.classrun import classpage
    from autograder.report.model import safe_line

    try:
        page, table = classpage.write(output)
    except Exception as exc:
        click.echo(f"warning: the class page could not be written: {type(exc).__name__}: {safe_line(exc)}", err=True)
        return False
    click.echo(f"Class page: {page} (every figure with its ids: {table.name})")
    return True


@cli.command(short_help="Write the class page of a grade-all or merge output.")
@click.argument("out", type=click.Path(exists=True, file_okay=False, path_type=Path))
def summary(out):
    """Write OUT/class.html and OUT/class.csv for the output OUT of grade-all
    (a whole class or one shard) or of merge, from its gradebook and reports
    alone: grade-all and merge write them at their end; this makes them again
    (after a grade-all that was interrupted, or for an output written before
    the kit made them).

    \b
    The page, readable on a phone: histograms of the totals and of each
    module's figure; for every check, how many submissions passed it, passed
    it with a note, failed it or were not graded on it; the likely bugs the
    graders recognised, ranked by how many students got each, with their ids;
    the submissions that were not graded (empty, timeout, error) and why;
    what graded them. class.csv holds every figure with the ids it counts.

    \b
    Exit status: 0 when both were written; 2 when OUT holds no gradebook.csv
    or they cannot be written there.
    """
    from autograder.classrun import gradebook

    if not (out / gradebook.GRADEBOOK).is_file():
        click.echo(f"error: {out} holds no {gradebook.GRADEBOOK}: give the output folder of grade-all or merge",
                   err=True)
        sys.exit(EXIT_CANNOT_RUN)
    if not _class_page(out):
        sys.exit(EXIT_CANNOT_RUN)


@cli.command(short_help="Pairs of submissions whose code is unusually alike.")
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--output", "-o", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for similarity.html (the pairs ranked, their shared code side by side) and similarity.csv.")
@click.option("--template", "templates", multiple=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Code given to every student, left out of every comparison (repeatable) [default: the kit's "
                   "student_template/, its .py stubs and its released notebooks].")
@click.option("--boilerplate", "more", multiple=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="More code given to every student (a lecture's, a tutorial's), left out as the template is "
                   "(repeatable; added to --template's).")
@click.option("--max-share", type=click.IntRange(2), default=10, show_default=True,
              help="Code found in more submissions than this is common code (what many write alike), not evidence "
                   "about two of them; MOSS's -m.")
@click.option("--top", type=click.IntRange(1), default=50, show_default=True, help="Pairs listed, at most.")
@click.option("--min-similarity", type=click.FloatRange(0, 100), default=10, show_default=True,
              help="List a pair when the mean of its two similarities (percent) is at least this.")
@intake_options
@course_option("The modules of its parts are compared (an optional part's too; give --template the folder of "
               "that course's template, release --course).")
def similarity(folder, output, templates, more, max_share, top, min_similarity, max_unzipped, course):
    """Rank the pairs of submissions in FOLDER (a class, as grade-all reads
    it) whose code is unusually alike, and show their shared code side by
    side: OUTPUT/similarity.html and OUTPUT/similarity.csv.

    Similarity is evidence for a person to judge, not a verdict: students
    may write alike because they followed the same lecture or tutorial, or
    because one copied the other.

    Each submission is read as grading reads it (never following a link; a
    notebook becomes its module), and each module is compared with the same
    module of every other submission by copydetect's fingerprints
    (winnowing, as MOSS does; names and comments do not count, so renamed
    copies are found). The code given to every student (the template and
    its notebooks) and code that more than --max-share submissions share are
    left out.

    \b
    Exit status: 0 when the outputs were written (whatever they found); 2
    when FOLDER cannot be read.
    """
    from autograder.classrun import similarity as sim
    from autograder.report.model import safe_line

    from autograder.classrun.gradebook import discover

    with click.progressbar(length=len(discover(folder)), label="reading", file=sys.stderr) as bar:
        try:
            result = sim.compare(folder, boilerplate=list(templates or (sim.TEMPLATE,)) + list(more),
                                 max_share=max_share, top=top, min_similarity=min_similarity / 100,
                                 max_unzipped=max_unzipped, progress=lambda done, total: bar.update(1),
                                 parts=tuple(course.parts) if course is not None else MODULES)
        except OSError as exc:
            click.echo(f"error: {folder} cannot be read: {safe_line(exc)}", err=True)
            sys.exit(EXIT_CANNOT_RUN)
    page, table = sim.write(result, output)
    click.echo(sim.EVIDENCE, err=True)
    if result.left_out:
        click.echo(f"not compared ({len(result.left_out)}): " + ", ".join(safe_line(i) for i in result.left_out),
                   err=True)
    if result.mostly_common:
        click.echo(f"note: {len(result.mostly_common)} submission(s) are mostly code that more than {max_share} "
                   "submissions share (left out as common code: a solution that went round would not show); "
                   f"--max-share {max(len(result.compared), max_share + 1)} shows every group: "
                   + ", ".join(safe_line(i) for i, _ in result.mostly_common[:20])
                   + (" ..." if len(result.mostly_common) > 20 else ""), err=True)
    for rank, p in enumerate(result.pairs[:10], 1):
        click.echo(f"{rank:>3}. {safe_line(p.a)} and {safe_line(p.b)}: {100 * p.similarity_a:.0f}% / "
                   f"{100 * p.similarity_b:.0f}% ({', '.join(s.module for s in p.shared)})")
    listed = f"{len(result.pairs)} pair{'s' if len(result.pairs) != 1 else ''}"
    click.echo(f"{len(result.compared)} submissions compared, {listed} listed in {page} and {table.name}")


def _said_aside(refusal, output):
    """The line a refused merge adds where it moved an earlier merge out of OUTPUT (autograder.classrun.merge.set_aside)."""
    moved = getattr(refusal, "set_aside", None)
    if moved is not None:
        click.echo(f"The earlier merge that was in {output} is now in {moved}: it is not this run's, so no "
                   f"{output / 'gradebook.csv'} is left to pass for it.", err=True)


@cli.command(short_help="List the shards of a class run that have not finished.")
@click.argument("shards_folder", type=click.Path(file_okay=False, path_type=Path))
@click.argument("n", type=click.IntRange(1))
def unfinished(shards_folder, n):
    """Print K, one a line, for every shard K of N whose OUT, SHARDS_FOLDER/K
    (the templates' layout: RESULTS/shards/K), has not finished: nothing
    there yet (never started, or stopped before its manifest), submissions
    assigned with no row or with a row of an earlier run (stopped, or still
    running), or rows the grader could not grade. Nothing printed: every
    shard finished, merge them. The Slurm template's `submit.sh --resume`
    runs only these again.

    \b
    Exit status: 0; 2 when SHARDS_FOLDER/K holds a shard of another K or N,
    or something that is no shard's output.
    """
    from autograder.classrun import shards
    from autograder.classrun import merge as merging

    try:
        left = merging.unfinished(shards_folder, n)
    except shards.ShardError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_CANNOT_RUN)
    for k in left:
        click.echo(k)


@cli.command(short_help="Write student_template/, solutions/, notebooks from parts/.")
@click.option("--check", is_flag=True, help="Change nothing; exit 1 naming the files that are out of date.")
@course_option("Writes the student template of that course into --output, its nbgrader source notebooks into "
               "--nbgrader-source: the parts it hands out alone, with its points (the kit's own files stay as they "
               "are).")
@click.option("--output", "-o", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="With --course: the folder of that course's student template.")
@click.option("--nbgrader-source", "nbgrader_source", type=click.Path(file_okay=False, path_type=Path), default=None,
              metavar="DIR", help="Write an nbgrader course's source folder (source/mha) into DIR: the source "
                                  "notebooks of the parts handed out (with --course, that course's, with its points; "
                                  "else the five of assignments/mha/), and nothing else.")
def release(check, course, output, nbgrader_source):
    """Write student_template/ from the parts' folders, parts/<module>/.

    \b
    1. The module cell of each part's source notebook (notebook.ipynb) is
       copied from its solution.py (the one place the code lives), and its
       task cell states the graders' points; assignments/mha/ gets copies
       of those handed out by default (for nbgrader), solutions/ of the
       solutions.
    2. The kit's generated files follow: the self-check's points, the
       tables of README.md and docs/ that the release writes (points,
       parts, tutorials), autograder/submission/released.py.
    3. student_template/: the .py stubs rendered from the solutions (each
       `### BEGIN SOLUTION` ... `### END SOLUTION` region becomes
       `raise NotImplementedError()`, as nbgrader does; docstrings stay),
       and the student notebooks that the real `nbgrader
       generate_assignment` makes.

    --check walks the same steps and changes nothing.

    With --course FILE --output DIR, only step 3, for that course: DIR gets
    the stubs, notebooks, README and self-check of the parts the course file
    hands out, with its points (docs/instructor/course.md).

    With --nbgrader-source DIR (and --course FILE or not), DIR gets the
    source notebooks of the parts handed out, with their points: the
    source folder of an nbgrader course (docs/instructor/notebooks.md).
    """
    from autograder import release as rel

    if output is not None and course is None:
        raise click.UsageError("--output is the folder of a course file's template: give --course FILE too")
    if course is not None and output is None and nbgrader_source is None:
        raise click.UsageError("--course writes a course's files into folders of their own: give --output DIR "
                               "(its student template), --nbgrader-source DIR (its nbgrader source notebooks), "
                               "or both")
    if output is not None or nbgrader_source is not None:
        chosen = ([rel.course_step(course, output)] if output is not None else []) + (
            [rel.nbgrader_source_step(course, nbgrader_source)] if nbgrader_source is not None else [])
        if check:
            stale = [step.shown_as + n for step in chosen for n in step.stale()]
            if stale:
                click.echo("out of date: " + ", ".join(stale), err=True)
                sys.exit(1)
            click.echo(" and ".join(str(step.folder) for step in chosen) + " up to date")
            return
        changed = [step.shown_as + n for step in chosen for n in step.write()]
        click.echo(f"wrote {', '.join(changed)}" if changed else
                   " and ".join(str(step.folder) for step in chosen) + " already up to date")
        return

    problems = rel.check_cell_problems()  # a check cell edited in its notebook, or a part's checks and cells apart
    for _, line in problems:
        click.echo(line, err=True)
    if any(refused for refused, _ in problems):
        sys.exit(1)  # the release cannot write those parts' check cells: the lines above say why
    if check:
        stale = rel.check()
        if stale:
            click.echo("out of date: " + ", ".join(stale), err=True)
            click.echo("run: python grader_cli.py release", err=True)
            sys.exit(1)
        click.echo("parts/, solutions/, assignments/ and student_template/ are up to date")
        return
    changed = rel.write()
    click.echo(f"wrote {', '.join(changed)}" if changed else
               "parts/, solutions/, assignments/ and student_template/ already up to date")


@cli.command(short_help="Time MHA implementations side by side.")
@click.argument("submission", required=False, type=click.Path(exists=True, path_type=Path))
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path), default=Path("bench.png"),
              show_default=True, help="Where to save the plot (PNG).")
@click.option("--tokens", default="32,128", show_default=True, help="Sequence lengths, comma-separated.")
@click.option("--heads", default="1,4,16,64", show_default=True, help="Head counts (dividing --d-model).")
@click.option("--d-model", default=128, show_default=True)
@click.option("--batch", default=4, show_default=True)
@click.option("--threads", default=1, show_default=True, help="torch threads (the graders time on 1).")
def bench(submission, device, plot_path, tokens, heads, d_model, batch, threads):
    """Time MHA implementations side by side: table and plot.

    The reference stacked and fused modules, a fused module on
    F.scaled_dot_product_attention and nn.MultiheadAttention, across head
    counts and sequence lengths; with SUBMISSION, also the student's stacked
    and fused modules (run in the sandbox, timed by the grader's clock).
    """
    from autograder.grade import bench as b

    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            click.echo("error: --device cuda, but CUDA is not available here", err=True)
            sys.exit(EXIT_CANNOT_RUN)
    token_list = [int(t) for t in tokens.split(",")]
    head_list = [int(h) for h in heads.split(",")]
    if any(d_model % h for h in head_list):
        raise click.BadParameter(f"every head count must divide --d-model {d_model}", param_hint="--heads")
    from contextlib import ExitStack

    total = len(token_list) * len(head_list)
    with ExitStack() as stack:
        student = None
        if submission is not None:
            from autograder.submission.take import prepared
            from autograder.sandbox.client import Sandbox

            student = stack.enter_context(Sandbox(stack.enter_context(prepared(submission)), call_timeout=120))
        with click.progressbar(length=total, label="timing", file=sys.stderr) as bar:
            rows = b.run(tokens=token_list, heads=head_list, d_model=d_model, batch=batch, device=device,
                         student=student, threads=threads, progress=lambda row: bar.update(1))
    click.echo(f"\nms per forward pass, d_model {d_model}, batch {batch}, {device}, {threads} thread(s), "
               "best of 3 interleaved rounds")
    click.echo(b.table(rows))
    b.plot(rows, plot_path)
    click.echo(f"plot written to {plot_path}")


@cli.command("gradescope-zip", short_help="Write the Gradescope autograder zip.")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=Path("gradescope-autograder.zip"),
              show_default=True, help="Where to write the zip.")
@click.option("--torch-version", default=TORCH_VERSION, show_default=True,
              help="The torch that setup.sh installs (TORCH_VERSION at build time still wins).")
@click.option("--torch-index-url", default=None, metavar="URL",
              help="The pip index torch comes from [default: PyTorch's CPU-only index, "
                   "https://download.pytorch.org/whl/cpu; with --torch-cuda: pip's default index] "
                   "(TORCH_INDEX_URL at build time still wins).")
@click.option("--torch-cuda", is_flag=True,
              help="Install torch with CUDA (pip's default build, several GB), for a Gradescope image with a GPU "
                   "(TORCH_CUDA=1 at build time does the same).")
@course_option("Embedded in the zip (course.toml): every submission is graded under it.")
def gradescope_zip(output, torch_version, torch_index_url, torch_cuda, course):
    """Write the autograder zip to upload to a Gradescope programming assignment.

    \b
    At the zip's root: setup.sh (Gradescope runs it once, as root, to build
    the image: a venv at /autograder/venv with torch, the CPU build unless
    --torch-cuda, and requirements.txt) and run_autograder (run per
    submission: grades /autograder/submission and writes
    /autograder/results/results.json; when the autograder itself cannot run,
    the results say "Autograder failure, not a grade" and it exits non-zero),
    with grader_cli.py, requirements.txt, autograder/ and the reference
    solutions/ (instructor-side: students never see them).
    """
    from autograder.integrations.gradescope import CPU_INDEX_URL, build_zip

    index = torch_index_url if torch_index_url is not None else ("" if torch_cuda else CPU_INDEX_URL)
    names = build_zip(output, torch_version=torch_version, torch_index_url=index, cuda=torch_cuda, course=course)
    click.echo(f"wrote {output} ({len(names)} files: {', '.join(n for n in names if '/' not in n)}, "
               f"autograder/, solutions/)")


@cli.command("nbgrader-sync", short_help="Write the hidden graders' scores into nbgrader.")
@click.argument("course", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--assignment", default="mha", show_default=True, help="The nbgrader assignment name.")
@click.option("--student", "students", multiple=True, help="Only these students (repeatable); default: all.")
@click.option("--overwrite-manual", is_flag=True,
              help="Replace the scores a TA set by hand in formgrader too (by default they are kept, and named).")
@click.option("--isolation", type=click.Choice(["auto", *LEVELS]), default="auto", show_default=True,
              help="How student code is confined (as grade-all). As a normal user, auto refuses to come down to "
                   "none (student code would share your uid): exit 2 with the remedy; --isolation none grades "
                   "at that level knowingly.")
@course_option("Give the one the notebooks were released with (release --course): its parts are the cells "
               "written.", dest="course_file")
def nbgrader_sync(course, assignment, students, overwrite_manual, isolation, course_file):
    """Write the hidden graders' scores into an nbgrader course's gradebook.

    Run it after `nbgrader autograde ASSIGNMENT` in the course folder COURSE.
    Each submission is graded by the kit (student code in its own process,
    never in a kernel shared with the graders), and each module's figure
    (the same as in every other format) goes into the notebook's task cell
    `<module>-hidden-graders` as its manual score, with the failed checks as
    the comment. `nbgrader export` then lists the scores. A score a TA set
    by hand is kept unless --overwrite-manual; the output says which.

    \b
    Exit status: 0 when every submission was written; 2 when the course,
    its gradebook or ASSIGNMENT is unknown (the assignments it knows are
    named), a grading did not complete (nothing written for it), or student
    code cannot be confined here (as a normal user, auto refuses the none
    level: see --isolation).
    """
    from autograder.integrations.nbgrader_sync import SyncError, sync_course
    from autograder.report.model import safe_line, safe_text
    from autograder.scoring import fmt

    from autograder.sandbox.errors import GraderUnavailable
    from autograder.sandbox.isolation import choose_isolation

    try:  # once for the whole course, before anything is graded
        level = choose_isolation(isolation, class_run=True)
    except GraderUnavailable as exc:
        click.echo(f"error: the grader cannot run student code here: {exc}", err=True)
        sys.exit(EXIT_CANNOT_RUN)
    try:
        extra = {"course": course_file} if course_file is not None else {}
        results = sync_course(course, assignment, list(students) or None, overwrite_manual=overwrite_manual,
                              isolation=level, **extra)
    except SyncError as exc:
        click.echo(f"error: {safe_text(exc, '  ')}", err=True)
        sys.exit(EXIT_CANNOT_RUN)
    incomplete = [r for r in results if r.score is None]
    for r in results:
        if r.score is None:
            click.echo(f"{safe_line(r.student)}: not written: the grading did not complete ({r.status}: "
                       f"{safe_line((r.error.splitlines() or [''])[0])})", err=True)
            continue
        modules = ", ".join(f"{m} {fmt(s)}" for m, s in r.modules.items())
        empty = " (empty: nothing to grade)" if r.status == "empty" else ""
        click.echo(f"{safe_line(r.student)}: {fmt(r.score)}/{fmt(r.out_of)}{empty} ({modules})")
        if r.kept:
            kept = ", ".join(f"{m} {fmt(s)}" for m, s in r.kept.items())
            click.echo(f"  kept the score(s) set by hand: {kept} (the gradebook's total: {fmt(r.gradebook_total)}); "
                       "--overwrite-manual replaces them", err=True)
    click.echo(f"{len(results) - len(incomplete)} submission(s) written to {course / 'gradebook.db'}")
    if incomplete:
        sys.exit(EXIT_CANNOT_RUN)


def main(**kwargs):
    """The command line as a process runs it (grader_cli.py, python -m autograder, mha-grader): first made
    non-dumpable, so that no process of its uid (student code at the landlock and none levels) may ptrace it or
    read its /proc files (memory, environment, descriptors); then `cli`. (Click's test runner calls `cli` itself,
    in the test's own process.)"""
    undumpable()
    cli(**kwargs)


if __name__ == "__main__":
    main()
