"""The class at a glance: OUT/class.html and OUT/class.csv, computed from a class run's reports on disk.

What an instructor needs to teach the next lecture, for a whole class: the distribution of the totals and of
each module's figure; for every check, how many submissions passed it, passed it with a note (a fault
inherited from another module, graded there), failed it, or were not graded on it; the diagnoses ("Likely
bug: ...", autograder.grade.diagnose) ranked by how many students got each, with their ids; the submissions
that were not graded (empty, timeout, error), with their ids and why; what graded them (the kit's version,
the checksum of its graders and reference, torch, Python, the isolation level).

Everything is read from OUT: gradebook.csv (gradebook.read_gradebook: ids, totals, module figures, statuses) and
each submission's results.json, which grade-all writes and merge copies. So the page of a merged cluster run
(autograder.classrun.shards) is the page of one grade-all run of the same class, and `grader_cli.py summary OUT`
makes it again for any output, an older one included. A report's checks are grouped by cause as every report
groups them (autograder.report.model.entries, cause): a cause counts once per student.

The reports are hostile input: ids are names that students chose, messages hold what their code raised. Each
results.json is read as intake reads a student's file (autograder.submission.intake.read_regular: never
through a link, never a FIFO, at most MAX_REPORT bytes), checked for the shape the kit writes (one that is not
is named under "reports that could not be read", never a crash), and every string is escaped as the feedback
pages escape it (autograder.report.html: control characters, then HTML) or as every CSV of the kit does
(autograder.report.model.csv_cell).
"""
from __future__ import annotations

import base64
import csv
import functools
import io
import json
import os
import stat
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

from autograder import PARTS
from autograder.files import SHARED, write_atomic
from autograder.classrun import gradebook, shards
from autograder.report.html import STYLE, code_spans, document, esc
from autograder.report.model import STATUSES, TestResult, cause, csv_cell, entries, not_started, safe_line
from autograder.scoring import NOT_HANDED_IN, fmt
from autograder.submission import intake

MAX_REPORT = 16 << 20  # bytes of one results.json read (the kit's are ~30 KB; a student's messages are cut long before)
MAX_CHECKS = 1000  # checks in one report (the kit has 63): more, and it is not a report of this kit
BINS = 10  # bars of each histogram, equal widths from 0 to the maximum
LIKELY = "Likely bug: "

#: a check's outcome for one submission, in the order the page and class.csv give them
PASSED, NOTED, FAILED, NOT_GRADED = OUTCOMES = ("passed", "passed with a note", "failed", "not graded")
#: class.csv's columns: one row per figure, its ids in one cell, one id a line
COLUMNS = ["section", "module", "item", "outcome", "count", "ids"]


@dataclass
class Check:
    module: str
    name: str
    outcome: dict = field(default_factory=dict)  # id -> one of OUTCOMES (filled for every id by `read_class`)

    def ids(self, outcome) -> list[str]:
        return [i for i, o in self.outcome.items() if o == outcome]


@dataclass
class Diagnosis:
    text: str  # the "Likely bug" line, without "Likely bug: "
    modules: list  # the modules whose failed checks named it
    ids: list  # the students whose reports named it, in the gradebook's order


@dataclass
class ClassSummary:
    rows: dict  # id -> gradebook.Row, in the gradebook's order
    checks: list  # Check, in the order the reports list them
    diagnoses: list  # Diagnosis, most students first
    not_started: dict  # module -> ids whose every check of it failed on NotImplementedError
    not_handed_in: dict  # module -> ids that did not hand it in
    graded_by: list  # (what graded, as a dict, or None where the report does not say) -> ids, most first
    unreadable: list  # (id, why) of rows whose results.json could not be read as the kit writes it
    module_max: dict  # module -> its maximum on the scale of 100, as the reports give it
    shard: tuple | None  # (K, N) where OUT is a shard's

    @property
    def ids(self) -> list[str]:
        return list(self.rows)

    def with_status(self, status) -> list[str]:
        return [i for i, r in self.rows.items() if r.status == status]

    @property
    def graded(self) -> list[str]:
        return self.with_status("graded")

    def figures(self, module=None) -> list[tuple[str, float]]:
        """(id, figure) of the graded submissions: their totals, or their figures for `module`."""
        return [(i, r.total if module is None else (r.modules.get(module) or 0.0))
                for i, r in self.rows.items() if r.status == "graded" and r.total is not None]

    @property
    def parts(self) -> tuple:
        """The parts the gradebook has a column for: the kit's five, or a course file's (gradebook.parts_of)."""
        return gradebook.parts_of(self.rows.values())

    def scale(self, module=None) -> float:
        """The maximum of the totals (100, or the total of the course file that graded them) or of `module`'s
        figure."""
        if module is None:
            totals = {made_by.get("course_total") for made_by, _ in self.graded_by if made_by}
            totals.discard(None)
            return float(totals.pop()) if len(totals) == 1 else 100.0
        return self.module_max.get(module) or max([f for _, f in self.figures(module)] + [1.0])

    def bins(self, module=None) -> list[tuple[str, list[str]]]:
        """(label, ids) for each of BINS equal bins from 0 to the maximum, the last one closed: [90, 100]."""
        top = Fraction(str(self.scale(module)))
        width = top / BINS
        found = [[] for _ in range(BINS)]
        for i, value in self.figures(module):
            found[max(0, min(BINS - 1, int(Fraction(str(value)) / width)))].append(i)
        edges = [fmt(float(width * k)) for k in range(BINS + 1)]
        return [(f"[{edges[k]}, {edges[k + 1]}{']' if k == BINS - 1 else ')'}", found[k]) for k in range(BINS)]


# -- reading -------------------------------------------------------------------------------------------------
class Unreadable(ValueError):
    """A results.json that cannot be read, or is not one the kit writes: the message says why."""


def _text(value, what) -> str:
    if not isinstance(value, str):
        raise Unreadable(f"{what} is not text")
    return value


def read_results(path: Path) -> tuple[list[TestResult], dict | None]:
    """The checks of one results.json (as the report model holds them: module, name, status, message) and what
    graded it (extra_data.graded_by, None where the report does not say). Unreadable when the file is a link, a
    FIFO, larger than MAX_REPORT, not JSON, or not shaped as the kit writes it."""
    try:
        data = json.loads(intake.read_regular(path, MAX_REPORT, "results.json"))
    except intake.Refused as exc:
        raise Unreadable(str(exc)) from None
    except ValueError as exc:
        raise Unreadable(f"results.json is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise Unreadable("results.json is not an object")
    tests = data.get("tests", [])
    if not isinstance(tests, list) or len(tests) > MAX_CHECKS:
        raise Unreadable(f"its tests are not a list of at most {MAX_CHECKS} checks")
    checks = []
    for number, t in enumerate(tests, 1):
        if not isinstance(t, dict):
            raise Unreadable(f"check {number} is not an object")
        tags = t.get("tags")
        if not (isinstance(tags, list) and tags and all(isinstance(tag, str) for tag in tags)):
            raise Unreadable(f"check {number} has no module among its tags")
        module, name = tags[0], _text(t.get("name"), f"the name of check {number}")
        output, status = _text(t.get("output", ""), f"the output of check {number}"), t.get("status")
        if status not in ("passed", "failed"):
            raise Unreadable(f"check {number} is neither passed nor failed")
        name = name[len(module) + 2:] if name.startswith(f"{module}: ") else name
        max_score = t.get("max_score")
        points = float(max_score) if isinstance(max_score, (int, float)) and not isinstance(max_score, bool) else 0.0
        # results.json as GradeReport.to_gradescope writes it: a check not graded here passes, worth 0, "Not
        # graded here: ..."; one that passed with a note, "Passed. <note>"; a failed one, its message
        if status == "failed":
            state, message = "failed", output
        elif output.startswith("Not graded here: ") and not points:
            state, message = "skipped", output
        elif output.startswith("Passed. "):
            state, message = "passed", output[len("Passed. "):]
        else:
            state, message = "passed", ""
        checks.append(TestResult(id=name, name=name, module=module, aspect=tags[1] if len(tags) > 1 else "",
                                 points=points, status=state, message=message))
    extra = data.get("extra_data")
    graded_by = extra.get("graded_by") if isinstance(extra, dict) else None
    if not (isinstance(graded_by, dict) and all(isinstance(k, str) and isinstance(v, str)
                                                for k, v in graded_by.items())):
        graded_by = None
    return checks, graded_by


def _report_folders(out: Path, rows: dict) -> dict:
    """row key -> the folder of OUT that holds that submission's files (gradebook.output_folder, inverted by
    gradebook.folder_id: an id whose characters the gradebook shows escaped is found too); links never followed."""
    found = {}
    with os.scandir(out) as listing:
        for entry in listing:
            if entry.name.startswith(".") or not entry.is_dir(follow_symlinks=False):
                continue
            key = gradebook.row_key(gradebook.folder_id(entry.name))
            if key in rows and key not in found:
                found[key] = Path(entry.path)
    return found


def read_class(out: Path) -> ClassSummary:
    """Everything the page shows, from OUT's gradebook and reports (see the module's docstring)."""
    out = Path(out)
    rows = gradebook.read_gradebook(out)
    rows = {rows[key].id: rows[key] for key in sorted(rows)}  # the gradebook's order
    folders = _report_folders(out, {gradebook.row_key(i): r for i, r in rows.items()})
    checks: dict[tuple, Check] = {}
    diagnoses: dict[str, Diagnosis] = {}
    not_started_, not_handed_in = {}, {}
    graded_by: dict[str, tuple] = {}
    unreadable = []
    module_max = {}
    for sub_id, row in rows.items():
        folder = folders.get(gradebook.row_key(sub_id))
        tests, made_by = [], None
        if folder is None:
            if row.status in ("graded", "empty"):
                unreadable.append((sub_id, "no folder of its files in this output"))
        else:
            try:
                tests, made_by = read_results(folder / "results.json")
            except Unreadable as exc:
                unreadable.append((sub_id, str(exc)))
        key = json.dumps(made_by, sort_keys=True)
        graded_by.setdefault(key, (made_by, []))[1].append(sub_id)
        for t in tests:
            checks.setdefault((t.module, t.name), Check(t.module, t.name))
        if row.status != "graded":
            continue  # its checks count as not graded: it has no score, or nothing to grade
        sums = {}
        for t in tests:
            sums[t.module] = sums.get(t.module, 0.0) + t.points
            checks[(t.module, t.name)].outcome[sub_id] = (
                FAILED if t.status == "failed" else NOT_GRADED if t.status == "skipped" else
                NOTED if t.message else PASSED)
        for module, total in sums.items():
            module_max[module] = max(module_max.get(module, 0.0), round(total, 2))
        skipped_modules = set()
        for module in dict.fromkeys(t.module for t in tests):
            ran = [t for t in tests if t.module == module and t.status != "skipped"]
            if ran and all(t.status == "failed" and t.message == NOT_HANDED_IN for t in ran):
                not_handed_in.setdefault(module, []).append(sub_id)
                skipped_modules.add(module)
        for module in not_started(tests):
            not_started_.setdefault(module, []).append(sub_id)
        failed = [t for t in tests if t.status == "failed" and t.module not in skipped_modules]
        mine: dict[str, list] = {}  # this student's diagnoses -> the modules whose checks named them
        for e in entries(failed, tests):
            if e.module:
                continue  # a module not started: counted above
            for line in cause(e.message).splitlines():
                if line.startswith(LIKELY):
                    text = line[len(LIKELY):].strip().removesuffix(".")
                    for module in dict.fromkeys(t.module for t in e.tests):
                        mine.setdefault(text, [])
                        if module not in mine[text]:
                            mine[text].append(module)
        for text, modules in mine.items():
            found = diagnoses.setdefault(text, Diagnosis(text, [], []))
            found.ids.append(sub_id)
            found.modules += [m for m in modules if m not in found.modules]
    for check in checks.values():
        check.outcome = {i: check.outcome.get(i, NOT_GRADED) for i in rows}
    order = {m: k for k, m in enumerate(PARTS)}  # teaching order, an optional part handed out included
    for found in diagnoses.values():
        found.modules.sort(key=lambda m: (order.get(m, len(order)), m))
    try:
        manifest = shards.read_manifest(out)
    except shards.ShardError:
        manifest = None
    shard = (manifest.get("shard"), manifest.get("shards")) if isinstance(manifest, dict) else None
    return ClassSummary(
        rows=rows, checks=list(checks.values()),
        diagnoses=sorted(diagnoses.values(), key=lambda d: (-len(d.ids), d.text)),
        not_started=not_started_, not_handed_in=not_handed_in,
        graded_by=sorted(graded_by.values(), key=lambda g: (-len(g[1]), json.dumps(g[0], sort_keys=True))),
        unreadable=unreadable, module_max=module_max, shard=shard)


# -- class.csv ---------------------------------------------------------------------------------------------
def _ids_cell(ids) -> str:
    """Ids in one cell, one a line: each one safe line (its own newlines escaped, so a line is one id), the cell
    made text where a spreadsheet would take it for a formula (csv_cell, as the gradebook's id column). Read
    back: csv_value(cell).split("\\n")."""
    ids = list(ids)
    if not ids:
        return ""
    return csv_cell(ids[0]) + "".join("\n" + safe_line(i) for i in ids[1:])


def _what_graded(made_by) -> str:
    if made_by is None:
        return "not recorded (a report written before the kit recorded it)"
    keys = ("kit", "graders_sha256", "torch", "python")
    shown = [f"{k} {made_by[k]}" for k in keys if k in made_by]
    return ", ".join(shown + [f"{k} {v}" for k, v in sorted(made_by.items()) if k not in keys])


def to_csv(summary: ClassSummary) -> str:
    """class.csv: every figure of the page, one row each, with the ids it counts (COLUMNS)."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(COLUMNS)

    def row(section, module, item, outcome, ids):
        writer.writerow([csv_cell(section), csv_cell(module), csv_cell(item), csv_cell(outcome), len(ids),
                         _ids_cell(ids)])

    for status in STATUSES:
        row("status", "", status, "", summary.with_status(status))
    for module in (None, *summary.parts):
        for label, ids in summary.bins(module):
            row("distribution", module or "total", label, "", ids)
    for check in summary.checks:
        for outcome in OUTCOMES:
            row("check", check.module, check.name, outcome, check.ids(outcome))
    for d in summary.diagnoses:
        row("diagnosis", " ".join(d.modules), d.text, "", d.ids)
    for module, ids in summary.not_started.items():
        row("not started", module, "every function still raises NotImplementedError", "", ids)
    for module, ids in summary.not_handed_in.items():
        row("not handed in", module, NOT_HANDED_IN, "", ids)
    levels = {}
    for i, r in summary.rows.items():
        levels.setdefault(r.isolation or "not recorded", []).append(i)
    for level, ids in levels.items():
        row("isolation", "", level, "", ids)
    for made_by, ids in summary.graded_by:
        row("graded by", "", _what_graded(made_by), "", ids)
    for i, why in summary.unreadable:
        row("unreadable report", "", why, "", [i])
    return buf.getvalue()


# -- the pictures ------------------------------------------------------------------------------------------
def _histogram_png(title: str, labels: list, counts: list, top: float) -> str:
    return _drawn(json.dumps([title, labels, counts, top]))


@functools.lru_cache(maxsize=32)
def _drawn(picture: str) -> str:
    """A small bar chart of one distribution (the bins of ClassSummary.bins), as a base64 PNG of 400 x 220 px:
    large enough type to read on a phone, where it is shown at the screen's width."""
    title, labels, counts, top = json.loads(picture)
    from matplotlib.figure import Figure  # no pyplot: no global state, no backend to choose (Agg draws the PNG)
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(4, 2.2), layout="constrained")
    ax = fig.subplots()
    width = top / len(counts)
    bars = ax.bar([k * width for k in range(len(counts))], counts, width=width, align="edge", color="#3b6ea5",
                  edgecolor="white")
    ax.bar_label(bars, [str(c) if c else "" for c in counts], fontsize=9)
    ax.set_xlim(0, top)
    ax.set_ylim(0, max(counts + [1]) * 1.2)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=4))
    ax.set_xticks([k * width for k in range(0, len(counts) + 1, 2)],
                  [fmt(round(k * width, 2)) for k in range(0, len(counts) + 1, 2)], fontsize=9)
    ax.tick_params(axis="y", labelsize=9)
    ax.set_title(title, fontsize=10)
    ax.set_ylabel("submissions", fontsize=9)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return base64.b64encode(buf.getvalue()).decode()


# -- class.html --------------------------------------------------------------------------------------------
_PAGE_STYLE = STYLE + """
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(16rem,1fr));gap:1rem}
.checks{font-size:.9rem}.checks td,.checks th{padding:.25rem .35rem}.checks .n{text-align:right}
.checks th.n{overflow-wrap:normal;hyphens:auto}.checks thead th{position:sticky;top:0;background:#fff}
.checks .label{display:none}
@media (max-width:40rem){.checks thead{display:none}.checks,.checks tbody,.checks tr,.checks td{display:block}
.checks tr{border:1px solid #ccc;border-bottom:0;padding:.3rem .4rem}.checks tr:last-child{border-bottom:1px solid #ccc}
.checks td{border:0;padding:.05rem 0}.checks td.n{display:inline-block;text-align:left;margin-right:.9rem}
.checks .label{display:inline}}
.ids{font-size:.9rem;color:#444}details.ids summary{font-weight:400}td details summary{font-weight:400}
.sub{color:#555}ol.ranked li{margin:.6rem 0}"""


def _ids_html(ids) -> str:
    return ", ".join(esc(i) for i in ids)


def _share(n, of) -> str:
    return f"{n} of {of} ({100 * n / of:.0f}%)" if of else str(n)


def _chart(summary, module) -> str:
    bins = summary.bins(module)
    top = summary.scale(module)
    what = "total" if module is None else module
    title = f"{what} (out of {fmt(top)})"
    counts = [len(ids) for _, ids in bins]
    values = [v for _, v in summary.figures(module)]
    try:
        png = _histogram_png(title, [label for label, _ in bins], counts, top)
    except Exception:  # a picture never costs the page: the table below it says the same
        png = ""
    described = ", ".join(f"{label}: {len(ids)}" for label, ids in bins)
    alt = f"Histogram of the {what} figures of {len(values)} graded submissions, out of {fmt(top)}: {described}"
    if values:
        ordered = sorted(values)
        mid = len(ordered) // 2
        median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
        caption = (f"{esc(what)}: mean {fmt(round(sum(values) / len(values), 2))}, median {fmt(round(median, 2))}, "
                   f"lowest {fmt(min(values))}, highest {fmt(max(values))}")
    else:
        caption = f"{esc(what)}: no graded submission"
    image = (f'<img alt="{esc(alt)}" src="data:image/png;base64,{png}" width="400" height="220">' if png
             else f"<p class='note'>{esc(alt)}</p>")
    return f"<figure>{image}<figcaption>{caption}</figcaption></figure>"


def to_html(summary: ClassSummary) -> str:
    n = len(summary.rows)
    graded = summary.graded
    counts = ", ".join(f"{len(summary.with_status(s))} {s}" for s in STATUSES if summary.with_status(s))
    parts = ["<h1>Class overview: multi-head attention assignment</h1>",
             f"<p><b>{n} submission{'s' if n != 1 else ''}</b>{': ' + counts if counts else ''}.</p>"]
    if summary.shard is not None:
        k, shards_ = summary.shard
        parts.append(f"<p class='bad'>This output is shard {esc(k)} of {esc(shards_)}: the page covers this shard's "
                     "submissions only. Merge the shards (<code>grader_cli.py merge</code>) for the class's page.</p>")
    parts.append("<p class='note'>Computed from this output's gradebook.csv and each submission's results.json; "
                 "class.csv, beside this page, holds every figure with the ids it counts. Figures are of the "
                 "graded submissions; empty ones (nothing to grade) and those whose grading did not complete are "
                 "listed under <a href='#statuses'>Not graded</a>.</p>")
    parts.append("<p><a href='#distribution'>Figures</a> · <a href='#diagnoses'>Likely bugs</a> · "
                 "<a href='#checks'>Checks</a> · <a href='#statuses'>Not graded</a> · "
                 "<a href='#graded-by'>What graded them</a></p>")

    parts.append("<h2 id='distribution'>Totals and module figures</h2><div class='charts'>")
    parts += [_chart(summary, module) for module in (None, *summary.parts)]
    parts.append("</div>")

    parts.append("<h2 id='diagnoses'>Likely bugs, most frequent first</h2>")
    if summary.diagnoses:
        parts.append(f"<p class='note'>What the graders recognised in failed checks (a known mistake's output, "
                     f"autograder/grade/diagnose.py), each counted once per student, of the {len(graded)} graded "
                     "submissions.</p><ol class='ranked'>")
        for d in summary.diagnoses:
            parts.append(f"<li><b>{_share(len(d.ids), len(graded))}</b> <span class='sub'>in "
                         f"{esc(', '.join(d.modules))}</span><br>Likely bug: {esc(d.text)}"
                         f"<details class='ids'><summary>ids ({len(d.ids)})</summary>{_ids_html(d.ids)}</details></li>")
        parts.append("</ol>")
    else:
        parts.append("<p>No failed check named a likely bug.</p>")
    for title, found in (("Modules not started (every function still raises NotImplementedError)",
                          summary.not_started), ("Modules not handed in", summary.not_handed_in)):
        if found:
            parts.append(f"<h3>{esc(title)}</h3><ul>")
            parts += [f"<li><b>{esc(module)}</b>: {_share(len(ids), len(graded))}<details class='ids'><summary>ids"
                      f"</summary>{_ids_html(ids)}</details></li>" for module, ids in found.items()]
            parts.append("</ul>")

    parts.append("<h2 id='checks'>Checks</h2>")
    parts.append(f"<p class='note'>For each check, how many of the {n} submissions passed it, passed it with a note "
                 "(a fault inherited from another module, whose checks lose the points), failed it, or were not "
                 "graded on it (a check that needs CUDA on a machine without it, or a submission not graded); "
                 "each row adds up to the class. The most failed first.</p>")
    if summary.checks:
        # On a phone each row is a card: the check's name, then its four numbers, each with its label (the
        # header, which would scroll away from them, is not shown); on a wider screen a table whose header stays
        # at the top of the window while its rows scroll.
        parts.append("<table class='checks'><thead><tr><th>check</th><th class='n'>passed</th><th class='n'>with a "
                     "note</th><th class='n'>failed</th><th class='n'>not graded</th></tr></thead><tbody>")
        ranked = sorted(enumerate(summary.checks), key=lambda c: (-len(c[1].ids(FAILED)), c[0]))
        for _, check in ranked:
            failed, noted = check.ids(FAILED), check.ids(NOTED)
            more = "".join(f"<details class='ids'><summary>{label} ({len(ids)})</summary>{_ids_html(ids)}</details>"
                           for label, ids in (("failed", failed), ("with a note", noted)) if ids)
            cls = " class='n bad'" if failed else " class='n'"
            parts.append(f"<tr><td><span class='sub'>{esc(check.module)}:</span> {code_spans(check.name)}{more}</td>"
                         f"<td class='n'><span class='label'>passed </span>{len(check.ids(PASSED))}</td>"
                         f"<td class='n'><span class='label'>with a note </span>{len(noted)}</td>"
                         f"<td{cls}><span class='label'>failed </span>{len(failed)}</td>"
                         f"<td class='n'><span class='label'>not graded </span>{len(check.ids(NOT_GRADED))}</td></tr>")
        parts.append("</tbody></table>")
    else:
        parts.append("<p>No report holds a check.</p>")

    parts.append("<h2 id='statuses'>Not graded</h2>")
    others = [s for s in STATUSES if s != "graded" and summary.with_status(s)]
    meaning = {"empty": "nothing to grade: 0, and what was looked for",
               "timeout": "the grading ran out of time: no score", "error": "the grading did not complete: no score"}
    if not others:
        parts.append("<p class='ok'>Every submission was graded.</p>")
    for status in others:
        ids = summary.with_status(status)
        parts.append(f"<h3>{esc(status)} ({len(ids)}): {esc(meaning.get(status, ''))}</h3><ul>")
        parts += [f"<li>{esc(i)}: <span class='sub'>{esc(summary.rows[i].error)}</span></li>" for i in ids]
        parts.append("</ul>")
    if summary.unreadable:
        parts.append(f"<h3>Reports that could not be read ({len(summary.unreadable)})</h3><p class='note'>Counted "
                     "as not graded on every check.</p><ul>")
        parts += [f"<li>{esc(i)}: <span class='sub'>{esc(why)}</span></li>" for i, why in summary.unreadable]
        parts.append("</ul>")

    parts.append("<h2 id='graded-by'>What graded them</h2><ul>")
    for made_by, ids in summary.graded_by:
        parts.append(f"<li>{esc(_what_graded(made_by))}: <b>{len(ids)}</b> submission{'s' if len(ids) != 1 else ''}"
                     + (f"<details class='ids'><summary>ids</summary>{_ids_html(ids)}</details>"
                        if len(summary.graded_by) > 1 else "") + "</li>")
    levels = {}
    for i, r in summary.rows.items():
        levels.setdefault(r.isolation or "not recorded", []).append(i)
    parts.append("</ul><p>Isolation of student code: "
                 + "; ".join(f"{esc(level)} ({len(ids)})" for level, ids in levels.items()) + ".</p>")
    return document("Class overview: multi-head attention", _PAGE_STYLE, parts)


def write(out: Path) -> tuple[Path, Path]:
    """Write OUT/class.html and OUT/class.csv (each atomically, under the user's umask as the gradebook) from
    OUT's gradebook and reports; their paths. FileNotFoundError where OUT holds no gradebook."""
    out = Path(out)
    path = out / gradebook.GRADEBOOK
    if not stat.S_ISREG(os.lstat(path).st_mode):  # FileNotFoundError where there is none
        raise FileNotFoundError(f"{path} is not a regular file")
    summary = read_class(out)
    page, table = out / gradebook.CLASS_PAGE, out / gradebook.CLASS_CSV
    write_atomic(table, to_csv(summary), mode=SHARED)
    write_atomic(page, to_html(summary), mode=SHARED)
    return page, table
