"""Benchmark: where the cause of a fault and its fix sit on a phone, in the HTML feedback of the corpus's single faults.

    python benchmarks/fix_first.py grade REPORTS   # grade the cases once, one JSON report each (CPU: minutes)
    python benchmarks/fix_first.py measure REPORTS [--width 390] [--height 844]

A single fault is a [[bug]] of tests/corpus/submissions.toml whose report must print exactly one "Likely bug"
line (its `diagnosis` lists one). `grade` grades each such case (warm servers, as the corpus tests do) and writes
its report as `<id>.json` (`--format json`); `measure` renders each report's HTML feedback with the code checked
out here, opens it in a headless Chromium `--width` px wide, and prints, for every case, where the first
"Likely bug" line lies on the page (its top and bottom, in CSS px: tests/test_feedback_html.py's FIRST_CAUSE)
and whether all of it is on the first screen (`--height` px: 844, a common phone), then "N of M on the first
screen". The two phases are apart so that the code before and after a change of the feedback's layout renders
the same gradings: grade once, then run `measure` in each checkout on the same folder.
"""
import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.corpus, tests.test_feedback_html

from autograder.report.html import to_html  # noqa: E402  (the kit is installed: make setup)
from autograder.report.model import GradeReport  # noqa: E402

def single_faults():
    from tests.corpus import load_corpus

    return [c for c in load_corpus()["bug"] if len(c.diagnosis or ()) == 1]


def grade_all(folder: Path):
    from autograder.grade.engine import grade
    from autograder.grade.servers import WarmServers
    from autograder.paths import SOLUTIONS
    from tests.corpus import materialize

    folder.mkdir(parents=True, exist_ok=True)
    cases = single_faults()
    with WarmServers() as servers, tempfile.TemporaryDirectory() as tmp:
        for i, case in enumerate(cases, 1):
            out = folder / f"{case.id}.json"
            if out.exists():
                continue
            report = grade(materialize(case, Path(tmp) / case.id, SOLUTIONS), call_timeout=case.call_timeout or 5.0,
                           servers=servers)
            out.write_text(json.dumps(report.to_dict(), indent=1), encoding="utf-8")
            print(f"{i}/{len(cases)} {case.id}: {report.score:g}", flush=True)


def measure_all(folder: Path, width: int, height: int):
    from tests.test_feedback_html import find_browser, first_cause

    browser = find_browser()
    if browser is None:
        sys.exit("no headless Chromium or Chrome found")
    reports = sorted(folder.glob("*.json"))
    on_screen = 0
    for path in reports:
        report = GradeReport.from_dict(json.loads(path.read_text(encoding="utf-8")))
        with tempfile.TemporaryDirectory() as tmp:
            found = first_cause(browser, to_html(report), Path(tmp), width, height)
        cause = found["cause"]
        seen = bool(cause) and cause["bottom"] <= height
        on_screen += seen
        where = f"{cause['top']:6.0f} .. {cause['bottom']:6.0f}" if cause else "   no cause shown"
        print(f"{path.stem:<45} {where}  {'first screen' if seen else 'below'}",
              flush=True)
    print(f"\n{on_screen} of {len(reports)} single-fault reports show their cause on the first screen "
          f"({width} x {height} px)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("phase", choices=["grade", "measure"])
    parser.add_argument("reports", type=Path, help="the folder of JSON reports (written by grade)")
    parser.add_argument("--width", type=int, default=390)
    parser.add_argument("--height", type=int, default=844)
    args = parser.parse_args()
    if args.phase == "grade":
        grade_all(args.reports)
    else:
        measure_all(args.reports, args.width, args.height)


if __name__ == "__main__":
    main()
