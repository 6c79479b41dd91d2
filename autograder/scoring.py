"""One set of numbers for every format: the figures of a grading, on the promised scale of 100.

Every output (text, JSON, Gradescope, GitHub Classroom, JUnit, feedback,
the gradebook, the nbgrader gradebook) shows the figures computed here, and
only these, so that they agree to the cent:

- A module's maximum is the sum of its checks' points, CUDA checks included
  (attention 23, heads 15, masks 8, mha 40, positional 14: 100 in all).
- Where some checks of a module are not graded (no CUDA on this machine),
  the module's figure is earned / available x its maximum: the checks that
  ran count for the skipped ones, so a correct submission gets 23/23. Each
  check's points are scaled by the same factor.
- A module none of whose checks ran here is not graded (shown as such); the
  other modules' maxima are then scaled up so that they still add up to 100.
  (It cannot happen with the kit's graders, where every module has checks
  that run on a CPU; it can with a `select`ed subset of the checks.)
- Every figure is rounded once, to 2 decimals, half up (decimal.Decimal).
  The total is the sum of the rounded module figures; each check's figure
  is its module's, apportioned by the largest remainder, so that the checks
  add up to their module and the modules to the total exactly, in every
  format.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction

from autograder import MODULES, PARTS

SCALE = 100  # the total is out of this many points


def fmt(value) -> str:
    """A figure as every format writes it: 59.96, 100, 4.5 (no float noise, no trailing zeros)."""
    if value is None:
        return "-"
    d = value if isinstance(value, Decimal) else Decimal(str(value))
    text = format(d.normalize(), "f")
    return "0" if text in ("-0", "") else text


def _points(t) -> Fraction:
    return Fraction(str(t.points))


def _half_up(x: Fraction) -> int:
    """x (in cents, >= 0) rounded to a whole cent, half up."""
    return math.floor(x + Fraction(1, 2))


def _cents(n: int) -> Decimal:
    return Decimal(n).scaleb(-2)


def apportion(exact: list[Fraction], target: int) -> list[int]:
    """Whole numbers, each the floor or the ceiling of its `exact` share, adding up to `target` (the largest
    remainders get the extra units; ties go to the earlier share)."""
    if not exact:
        return []
    parts = [math.floor(x) for x in exact]
    diff = target - sum(parts)
    order = sorted(range(len(exact)), key=lambda i: (-(exact[i] - parts[i]), i))
    i = 0
    while diff > 0:  # only more than len(exact) when the target is not near the exact sum
        parts[order[i % len(order)]] += 1
        diff -= 1
        i += 1
    for j in reversed(order):  # a target below the floors' sum (never with half-up targets): take back
        if diff >= 0:
            break
        take = min(parts[j], -diff)
        parts[j] -= take
        diff += take
    return parts


@dataclass
class ModuleFigure:
    name: str
    score: Decimal | None  # None: not graded here (every check skipped, or none in the report)
    max_score: Decimal | None
    points: Fraction = Fraction(0)  # the sum of its checks' points, as the graders mark them
    skipped_points: Fraction = Fraction(0)

    @property
    def graded(self) -> bool:
        return self.score is not None


@dataclass
class Figures:
    total: Decimal
    modules: dict = field(default_factory=dict)  # name -> ModuleFigure, in the contract's order
    checks: list = field(default_factory=list)  # per check, in the report's order: (score, max_score) Decimals
    skipped_checks: int = 0
    skipped_points: Fraction = Fraction(0)
    skipped_reasons: tuple = ()

    @property
    def max_total(self) -> Decimal:
        return sum((m.max_score for m in self.modules.values() if m.graded), Decimal(0))

    def skipped_note(self) -> str:
        """What was not graded here and how it counts, in one line ("" when everything ran)."""
        if not self.skipped_checks:
            return ""
        cuda = all("CUDA" in r for r in self.skipped_reasons)
        what = f"{fmt(Decimal(self.skipped_points.numerator) / self.skipped_points.denominator)} " \
               f"{'CUDA ' if cuda else ''}point{'s' if self.skipped_points != 1 else ''}"
        note = f"{what} not graded on this machine; they count as the other checks of their module"
        ungraded = [m.name for m in self.modules.values() if not m.graded and m.points]
        if ungraded:
            note += f" ({', '.join(ungraded)}: not graded at all; the other modules count for its points)"
        return note


def figures(tests, parts=None) -> Figures:
    """The figures of a grading's checks (objects with module, points and status: passed, failed, skipped).

    `parts`: a course file's parts (autograder.course: part -> worth), or None for the kit's. With them, the
    modules are those parts, each module's maximum is its worth (not the sum of its checks' points: a check
    that does not count there counts as the others of its module), and the total is out of their sum."""
    tests = list(tests)
    known = list(MODULES) if parts is None else list(parts)
    names = known + sorted({t.module for t in tests} - set(known))
    by_module = {m: [i for i, t in enumerate(tests) if t.module == m] for m in names}
    nominal = {m: sum((_points(tests[i]) for i in ix), Fraction(0)) for m, ix in by_module.items()}
    available = {m: sum((_points(tests[i]) for i in ix if tests[i].status != "skipped"), Fraction(0))
                 for m, ix in by_module.items()}
    graded = [m for m in names if available[m] > 0]
    worth, scale = nominal, SCALE
    if parts is not None:
        worth = {m: Fraction(str(parts[m])) if m in parts else nominal[m] for m in names}
        scale = sum((Fraction(str(w)) for w in parts.values()), Fraction(0))
    whole = sum((worth[m] for m in graded), Fraction(0))
    max_cents = dict(zip(graded, apportion([worth[m] * scale * 100 / whole for m in graded], int(scale * 100))))
    checks = [(Decimal(0), Decimal(0))] * len(tests)
    modules, total = {}, 0
    for m in names:
        ix = by_module[m]
        skipped = sum((_points(tests[i]) for i in ix if tests[i].status == "skipped"), Fraction(0))
        if m not in max_cents:
            if m in known or ix:
                modules[m] = ModuleFigure(m, None, None, nominal[m], skipped)
            continue
        top = max_cents[m]
        share = {i: _points(tests[i]) * top / available[m] for i in ix if tests[i].status != "skipped"}
        passed = [i for i in share if tests[i].status == "passed"]
        others = [i for i in share if tests[i].status != "passed"]
        earned = _half_up(sum((share[i] for i in passed), Fraction(0)))
        for group, target in ((passed, earned), (others, top - earned)):
            for i, cents in zip(group, apportion([share[i] for i in group], target)):
                checks[i] = (_cents(cents) if tests[i].status == "passed" else Decimal(0), _cents(cents))
        modules[m] = ModuleFigure(m, _cents(earned), _cents(top), nominal[m], skipped)
        total += earned
    skipped_tests = [t for t in tests if t.status == "skipped"]
    return Figures(_cents(total), modules, checks, len(skipped_tests), sum((_points(t) for t in skipped_tests),
                                                                             Fraction(0)),
                   tuple(sorted({str(t.message) for t in skipped_tests})))


# -- nothing to grade ---------------------------------------------------------------------------------------
#: The whole message of each check of a module that the submission does not hold (no file, no notebook): the
#: report says once which modules those are, and where their code goes (GradeReport.missing).
NOT_HANDED_IN = "not handed in"
_NUMBERS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def count_word(n: int) -> str:
    """A count as prose: "five" (a figure from 10 on)."""
    return _NUMBERS[n] if 0 <= n < len(_NUMBERS) else str(n)


def listed(names) -> str:
    """Names as prose: "a, b and c"."""
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


#: The notebooks of the parts handed out with no course file, as a range: "01_attention.ipynb ... 05_positional.ipynb"
#: (a notebook's number is its part's place in autograder.PARTS).
NOTEBOOK_RANGE = " ... ".join(dict.fromkeys(f"{PARTS.index(m) + 1:02d}_{m}.ipynb" for m in (MODULES[0], MODULES[-1])))


def looked_for(modules=MODULES) -> str:
    """What a grading looked for, the modules of the parts handed out (default: with no course file) and their
    notebooks: "the five modules attention.py, ... and positional.py, or the notebooks 01_attention.ipynb ...
    05_positional.ipynb"."""
    notebooks = " ... ".join(dict.fromkeys(f"{PARTS.index(m) + 1:02d}_{m}.ipynb" for m in (modules[0], modules[-1])))
    return (f"the {count_word(len(modules))} module{'s' if len(modules) != 1 else ''} "
            f"{listed(f'{m}.py' for m in modules)}, or the notebook{'s' if len(modules) != 1 else ''} {notebooks}")


LOOKED_FOR = looked_for()


def nothing_to_grade(tests, parts=MODULES) -> str:
    """Why a grading found no student work, or "" when it found some.

    The evidence is the graders' own, recorded on the trusted side: no check
    passed, and every check that ran failed because its module is missing
    from the submission or still raises NotImplementedError (the template's
    stubs, as released). A student's implementation, however wrong, fails
    in some other way somewhere, and is graded. `parts`: the parts handed out (a course file's, or
    autograder.MODULES), the modules the message says were looked for.
    """
    ran = [t for t in tests if t.status != "skipped"]
    if not ran or any(t.status == "passed" for t in ran):
        return ""
    missing, stubs = [], []
    for module in dict.fromkeys(t.module for t in ran):
        messages = [str(t.message) for t in ran if t.module == module]
        if all(m == NOT_HANDED_IN or "is missing from the submission" in m for m in messages):
            missing.append(module)
        elif all("NotImplementedError" in m for m in messages):
            stubs.append(module)
        else:
            return ""
    found = []
    if missing:
        where = looked_for(tuple(parts))
        found.append(f"{', '.join(f'{m}.py' for m in missing)} not found (looked for {where})"
                     if stubs else f"no module found (looked for {where})")
    if stubs:
        found.append(("every function still raises NotImplementedError: the untouched template" if not missing
                      else f"{', '.join(stubs)}: every function still raises NotImplementedError (the untouched "
                           "template)"))
    return "; ".join(found)
