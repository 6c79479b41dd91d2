"""The corpus: every planted bug loses points in its own module, every correct style scores 100.

The cases are data (`tests/corpus/submissions.toml`): each is the reference
solution with a few textual patches. Adding a case is adding one entry.
A bug's report prints exactly the "Likely bug" diagnoses its `diagnosis`
lists (none when it lists none): a hint is shown only where the evidence
supports it; a correct style gets no message at all.
"""
import pytest
import torch

from autograder import MODULES, PARTS
from autograder.grade import diagnose  # the machinery: match, raised_like
from autograder.grade.engine import grade
from autograder.graders.common import params_of, random_mask, randn
from parts.attention import diagnose as attention_dx  # each part's mistakes are in its folder
from parts.mha import diagnose as mha_dx
from solutions import attention as ref_attention
from solutions import mha as ref_mha
from tests.conftest import SOLUTIONS
from tests.corpus import CorpusError, course_of, load_corpus, materialize

pytestmark = pytest.mark.grading  # every test here grades or starts student processes

CORPUS = load_corpus()
MAX_LINES = 60  # the text report of a single fault, all of it: one message per cause


def graded(case, tmp_path, servers):
    """The report of `case`, graded as its part is handed out: with no course file, or for a case of an optional
    part under a course file that lists it beside the five (tests.corpus.course_of)."""
    report = grade(materialize(case, tmp_path / case.id, SOLUTIONS), call_timeout=case.call_timeout or 5.0,
                   servers=servers, course=course_of(case))
    assert report.status == "graded", report.error
    assert not [t for t in report.tests if t.grader_error], [t.message for t in report.tests if t.grader_error]
    return report


@pytest.mark.parametrize("case", CORPUS["bug"] + CORPUS["hostile"], ids=lambda c: c.id)
def test_planted_bug_loses_points_in_its_own_module_only(case, tmp_path, warm_servers):
    report = graded(case, tmp_path, warm_servers)
    assert report.execution_time < 90, f"{case.id} took {report.execution_time:.0f} s to grade"
    modules = report.modules()
    earned, available = modules[case.module]
    assert earned < available, f"{case.id} ({case.description}) lost no points in {case.module}"
    elsewhere = [f"{t.module}/{t.id}" for t in report.failed() if t.module != case.module]
    assert sorted(elsewhere) == sorted(case.also_fails), (
        f"{case.id} also failed {elsewhere} (expected {list(case.also_fails) or 'none'})")
    others = {m: s for m, s in modules.items() if m != case.module and s[0] != s[1]}
    assert not others or case.also_fails, f"{case.id} also lost points in {others}"
    for t in report.failed():
        assert t.message, t.id
    internal = [f"{t.module}/{t.id}: {t.message}" for t in report.tests
                if any(name in t.message for name in ("RemoteModule", "autograder.", " object at 0x"))]
    assert not internal, f"{case.id}: a name from the kit's internals reaches the student:\n" + "\n".join(internal)
    text = report.to_text()
    assert len(text.splitlines()) <= MAX_LINES, (
        f"{case.id}: a report of {len(text.splitlines())} lines for one fault (at most {MAX_LINES}):\n{text}")
    printed = likely_bugs(report)
    assert printed == set(case.diagnosis), (
        f"{case.id} ({case.description}): diagnoses printed {sorted(printed)}, expected {sorted(case.diagnosis)}"
        + "".join(f"\n  {t.module}/{t.id}: {t.message}" for t in report.tests if t.message))


def test_a_loop_that_recomputes_the_whole_prefix_earns_no_speed_points(tmp_path, warm_servers):
    """kvcache: decoding by a full causal pass over the prefix for each token gives the right values, and earns
    none of the speed check's points (T full passes against the reference's T full passes: no faster)."""
    case = next(c for c in CORPUS["bug"] if c.id == "kvcache-prefix-loop")
    report = graded(case, tmp_path, warm_servers)
    speed = [t for t in report.tests if t.module == "kvcache" and t.aspect == "speedup"]
    assert speed and all(t.status == "failed" for t in speed), [(t.id, t.status, t.message) for t in speed]
    values = [t for t in report.tests if t.module == "kvcache" and t.id == "test_decoding_equals_full_causal_pass"]
    assert values and all(t.status == "passed" for t in values), [(t.id, t.status, t.message) for t in values]


def likely_bugs(report):
    """The "Likely bug: ..." diagnoses of a report's messages, without the prefix and the final period."""
    prefix = "Likely bug: "
    return {line[len(prefix):].removesuffix(".") for t in report.tests for line in t.message.splitlines()
            if line.startswith(prefix)}


@pytest.mark.parametrize("case", CORPUS["alternative"], ids=lambda c: c.id)
def test_correct_alternative_style_scores_100(case, tmp_path, warm_servers):
    report = graded(case, tmp_path, warm_servers)
    failed = [f"{t.module}/{t.id}: {t.message}" for t in report.failed()]
    assert not failed, f"{case.id} ({case.description}):\n" + "\n".join(failed)
    course = course_of(case)
    assert report.score == (100 if course is None else course.total)  # an optional part's: out of 111
    noted = [f"{t.module}/{t.id}: {t.message}" for t in report.noted()]
    assert not noted, f"{case.id} ({case.description}) is correct, yet:\n" + "\n".join(noted)


def test_corpus_covers_the_required_bugs():
    assert len(CORPUS["bug"]) >= 20
    modules = {c.module for c in CORPUS["bug"]}
    assert set(MODULES) <= modules <= set(PARTS), f"expected planted bugs in every part handed out, found {modules}"


HANG = """[[hostile]]
id = "hangs"
module = "masks"
description = "loops"
{extra}
[[hostile.patch]]
file = "masks.py"
find = "x"
replace = "y"
"""


@pytest.mark.parametrize("value", ["0", "-1", "true", '"2"'])
def test_a_call_timeout_that_is_not_a_positive_number_is_a_corpus_error(tmp_path, value):
    path = tmp_path / "submissions.toml"
    path.write_text(HANG.format(extra=f"call_timeout = {value}"))
    with pytest.raises(CorpusError, match="call_timeout must be a positive number of seconds"):
        load_corpus(path)


def test_a_case_without_call_timeout_gets_the_suites_default_and_one_with_it_its_own(tmp_path):
    path = tmp_path / "submissions.toml"
    path.write_text(HANG.format(extra=""))
    assert load_corpus(path)["hostile"][0].call_timeout is None
    path.write_text(HANG.format(extra="call_timeout = 2"))
    assert load_corpus(path)["hostile"][0].call_timeout == 2.0


MODULE_CASES = [  # the graders' modules and inputs (parts/mha/test_mha.py)
    ("CausalAttention", (3, 4, 6), (2, 6, 3)),
    ("CausalAttention", (8, 4, 10, 0.0, True), (3, 7, 8)),
    ("StackedMultiHeadAttention", (5, 3, 8, 0.0, 4), (2, 7, 5)),
    ("MultiHeadAttention", (3, 4, 6, 0.0, 2), (2, 6, 3)),
    ("MultiHeadAttention", (8, 12, 10, 0.0, 3, True), (3, 7, 8)),
    ("MultiHeadAttention", (5, 12, 8, 0.0, 4), (2, 7, 5)),
]


@pytest.mark.parametrize("name, args, shape", MODULE_CASES, ids=lambda v: str(v))
def test_module_diagnoses_name_their_own_mistake_and_never_the_reference(name, args, shape):
    """Each wiring mistake of diagnose.module_variants, run on the graders' inputs, is named when its output comes
    back (with the others that give the same output there, if any); the reference's own output is named never."""
    torch.manual_seed(0)
    module = getattr(ref_mha, name)(*args).eval()
    x = randn(*shape)
    variants = mha_dx.module_variants(name, params_of(module), x, args[4] if len(args) > 4 else None)
    assert len(variants) >= 8, sorted(variants)
    with torch.no_grad():
        assert diagnose.match(module(x), variants) is None
    for wrong, value in variants.items():
        assert wrong in diagnose.match(value, variants), wrong


@pytest.mark.parametrize("mask", [False, True])
def test_attention_diagnoses_name_their_own_mistake(mask):
    """Likewise for attention_dx.attention_variants on the inputs of the attention graders' compare_cases (a mistake
    that changes nothing on an input, a symmetric mask transposed, is no evidence there: it names nothing)."""
    for lead, L, S, d_k, d_v in [((), 2, 2, 2, 2), ((3,), 4, 4, 8, 8), ((2,), 3, 5, 4, 6), ((2, 3), 5, 7, 8, 3)]:
        q, k, v = randn(*lead, L, d_k), randn(*lead, S, d_k, seed=1), randn(*lead, S, d_v, seed=2)
        m = random_mask(*lead, L, S, seed=7) if mask else None
        out, weights = ref_attention.scaled_dot_product_attention(q, k, v, mask=m)
        variants = attention_dx.attention_variants(q, k, v, m)
        for slot, expected in ((0, out), (1, weights)):
            values = {n: pair[slot] for n, pair in variants.items()}
            for wrong, value in values.items():
                if not (value.shape == expected.shape and torch.allclose(value, expected, equal_nan=True)):
                    assert wrong in diagnose.match(value, values, expected=expected), (lead, wrong)


def test_a_coarse_tolerance_names_the_nearest_mistake_not_every_one_within_it():
    """In bfloat16 (atol 4e-2) the mask never applied and the blocked scores filled with -1e-9 both lay within the
    tolerance of each other's output (0.03 apart), and the report named the fill for a mask never applied. The
    evidence names the nearest mistake, and both only where they agree to rounding."""
    base = torch.tensor([[1.0, 0.0], [0.2561, 0.7439]])  # (L, S) weights
    variants = {"the tiny fill": base + torch.tensor([[0.0, 0.0], [0.0306, -0.0306]]), "the mask never applied": base}
    got = base + 0.002  # bfloat16's rounding of the mask never applied
    assert diagnose.match(got, variants, atol=4e-2) == "the mask never applied"
    assert diagnose.match(got, {**variants, "its twin": base + 1e-3}, atol=4e-2) == (
        "the mask never applied (or, giving the same output here: its twin)")
    assert diagnose.match(got, variants, atol=1e-4) is None  # in float32 neither is within the tolerance


def test_an_error_names_a_mistake_only_when_that_mistake_raises_exactly_that_error():
    """attention_dx.attention_errors: the mistakes that raise on the inputs (a mask transposed when L != S, dropout
    applied to the output) are named by their exact error, and another error, or the right type with another
    message, names nothing."""
    from autograder.sandbox.errors import StudentError

    q, k, v = randn(2, 3, 4), randn(2, 5, 4, seed=1), randn(2, 5, 6, seed=2)  # L = 3, S = 5, d_v = 6
    mask, pattern = random_mask(2, 3, 5), torch.full((2, 3, 5), 2.0)
    errors = attention_dx.attention_errors(q, k, v, mask, pattern)
    assert set(errors.values()) == {attention_dx.TRANSPOSED_MASK, attention_dx.DROPOUT_ON_OUTPUT}
    hint = diagnose.raised_like(lambda: errors)

    def raised(exc_type, detail):
        return StudentError("", "raised", exc_type, (exc_type, "Exception"), "", detail)

    for error, name in errors.items():
        assert hint(raised(*error.split(": ", 1))) == name
    transposed = next(e for e, n in errors.items() if n == attention_dx.TRANSPOSED_MASK)
    assert hint(raised("ValueError", transposed.split(": ", 1)[1])) is None
    assert hint(raised("RuntimeError", "The size of tensor a (7) must match the size of tensor b (9)")) is None
    assert attention_dx.attention_errors(q, k, v) == {}  # nothing raises without a mask or a dropout
    q, k, v = randn(2, 3, 4, 8), randn(2, 3, 4, 8, seed=1), randn(2, 3, 4, 8, seed=2)  # (B, H, T, d_k)
    mask = random_mask(4, 4)  # (T, T): mask.unsqueeze(1), (4, 1, 4), does not broadcast with (2, 3, 4, 4)
    assert list(attention_dx.attention_errors(q, k, v, mask).values()) == [attention_dx.UNSQUEEZED_MASK]



def test_a_fill_of_minus_1e9_is_named_by_the_error_it_raises_in_float16_only():
    """Issue 48: `masked_fill(mask == 0, -1e9)` (the seed's) raises in float16, whose numbers stop at 65504; that
    exact error names the fill and its fix. In float32 and bfloat16 the fill raises nothing: nothing is named."""
    q, k, v = randn(2, 3, 4), randn(2, 5, 4, seed=1), randn(2, 5, 6, seed=2)
    mask = random_mask(2, 3, 5)
    errors = attention_dx.attention_errors(*(t.half() for t in (q, k, v)), mask)
    error = next(e for e, n in errors.items() if n == attention_dx.HALF_FILL)
    try:
        (q.half() @ k.half().transpose(-2, -1)).masked_fill(mask == 0, -1e9)  # the student's spelling of it
    except RuntimeError as exc:
        assert f"RuntimeError: {exc}" == error
    else:
        raise AssertionError("a fill of -1e9 raised nothing in float16")
    assert "float('-inf')" in attention_dx.HALF_FILL and "torch.finfo(scores.dtype).min" in attention_dx.HALF_FILL
    for dtype in (torch.float32, torch.bfloat16):
        named = attention_dx.attention_errors(*(t.to(dtype) for t in (q, k, v)), mask).values()
        assert attention_dx.HALF_FILL not in named, dtype


TABLE_FAULTS = ["positional-sin-cos-concatenated", "positional-sin-cos-swapped", "positional-exponent-i",
                "positional-float64-table"]


@pytest.mark.parametrize("case", [c for c in CORPUS["bug"] if c.id in TABLE_FAULTS], ids=lambda c: c.id)
def test_a_fault_of_the_table_costs_the_sinusoidal_encoding_checks_only(case, tmp_path, warm_servers):
    # PositionalEncoding holds and adds the student's own table: right given it, its checks pass with a note
    report = graded(case, tmp_path, warm_servers)
    failed = sorted(t.id for t in report.failed())
    assert failed and all(i.startswith("test_encoding_") for i in failed), (
        f"{case.id}: expected only sinusoidal_encoding checks to fail, failed {failed}")
    noted = [t for t in report.noted() if t.id.startswith("test_module_")]
    assert noted and all("your sinusoidal_encoding" in t.message for t in noted), [t.message for t in noted]
