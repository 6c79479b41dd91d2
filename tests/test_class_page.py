"""The class at a glance (issue 38): OUT/class.html and OUT/class.csv, from a class run's reports on disk.

A real class is graded once by `grader_cli.py grade-all` (module fixture): three planted bugs of the corpus whose
"Likely bug" lines the corpus states (tests/corpus/submissions.toml; tests/test_corpus.py checks each report
prints exactly those), one of them under an id made to be hostile to spreadsheets and pages and one under an
id with a control character, the reference, the untouched template and a file that is no zip. Its class.csv
must give those diagnoses, statuses and check outcomes with exactly the ids expected; a merge of the same rows
as two shards must write the same page; the page must open in a headless browser at a phone's and a desktop's
width as the feedback page does (tests/test_feedback_html.py). The reports are hostile input: a results.json
that is a link, a FIFO, too large or not the kit's is named on the page, never followed, waited on or trusted.
"""
from __future__ import annotations

import csv
import io
import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from autograder import __version__
from autograder.classrun import classpage, fingerprints, gradebook, outlock, shards
from autograder.report.model import csv_value
from grader_cli import cli
from tests.conftest import SOLUTIONS, TEMPLATE
from tests.corpus import load_corpus, materialize
from tests.test_feedback_html import DESKTOP, MEASURE, PHONE, browser, measure  # noqa: F401  (browser: a fixture)

HOSTILE = '=HYPERLINK("x")<img src=x onerror=alert(1)>'  # a formula to a spreadsheet, markup to a page
CONTROL = "tab\there"  # the gradebook shows it escaped: tab\\there
#: id -> the corpus case it hands in (the reference, the template and a broken zip aside)
PLANTED = {"ann": "attention-scale-by-dk", HOSTILE: "attention-scale-by-dk", CONTROL: "masks-no-diagonal",
           "pia": "positional-sin-cos-concatenated"}
NOTED_CHECK = "PositionalEncoding.forward(x) = x + pe[:T]"  # passes with a note where sinusoidal_encoding is wrong


def shown(sub_id: str) -> str:
    """An id as the gradebook and class.csv show it (control characters escaped)."""
    return gradebook.row_key(sub_id)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("class-page")
    folder = root / "class"
    folder.mkdir()
    cases = {c.id: c for c in load_corpus()["bug"]}
    for sub_id, case in PLANTED.items():
        materialize(cases[case], folder / sub_id, SOLUTIONS)
    shutil.copytree(SOLUTIONS, folder / "ben", ignore=shutil.ignore_patterns("__init__.py", "__pycache__"))
    shutil.copytree(TEMPLATE, folder / "eve", ignore=shutil.ignore_patterns("__pycache__", ".*"))
    (folder / "zed.zip").write_bytes(b"not a zip at all")
    out = root / "out"
    result = CliRunner().invoke(cli, ["grade-all", str(folder), "-o", str(out), "--jobs", "2"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return {"folder": folder, "out": out, "output": result.output, "cases": cases}


def rows(out: Path) -> list[dict]:
    with open(out / gradebook.CLASS_CSV, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def ids(row: dict) -> list[str]:
    """The ids of a class.csv row, as written: one a line, the first one's formula guard taken off."""
    return csv_value(row["ids"]).split("\n") if row["ids"] else []


def section(out: Path, name: str) -> list[dict]:
    return [r for r in rows(out) if r["section"] == name]


# -- what grade-all writes ---------------------------------------------------------------------------------
@pytest.mark.grading  # the class is graded by a real grade-all (the `graded` fixture)
def test_grade_all_ends_with_the_class_page_and_says_where(graded):
    out = graded["out"]
    assert f"Class page: {out / 'class.html'}" in graded["output"], graded["output"]
    assert (out / "class.html").is_file() and (out / "class.csv").is_file()


@pytest.mark.grading  # the class is graded by a real grade-all (the `graded` fixture)
def test_the_diagnoses_are_counted_once_per_student_with_exactly_their_ids(graded):
    expected = {}
    for sub_id, case in sorted(PLANTED.items(), key=lambda item: shown(item[0])):
        for line in graded["cases"][case].diagnosis:
            expected.setdefault(line, []).append(shown(sub_id))
    got = {r["item"]: ids(r) for r in section(graded["out"], "diagnosis")}
    assert got == expected, f"expected the diagnoses {expected}, got {got}"
    counts = {r["item"]: int(r["count"]) for r in section(graded["out"], "diagnosis")}
    assert counts == {line: len(who) for line, who in expected.items()}, counts


@pytest.mark.grading  # the class is graded by a real grade-all (the `graded` fixture)
def test_the_diagnoses_are_ranked_by_how_many_students_got_each(graded):
    counts = [int(r["count"]) for r in section(graded["out"], "diagnosis")]
    assert counts == sorted(counts, reverse=True) and counts[0] == 2, f"expected 2 first, then fewer: {counts}"


@pytest.mark.grading  # the class is graded by a real grade-all (the `graded` fixture)
def test_the_statuses_give_their_ids(graded):
    got = {r["item"]: ids(r) for r in section(graded["out"], "status")}
    assert got == {"graded": sorted(shown(i) for i in [*PLANTED, "ben"]), "empty": ["eve", "zed.zip"],
                   "timeout": [], "error": []}, got


@pytest.mark.grading  # the class is graded by a real grade-all (the `graded` fixture)
def test_a_hostile_id_is_text_in_the_csv_and_markup_nowhere_on_the_page(graded):
    (first,) = [r for r in section(graded["out"], "status") if r["item"] == "graded"]
    assert first["ids"].startswith("'=HYPERLINK"), f"expected the formula made text, got {first['ids']!r}"
    page = (graded["out"] / "class.html").read_text(encoding="utf-8")
    assert "<img src=x" not in page and "=HYPERLINK(&quot;x&quot;)&lt;img src=x onerror=alert(1)&gt;" in page
    assert "tab\\there" in page and "tab\there" not in page, "expected the tab escaped as the gradebook shows it"


@pytest.mark.grading  # the class is graded by a real grade-all (the `graded` fixture)
def test_every_check_adds_up_to_the_class(graded):
    by_check = {}
    for r in section(graded["out"], "check"):
        by_check.setdefault((r["module"], r["item"]), {})[r["outcome"]] = int(r["count"])
    assert len(by_check) == 65, f"expected the kit's 65 checks, got {len(by_check)}"
    wrong = {check: got for check, got in by_check.items()
             if sorted(got) != sorted(classpage.OUTCOMES) or sum(got.values()) != 7}
    assert not wrong, f"expected each check's four outcomes to add up to the 7 submissions, got {wrong}"


@pytest.mark.grading  # the class is graded by a real grade-all (the `graded` fixture)
def test_a_failed_check_and_a_noted_one_name_their_students(graded):
    outcome = {(r["item"], r["outcome"]): ids(r) for r in section(graded["out"], "check")}
    diagonal = "True where key j <= query i: the lower triangle, diagonal included"
    assert outcome[(diagonal, "failed")] == [shown(CONTROL)], outcome[(diagonal, "failed")]
    assert outcome[(NOTED_CHECK, "passed with a note")] == ["pia"], outcome[(NOTED_CHECK, "passed with a note")]
    assert outcome[(NOTED_CHECK, "not graded")] == ["eve", "zed.zip"], "expected the empty submissions not graded"


@pytest.mark.grading  # the class is graded by a real grade-all (the `graded` fixture)
def test_the_distribution_of_totals_puts_each_graded_submission_in_one_bin(graded):
    book = gradebook.read_gradebook(graded["out"])
    bins = section(graded["out"], "distribution")
    totals = [r for r in bins if r["module"] == "total"]
    assert [r["item"] for r in totals] == [f"[{k * 10}, {k * 10 + 10})" for k in range(9)] + ["[90, 100]"]
    placed = sorted(i for r in totals for i in ids(r))
    assert placed == sorted(shown(i) for i in [*PLANTED, "ben"]), placed
    (top,) = [r for r in totals if r["item"] == "[90, 100]"]
    assert "ben" in ids(top) and book["ben"].total == 100


@pytest.mark.grading  # the class is graded by a real grade-all (the `graded` fixture)
def test_what_graded_them_is_the_kit_that_ran(graded):
    (made,) = section(graded["out"], "graded by")
    assert made["item"].startswith(f"kit {__version__}, graders_sha256 {fingerprints.kit_digest()}, torch "), \
        made["item"]
    assert int(made["count"]) == 7


# -- the same page from a merge, and again from summary ------------------------------------------------------
@pytest.mark.grading  # the class is graded by a real grade-all (the `graded` fixture)
def test_a_merge_of_the_same_rows_as_two_shards_writes_the_same_page(graded, tmp_path):
    """The rows and folders of the single run, split as `grade-all --shard K/2` would have graded them (each
    shard's manifest from the same class folder, so the same fingerprints), then merged by the CLI."""
    book = gradebook.read_gradebook(graded["out"])
    outs = []
    for k in range(2):
        out = tmp_path / f"shard-{k}"
        _, _, todo, _, prints = shards.prepare(graded["folder"], out, k, 2)
        mine = {}
        for sub_id, _ in todo:
            row = book[gradebook.row_key(sub_id)]
            assert row.fingerprint == prints[sub_id], f"{sub_id}: the shard would grade it again"
            mine[gradebook.row_key(sub_id)] = row
            shutil.copytree(gradebook.output_folder(graded["out"], sub_id), gradebook.output_folder(out, sub_id))
        gradebook.write_gradebook(out, mine)
        outs.append(out)
    result = CliRunner().invoke(cli, ["merge", *map(str, outs), "-o", str(tmp_path / "merged")],
                                catch_exceptions=False)
    assert result.exit_code == 0 and "Class page: " in result.output, result.output
    for name in ("class.csv", "class.html"):
        merged = (tmp_path / "merged" / name).read_text(encoding="utf-8")
        single = (graded["out"] / name).read_text(encoding="utf-8")
        assert merged == single, f"expected the merged {name} to be the single run's"


@pytest.mark.grading  # the class is graded by a real grade-all (the `graded` fixture)
def test_summary_writes_the_page_again_and_refuses_a_folder_without_a_gradebook(graded, tmp_path):
    copy = tmp_path / "out"
    shutil.copytree(graded["out"], copy, ignore=shutil.ignore_patterns("class.*", outlock.LOCK))
    result = CliRunner().invoke(cli, ["summary", str(copy)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert (copy / "class.csv").read_text() == (graded["out"] / "class.csv").read_text()
    empty = CliRunner().invoke(cli, ["summary", str(tmp_path)], catch_exceptions=False)
    assert empty.exit_code == 2 and "holds no gradebook.csv" in empty.output, empty.output


# -- the page in a browser ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def page(graded, tmp_path_factory):
    path = tmp_path_factory.mktemp("class-html") / "class.html"
    html = (graded["out"] / "class.html").read_text(encoding="utf-8")
    path.write_text(html.replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    return path


@pytest.mark.grading  # the class is graded by a real grade-all (the `graded` fixture)
@pytest.mark.parametrize("width", [PHONE, DESKTOP])
def test_the_class_page_fits_the_window_with_every_histogram_shown(browser, page, width):  # noqa: F811
    measured = measure(browser, page, width)
    assert measured["width"] == width and measured["scrollWidth"] <= width, f"the page scrolls sideways: {measured}"
    assert measured["wider"] == [], f"expected no element wider than {width} px: {measured['wider']}"
    assert measured["viewport"] == "width=device-width, initial-scale=1" and measured["lang"] == "en"
    assert len(measured["images"]) == 6, f"expected the totals' and five modules' histograms: {measured['images']}"
    for image in measured["images"]:
        assert image["loaded"] and 0 < image["shown"] <= width, image
        assert image["alt"].startswith("Histogram of the "), image["alt"]


# -- hostile reports ---------------------------------------------------------------------------------------
def _row(sub_id, status="graded"):
    return gradebook.Row(sub_id, 50.0 if status == "graded" else None, {m: 10.0 for m in gradebook.MODULES}, status,
                         1.0, "", "namespaces", "")


def test_reports_that_are_links_fifos_too_large_or_not_the_kits_are_named_never_followed(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    names = ["link", "fifo", "large", "garbage", "shape"]
    gradebook.write_gradebook(out, {gradebook.row_key(n): _row(n) for n in names})
    for name in names:
        (out / name).mkdir()
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"tests": [{"name": "attention: SECRET", "tags": ["attention"], "status": "failed",
                                             "output": "Likely bug: SECRET."}]}))
    (out / "link" / "results.json").symlink_to(secret)
    os.mkfifo(out / "fifo" / "results.json")  # opened, it would hang the page
    with open(out / "large" / "results.json", "wb") as fh:
        fh.truncate(classpage.MAX_REPORT + 1)  # sparse: costs no disk
    (out / "garbage" / "results.json").write_text("{ not json")
    (out / "shape" / "results.json").write_text(json.dumps({"tests": [{"name": 3}]}))
    page, table = classpage.write(out)
    text = page.read_text(encoding="utf-8") + table.read_text(encoding="utf-8")
    assert "SECRET" not in text, "expected the link never followed"
    got = {r["ids"]: r["item"] for r in csv.DictReader(io.StringIO(table.read_text(encoding="utf-8")))
           if r["section"] == "unreadable report"}
    assert sorted(got) == sorted(names), got
    assert "symbolic link" in got["link"] and "FIFO" in got["fifo"] and "limit" in got["large"], got
    assert "not JSON" in got["garbage"] and "check 1" in got["shape"], got
