"""Feedback a student learns from: Markdown and HTML views of a GradeReport.

Per module, the score; for each failed check, what was expected and what
came back on the smallest failing case, and the likely bug when the output
matches a known wrong variant (autograder.diagnose). The HTML also draws the
attention weights the graders recorded (the student's next to the
reference's). Only messages are shown: never the graders' source or the
reference solution.
"""
from __future__ import annotations

import base64
import html
import io
import re

from autograder.results import GradeReport, safe_line, safe_text

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


def to_markdown(report: GradeReport) -> str:
    lines = [f"# Feedback: {md_inline(report.submission)}", "", f"**{report.summary_line()}**", ""]
    if report.status != "graded":
        lines += [f"> Grading {report.status}: {md_inline(report.error.splitlines()[0]) if report.error else ''}",
                  ""]
    lines += ["| module | score |", "| --- | --- |"]
    for module, (earned, available) in report.modules().items():
        lines.append(f"| {module} | {earned:g} / {available:g} |")
    if report.notes:
        lines += ["", "## Files not graded", "", *(f"- {md_inline(n)}" for n in report.notes)]
    failed = report.failed()
    if failed:
        lines += ["", "## What to fix", ""]
        for t in failed:
            lines += [f"### {t.module}: {safe_line(t.name)} (-{t.points:g})", "", *_fenced(t.message), ""]
    else:
        lines += ["", "Every check passed."]
    noted = report.noted()
    if noted:
        lines += ["", "## Passed, with a note", ""]
        for t in noted:
            lines += [f"### {t.module}: {safe_line(t.name)}", "", *_fenced(t.message), ""]
    skipped = report.skipped()
    if skipped:
        lines += ["", f"_Not graded on this machine: {len(skipped)} checks that need CUDA._"]
    return "\n".join(lines).rstrip() + "\n"


def _heatmap_png(data) -> str:
    """Two heatmaps side by side (yours, expected) as a base64 PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(6.4, 3.0))
    for ax, key, title in zip(axes, ("yours", "expected"), ("your weights", "expected weights")):
        values = data[key]
        image = ax.imshow(values, vmin=0, vmax=1, cmap="viridis")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("key", fontsize=8)
        ax.set_ylabel("query", fontsize=8)
        for i, row in enumerate(values):
            for j, v in enumerate(row):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if v < 0.5 else "black")
    fig.colorbar(image, ax=axes, shrink=0.8)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


_STYLE = """body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.3rem .8rem;text-align:left}
.ok{color:#176f2c}.bad{color:#a4161a}pre{background:#f6f6f6;padding:.6rem;white-space:pre-wrap}
figure{margin:1rem 0}figcaption{font-size:.9rem;color:#555}"""


def to_html(report: GradeReport) -> str:
    def e(text):  # every string shown: its control characters escaped, then HTML-escaped
        return html.escape(safe_text(text))

    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>Feedback: {e(report.submission)}</title>",
             f"<style>{_STYLE}</style></head><body>", f"<h1>Feedback</h1><p><b>{e(report.summary_line())}</b></p>"]
    if report.status != "graded":
        parts.append(f"<p class='bad'>Grading {e(report.status)}: {e(report.error)}</p>")
    parts.append("<table><tr><th>module</th><th>score</th></tr>")
    for module, (earned, available) in report.modules().items():
        cls = "ok" if earned == available and available else "bad"
        parts.append(f"<tr><td>{e(module)}</td><td class='{cls}'>{earned:g} / {available:g}</td></tr>")
    parts.append("</table>")
    if report.notes:
        parts.append("<h2>Files not graded</h2><ul>" + "".join(f"<li>{e(n)}</li>" for n in report.notes) + "</ul>")
    failed = report.failed()
    parts.append("<h2>What to fix</h2>" if failed else "<p class='ok'>Every check passed.</p>")
    for t in failed:
        parts.append(f"<h3>{e(t.module)}: {e(t.name)} <span class='bad'>(-{t.points:g})</span></h3>"
                     f"<pre>{e(t.message)}</pre>")
    noted = report.noted()
    if noted:
        parts.append("<h2>Passed, with a note</h2>")
    for t in noted:
        parts.append(f"<h3>{e(t.module)}: {e(t.name)}</h3><pre>{e(t.message)}</pre>")
    pictures = [t for t in report.tests if "heatmap" in t.data]
    if pictures:
        parts.append("<h2>Your attention weights</h2>")
        for t in pictures:
            data = t.data["heatmap"]
            try:
                img = _heatmap_png(data)
            except Exception:  # a malformed recording never costs the feedback
                continue
            parts.append(f"<figure><img alt='heatmaps' src='data:image/png;base64,{img}'>"
                         f"<figcaption>{e(data.get('title', t.name))}</figcaption></figure>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
