"""An optional part handed out by a course file is graded everywhere: the sixth part, kvcache (decoding with a KV
cache, docs/instructor/kvcache.md), end to end.

With a course file that lists it beside the five at their usual worths (`kvcache = 11`, the sum of its graders'
points), the assignment is out of 111: the reference (solutions/) grades 111/111 with kvcache 11/11, the untouched
template (the kit's template and the kvcache stub) 0, and a class run writes a kvcache column whose figures are
each report's, and the class page shows the part. With no course file nothing of it is graded (tests/test_intake.py
holds that its files are then helper files, as before).
"""
import csv
import shutil
from decimal import Decimal

import pytest

from autograder import MODULES
from autograder.classrun import classpage, gradebook, run
from autograder.course import parse
from autograder.grade.engine import grade
from autograder.paths import PARTS_DIR
from autograder.release import render_stub
from autograder.scoring import fmt
from tests.conftest import SOLUTIONS, TEMPLATE
from tests.corpus import load_corpus, materialize

pytestmark = pytest.mark.grading  # every test here grades

#: The course file of docs/instructor/kvcache.md: the five parts at their worths in the kit, and kvcache.
KVCACHE_COURSE = parse(b"""[parts]
attention = 23
heads = 15
masks = 8
mha = 40
positional = 14
kvcache = 11
""", "kvcache.toml")
PARTS = (*MODULES, "kvcache")
BUG = "kvcache-mask-on-one-row"  # a planted bug of the part (parts/kvcache/corpus.toml): a few of its points lost


def _template(folder):
    """The untouched template of the course: the kit's student_template/ and the kvcache stub, rendered from its
    solution as the release renders every stub."""
    shutil.copytree(TEMPLATE, folder)
    source = (PARTS_DIR / "kvcache" / "solution.py").read_text(encoding="utf-8")
    (folder / "kvcache.py").write_text(render_stub(source, "parts/kvcache/solution.py"), encoding="utf-8")
    return folder


def _reference(folder):
    """The reference submission, the six modules of solutions/ (no package file)."""
    folder.mkdir(parents=True)
    for part in PARTS:
        shutil.copyfile(SOLUTIONS / f"{part}.py", folder / f"{part}.py")
    return folder


def test_the_reference_grades_full_marks_kvcache_included(warm_servers):
    report = grade(SOLUTIONS, course=KVCACHE_COURSE, servers=warm_servers)
    assert report.status == "graded", report.error
    modules = report.modules()
    assert modules["kvcache"] == (11, 11), report.to_text()
    assert report.score == 111 and not report.missing, report.to_text()


def test_the_untouched_template_grades_0_its_kvcache_stub_read_as_the_template(tmp_path, warm_servers):
    report = grade(_template(tmp_path / "template"), course=KVCACHE_COURSE, servers=warm_servers)
    assert report.status == "empty" and report.score == 0, report.to_text()
    assert "kvcache" not in report.missing, report.missing  # handed in (the stub), not missing
    kvcache = [t for t in report.tests if t.module == "kvcache" and t.status != "skipped"]
    assert kvcache and all("NotImplementedError" in t.message for t in kvcache), [t.message for t in kvcache]


@pytest.fixture(scope="module")
def kvcache_class(tmp_path_factory, warm_servers):
    """A small class graded under the course file: the reference, the untouched template and a planted kvcache
    bug; (its folder, the output folder, its rows)."""
    tmp = tmp_path_factory.mktemp("kvcache-class")
    classroom = tmp / "class"
    _reference(classroom / "reference")
    _template(classroom / "template")
    case = next(c for c in load_corpus()["bug"] if c.id == BUG)
    materialize(case, classroom / "bug", SOLUTIONS)
    out = tmp / "out"
    rows = run.grade_all(classroom, out, jobs=1, course=KVCACHE_COURSE)
    return classroom, out, rows


def test_a_class_run_writes_a_kvcache_column_whose_figures_are_each_reports(kvcache_class, warm_servers):
    classroom, out, rows = kvcache_class
    with open(out / gradebook.GRADEBOOK, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        header, written = reader.fieldnames, {r["id"]: r for r in reader}
    assert header[:9] == ["id", "total", *PARTS, "status"], header
    assert set(written) == {"reference", "template", "bug"}, written
    for sub, row in written.items():
        figures = grade(classroom / sub, course=KVCACHE_COURSE, servers=warm_servers).figures()
        assert row["kvcache"] == fmt(figures.modules["kvcache"].score), (sub, row, figures.modules["kvcache"])
        assert Decimal(row["total"]) == sum(Decimal(row[m]) for m in PARTS), (sub, row)
    assert (written["reference"]["kvcache"], written["template"]["kvcache"]) == ("11", "0"), written
    assert 0 < Decimal(written["bug"]["kvcache"]) < 11, written["bug"]


def test_the_class_page_shows_the_kvcache_part(kvcache_class):
    _, out, _ = kvcache_class
    summary = classpage.read_class(out)
    assert summary.parts == PARTS and summary.scale() == 111, (summary.parts, summary.scale())
    page, table = classpage.write(out)
    assert "kvcache" in page.read_text(encoding="utf-8") and "kvcache" in table.read_text(encoding="utf-8")
