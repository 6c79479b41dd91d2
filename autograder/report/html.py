"""Feedback a student learns from: Markdown and HTML views of a GradeReport.

Per module, the score; for each failed check, what was expected and what
came back on the smallest failing case, and the likely bug when the output
matches a known wrong variant (autograder.grade.diagnose); the end of what the
student's code printed. The HTML also draws, next to the check that recorded
them, the attention weights the graders recorded (the student's next to the
reference's), and lists the passed checks, folded. Only messages are shown:
never the graders' source or the reference solution.
"""
from __future__ import annotations

import base64
import functools
import html
import io
import json
import re

from autograder.report.model import PRINTED_TITLE, GradeReport, entries, safe_line, safe_text
from autograder.scoring import fmt

_MARKDOWN_PUNCTUATION = re.compile(r"[!-/:-@\[-`{-~]")


def md_inline(text) -> str:
    """Student text (a submission id, an error line) as literal Markdown: one line, every ASCII punctuation
    character backslash-escaped (CommonMark allows it for all of them), so that it can open no heading,
    link, image, emphasis, table cell or HTML tag, whatever it holds."""
    return _MARKDOWN_PUNCTUATION.sub(lambda m: "\\" + m.group(), safe_line(text))


def _fenced(text) -> list[str]:
    """Student text (a check's message) as a code block that it cannot close: the fence is longer than any
    run of backticks in it, and its control characters are escaped."""
    text = safe_text(text)
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", text)), default=0))
    return [fence, text, fence]


def _md_entry(e, report=None, verb="fails") -> list[str]:
    """Markdown lines of one entry of a listing (report.model.entries). A headed one: the cause as the heading
    (its "Likely bug" lines, else its message's first line, as literal text), the rest of its message, then the
    checks it `verb`, each with what it cost (when `report` is given); a check of its own: its name as the
    heading, then its message."""
    cost = (lambda t: f" (-{_cost(report, t)})" if report else "")
    if not e.headed:
        lines = [line for t in e.tests for line in (f"### {t.module}: {safe_line(t.name)}{cost(t)}", "")]
        return [*lines, *_fenced(e.message), ""] if e.message else lines
    first, *more = e.heading
    lines = [f"### {md_inline(first)}", ""] + ([*(md_inline(line) + "  " for line in more[:-1]), md_inline(more[-1]),
                                                 ""] if more else [])
    if e.details:
        lines += [*_fenced(e.details), ""]
    lost = (f" (-{fmt(sum(report.check_figures(t)[1] for t in e.tests))} in all)"
            if report and len(e.tests) > 1 else "")
    return [*lines, f"{e.checks_line(verb)[:-1]}{lost}:", "",
            *(f"- {t.module}: {safe_line(t.name)}{cost(t)}" for t in e.tests), ""]


def to_markdown(report: GradeReport) -> str:
    lines = [f"# Feedback: {md_inline(report.submission)}", "", f"**{report.summary_line()}**", ""]
    if report.course:
        lines += [md_inline(report.course_line()), ""]
    if report.status != "graded":
        lines += [f"> Grading {report.status}: {md_inline(report.error.splitlines()[0]) if report.error else ''}",
                  ""]
    if report.has_score and report.tests:  # nothing graded: no table of 0 / 0
        lines += ["| module | score |", "| --- | --- |"]
        for module, (earned, available) in report.modules().items():
            lines.append(f"| {module} | {earned:g} / {available:g} |")
    if report.missing_lines():
        lines += ["", f"## {report.missing_lines()[0][:-1]}", "",
                  *(f"- {md_inline(why)}" for why in report.missing.values())]
    if report.notes:
        lines += ["", "## Files not graded", "", *(f"- {md_inline(n)}" for n in report.notes)]
    failed = report.to_fix() if report.status != "empty" else []  # empty: the reason above says it all
    if failed:
        lines += ["", "## What to fix", ""]
        for e in entries(failed, report.tests):
            if e.module:
                lost = fmt(sum(report.check_figures(t)[1] for t in e.tests))
                lines += [f"### {e.module}: {e.message} ({len(e.tests)} checks) (-{lost})", ""]
                continue
            lines += _md_entry(e, report)
    elif report.status == "graded" and report.tests and not report.failed():
        lines += ["", "Every check passed."]
    noted = report.noted()
    if noted:
        lines += ["", "## Passed, with a note", ""]
        for e in entries(noted, report.tests):
            lines += _md_entry(e, verb="concerns")
    skipped = report.skipped()
    if skipped:
        lines += ["", f"_Not graded on this machine: {len(skipped)} checks that need CUDA._"]
    printed = report.printed()
    if printed:
        lines += ["", f"## {PRINTED_TITLE}", "", *_fenced(printed)]
    return "\n".join(lines).rstrip() + "\n"


# -- pictures ---------------------------------------------------------------------------------------------
# A picture is drawn only of a small answer of the expected shape. The student chooses what its weights
# are: an (N, N) tensor with stride 0 costs it nothing to send, and drawing N * N labelled cells took the
# trusted process half an hour and 10 GB (issue 15). So the recorded weights are drawn only when they have
# exactly the shape of the reference's (which the grader computed itself) and at most HEATMAP_MAX_CELLS rows
# and columns; the sizes are read from the lists' lengths before any element is looked at.
HEATMAP_MAX_CELLS = 16
_ANNOTATED_CELLS = 8  # up to this many rows and columns, each cell also shows its value


def _matrix_shape(value):
    """(rows, columns) of a recorded matrix (a list of rows of numbers), or None when it is no such thing.

    One larger than the cap is not scanned: its shape is told from its length and its first row's.
    """
    if not isinstance(value, list) or not value or not isinstance(value[0], list) or not value[0]:
        return None
    shape = len(value), len(value[0])
    if max(shape) > HEATMAP_MAX_CELLS:
        return shape
    if all(isinstance(row, list) and len(row) == shape[1] and all(isinstance(v, (int, float)) for v in row)
           for row in value):
        return shape
    return None


def _cannot_draw(data) -> str:
    """Why a recorded heatmap is not drawn, one sentence for the student; "" when it can be drawn."""
    if not isinstance(data, dict):
        return "nothing that can be drawn was recorded"
    expected = _matrix_shape(data.get("expected"))
    if expected is None:
        return "nothing that can be drawn was recorded"
    if max(expected) > HEATMAP_MAX_CELLS:
        return (f"the weights have {expected[0]} x {expected[1]} cells, more than the "
                f"{HEATMAP_MAX_CELLS} x {HEATMAP_MAX_CELLS} drawn")
    yours = _matrix_shape(data.get("yours"))
    if yours != expected:
        got = "something that is not a matrix of numbers" if yours is None else f"shape {yours}"
        told = data.get("yours_shape")  # the grader records only the shape of weights of another shape
        if yours is None and isinstance(told, list) and told and all(type(n) is int for n in told[:8]):
            got = f"shape {tuple(told[:8])}" + (" (and more dimensions)" if len(told) > 8 else "")
        return f"your weights have {got}, the check expects shape {expected}"
    return ""


def _cell(value) -> str:
    """A weight as written in its cell: two decimals, or a short exponent form far from [0, 1] (never 300 digits)."""
    return f"{value:.2f}" if -10 < value < 10 else f"{value:.0e}"


PANELS = (("yours", "yours"), ("expected", "reference"))  # (key of the recording, title), left to right


def _heatmap_png(data) -> tuple[str, str]:
    """The student's weights and the reference's, one base64 PNG each (yours, then the reference's); only for
    data `_cannot_draw` accepts. Two pictures, not one of two panels: side by side on a wide screen, one under
    the other on a phone, each as large as the width allows (one picture of both shrank to half on a phone).

    Drawn once per distinct picture (a class's correct answers all give the same one): ~0.15 s each.
    """
    return tuple(_drawn(json.dumps({"values": data[key], "title": title})) for key, title in PANELS)


@functools.lru_cache(maxsize=128)
def _drawn(picture: str) -> str:
    """The picture `picture` (JSON of one matrix `_cannot_draw` accepted, and its title): rows are queries and
    columns keys, each tick at a cell and labelled with its token (q1, q2 / k1, k2), a colour bar from 0 to 1,
    the layout constrained, so that no label is cut off or runs into the colour bar."""
    data = json.loads(picture)
    from matplotlib.figure import Figure  # no pyplot: no global state, no backend to choose

    values = data["values"]
    rows, cols = _matrix_shape(values)
    small = max(rows, cols) <= _ANNOTATED_CELLS
    size = 11 if small else 8  # shown at about 320 px wide, on a phone too
    fig = Figure(figsize=(3.4, 3.0), layout="constrained")
    ax = fig.subplots()
    image = ax.imshow(values, vmin=0, vmax=1, cmap="viridis")
    ax.set_title(data["title"], fontsize=12)
    ax.set_xticks(range(cols), [f"k{j + 1}" for j in range(cols)], fontsize=size, rotation=0 if small else 90)
    ax.set_yticks(range(rows), [f"q{i + 1}" for i in range(rows)], fontsize=size)
    ax.set_xlabel("key", fontsize=11)
    ax.set_ylabel("query", fontsize=11)
    if small:
        for i, row in enumerate(values):
            for j, v in enumerate(row):
                ax.text(j, i, _cell(v), ha="center", va="center", fontsize=size - 1 if cols > 4 else size,
                        color="white" if not v >= 0.5 else "black")
    fig.colorbar(image, ax=ax, shrink=0.8)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return base64.b64encode(buf.getvalue()).decode()


def _numbers(values, caption) -> str:
    """A recorded matrix as an HTML table, for a screen reader and for whoever wants the numbers: a caption, a
    header cell per key (k1, k2, ...) and per query (q1, q2, ...), each weight as in its picture's cell. In a
    region of its own that scrolls sideways when the table is wider than the screen (16 keys on a phone), so that
    the page never does."""
    head = "".join(f"<th scope='col'>k{j + 1}</th>" for j in range(len(values[0])))
    body = "".join(f"<tr><th scope='row'>q{i + 1}</th>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>"
                   for i, row in enumerate(values))
    return (f"<div class='numbers' role='region' tabindex='0' aria-label='{esc(caption)}'><table>"
            f"<caption>{esc(caption)}</caption><tr><td></td>{head}</tr>{body}</table></div>")


# -- HTML -------------------------------------------------------------------------------------------------
# Readable on a phone: the viewport meta, pictures that shrink to the width, and long words (a submission
# id, a tensor printed on one line) broken anywhere rather than pushing the page sideways. On a narrow screen
# the heading and the table of scores are a little tighter, so that the first cause and its fix are on the
# first screen (tests/test_feedback_html.py, benchmarks/fix_first.py).
STYLE = """body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222;
overflow-wrap:anywhere}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.3rem .8rem;text-align:left}
.ok{color:#176f2c}.bad{color:#a4161a}.note{color:#555;font-style:italic}
pre{background:#f6f6f6;padding:.6rem;white-space:pre-wrap}code{background:#f0f0f0;padding:0 .15rem}
img{max-width:100%;height:auto}figure{margin:1rem 0}figcaption{font-size:.9rem;color:#555}
.panels{display:flex;flex-wrap:wrap;gap:.5rem}.numbers{overflow-x:auto;margin:.5rem 0}
.numbers table{font-size:.8rem;font-variant-numeric:tabular-nums;min-width:18rem}
.numbers td,.numbers th{padding:.1rem .35rem}
.numbers caption{text-align:left;font-size:.85rem;color:#555;padding:.2rem 0}
.cause{margin:1rem 0}.cause ul{padding-left:1.2rem}
h1{font-size:1.6rem}summary{cursor:pointer;font-weight:600}li{margin:.3rem 0}
@media (max-width:30rem){body{margin:1rem auto}h1{font-size:1.35rem}td,th{padding:.15rem .6rem}}"""


# Text in another language than the page's English: runs of Chinese characters (the tutorials' titles, such as
# 《Self-Attention详解》, in check names, messages and captions), Japanese or Korean, with the Latin words between
# two of their characters (the title's "Self-Attention"). Marked with their language, so that a screen reader
# reads them in it rather than spelling them out as English (WCAG 3.1.2, language of parts).
_EAST_ASIAN = ("\u1100-\u11ff\u3000-\u303f\u3040-\u30ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
               "\uf900-\ufaff\uff00-\uffef")  # Hangul jamo, CJK punctuation, kana, Han, Hangul, full-width forms
_FOREIGN_RUN = re.compile(f"[{_EAST_ASIAN}]+(?:[A-Za-z0-9 \\-]*[{_EAST_ASIAN}]+)*")
_KANA, _HANGUL = re.compile("[\u3040-\u30ff]"), re.compile("[\u1100-\u11ff\u3130-\u318f\uac00-\ud7af]")
_TAG = re.compile(r"(<[^>]*>)")


def _language(run: str) -> str:
    return "ja" if _KANA.search(run) else "ko" if _HANGUL.search(run) else "zh"


def languages_marked(fragment: str) -> str:
    """HTML `fragment` (escaped as `esc` escapes: every "<" in it opens a tag, none is in an attribute's value)
    with each run of Chinese, Japanese or Korean text of its text, never of a tag or an attribute, in a
    <span lang="..."> of its language."""
    return "".join(part if part.startswith("<") else
                   _FOREIGN_RUN.sub(lambda m: f'<span lang="{_language(m.group())}">{m.group()}</span>', part)
                   for part in _TAG.split(fragment))


def document(title: str, style: str, body: list[str]) -> str:
    """A page of the kit: English (lang), readable on a phone (the viewport), the `body` parts in the page's one
    <main> landmark (so that a screen reader can go straight to them), text in another language marked with it
    (`languages_marked`)."""
    return "\n".join(["<!doctype html><html lang='en'><head><meta charset='utf-8'>",
                      "<meta name='viewport' content='width=device-width, initial-scale=1'>",
                      f"<title>{title}</title>", f"<style>{style}</style></head><body><main>",
                      *(languages_marked(part) for part in body), "</main></body></html>"]) + "\n"


def esc(text) -> str:
    """Every string shown: its control characters escaped, then HTML-escaped (quotes too: fit for attributes)."""
    return html.escape(safe_text(text))


def code_spans(text) -> str:
    """A check's name as HTML: escaped, its `code` spans (Markdown's backticks) as <code>."""
    return re.sub(r"`([^`\n]+)`", r"<code>\1</code>", esc(text))


def _picture(t) -> str:
    """The attention weights `t` recorded, drawn, or a short note saying why they are not; "" when none."""
    if "heatmap" not in t.data:
        return ""
    data = t.data["heatmap"]
    why = _cannot_draw(data)
    if not why:
        try:
            pngs = _heatmap_png(data)
        except Exception:  # a recording the checks above let through never costs the feedback
            why = "the weights could not be drawn"
    if why:
        return f"<p class='note'>No picture of the attention weights: {esc(why)}.</p>"
    name = f"{t.module}: {t.name.replace('`', '')}"
    caption = data.get("title") or t.name
    images = "".join(f'<img alt="{esc(alt)}" src="data:image/png;base64,{png}" width="340" height="300">'
                     for png, alt in zip(pngs, (f"Attention weights for {name}: yours (numbers: the table below)",
                                                f"Attention weights for {name}: the reference's (numbers: the "
                                                "table below)")))
    tables = "".join(_numbers(data[key], f"{label} (rows: queries, columns: keys)")
                     for key, label in (("yours", "Your weights"), ("expected", "The reference's weights")))
    return (f"<figure><div class='panels'>{images}</div><figcaption>{esc(caption)}</figcaption>{tables}"
            "</figure>")


def _cost(report, t) -> str:
    """The points a failed check cost, as every format shows them (autograder.scoring: scaled with its module)."""
    return fmt(report.check_figures(t)[1])


def _check(t, heading="h3", report=None, message=None) -> str:
    """One check: its module and name, the points it cost, its message (`message` in its place: one message
    per cause, report.model.entries), and its picture."""
    cost = (f" <span class='bad'>(-{_cost(report, t) if report else f'{t.points:g}'})</span>"
            if t.status == "failed" else "")
    message = t.message if message is None else message
    message = f"<pre>{esc(message)}</pre>" if message else ""
    return f"<{heading}>{esc(t.module)}: {code_spans(t.name)}{cost}</{heading}>{message}{_picture(t)}"


def _entry(e, report=None, verb="fails") -> str:
    """One entry of a listing (report.model.entries). A headed one: the cause first, as the heading (its "Likely
    bug" lines, else its message's first line), the rest of its message, then the checks it `verb`, each with
    what it cost and its picture; a check of its own: its name, its message and its picture; a module not
    started: one heading."""
    if e.module:
        lost = fmt(sum(report.check_figures(t)[1] for t in e.tests)) if report else ""
        return (f"<h3>{esc(e.module)}: {esc(e.message)} ({len(e.tests)} checks)"
                + (f" <span class='bad'>(-{lost})</span>" if lost else "") + "</h3>")
    if not e.headed:
        return "".join(_check(t, report=report, message=e.message) for t in e.tests)
    details = f"<pre>{esc(e.details)}</pre>" if e.details else ""
    lost = (f" <span class='bad'>(-{fmt(sum(report.check_figures(t)[1] for t in e.tests))} in all)</span>"
            if report and len(e.tests) > 1 else "")
    checks = "".join(f"<li>{_check(t, 'span', report, message='')}</li>" for t in e.tests)
    return (f"<section class='cause'><h3 class='fix'>{'<br>'.join(esc(line) for line in e.heading)}</h3>{details}"
            f"<p>{esc(e.checks_line(verb)[:-1])}{lost}:</p><ul>{checks}</ul></section>")


def to_html(report: GradeReport) -> str:
    parts = [f"<h1>Feedback for {esc(report.submission)}: multi-head attention assignment</h1>",
             f"<p><b>{esc(report.summary_line())}</b></p>"]
    if report.course:
        parts.append(f"<p>{esc(report.course_line())}</p>")
    if report.status != "graded":
        parts.append(f"<p class='bad'>Grading {esc(report.status)}: {esc(report.error)}</p>")
    if report.has_score and report.tests:  # nothing graded: no table of 0 / 0
        parts.append("<table><tr><th>module</th><th>score</th></tr>")
        for module, (earned, available) in report.modules().items():
            cls = "ok" if earned == available and available else "bad"
            parts.append(f"<tr><td>{esc(module)}</td><td class='{cls}'>{earned:g} / {available:g}</td></tr>")
        parts.append("</table>")
    if report.missing_lines():
        parts.append(f"<h2>{esc(report.missing_lines()[0][:-1])}</h2><ul>"
                     + "".join(f"<li>{esc(w)}</li>" for w in report.missing.values()) + "</ul>")
    if report.notes:
        parts.append("<h2>Files not graded</h2><ul>" + "".join(f"<li>{esc(n)}</li>" for n in report.notes) + "</ul>")
    failed = report.to_fix() if report.status != "empty" else []  # empty: the reason above says it all
    if failed:
        parts.append("<h2>What to fix</h2>")
    elif report.status == "graded" and report.tests and not report.failed():
        parts.append("<p class='ok'>Every check passed.</p>")
    parts += [_entry(e, report) for e in entries(failed, report.tests)]
    noted = report.noted()
    if noted:
        parts.append("<h2>Passed, with a note</h2>")
        parts += [_entry(e, verb="concerns") for e in entries(noted, report.tests)]
    passed = [t for t in report.tests if t.status == "passed" and not t.message]
    if passed:
        parts.append(f"<details><summary>Passed checks ({len(passed)})</summary><ul>"
                     + "".join(f"<li>{_check(t, 'span')}</li>" for t in passed) + "</ul></details>")
    skipped = report.skipped()
    if skipped:
        parts.append(f"<p class='note'>Not graded on this machine: {len(skipped)} checks that need CUDA.</p>")
    printed = report.printed()
    if printed:
        parts.append(f"<h2>{esc(PRINTED_TITLE)}</h2><pre>{esc(printed)}</pre>")
    return document(f"Feedback for {esc(report.submission)}: multi-head attention", STYLE, parts)
