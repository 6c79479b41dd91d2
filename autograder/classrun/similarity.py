"""Submissions whose code is unusually alike: the library behind `grader_cli.py similarity CLASS -o OUT`.

Similarity is evidence for a person to judge, never a verdict: two students may share code because they
worked from the same lecture, the same tutorial or the same answer on a forum, or because one copied the
other. The output ranks the pairs and shows the shared regions side by side, so that a person can look.

How. Each submission is taken in exactly as grading takes it (autograder.submission.take.taken: the kit's intake,
never following a link, with its caps; a notebook becomes its module: imports, functions, classes, constants),
and each of its five modules is fingerprinted by copydetect (https://github.com/blingenf/copydetect, MIT):
Pygments' tokens with every name made one letter (V for variables and attributes, F for functions, O for
classes, S for strings; comments and whitespace dropped), so a copy whose names were changed is still a copy;
then winnowing (Schleimer, Wilkerson and Aiken, SIGMOD 2003), as MOSS does: of every run of NOISE filtered
characters a hash, and of every window of them the smallest, so that any shared run of GUARANTEE characters or
more is found. Left out, as MOSS leaves them out:

* the boilerplate: every run of NOISE characters of the student template (`student_template/`: its .py stubs
  and its released notebooks, each taken in as a submission is, so that the notebooks' given code is what
  intake makes of it) and of any other folder given (`--boilerplate`);
* common code: a fingerprint found in more than `max_share` submissions (default COMMON, MOSS's -m) is what
  many students write alike, not evidence about two of them.

Modules are compared with the same module of the other submission (attention with attention...). A pair's
similarity, for each of the two, is the share of that submission's fingerprinted code (what is left once the
boilerplate and the common code are out) that the other holds too (copydetect's own measure, summed over the
modules); pairs are ranked by the mean of the two, as JPlag ranks by default, and the shared characters.

Bounded for a class of 1,000. Time and memory grow with the class, never with its square: each submission is
fingerprinted once (its hashes kept as one small array per module, its source at most MAX_CHARS characters a
module); the pairs are found through an index of the fingerprints, where a fingerprint counts only while it
is in at most `max_share` submissions (so each adds at most max_share * (max_share - 1) / 2 pair counts); only
the CANDIDATES pairs that share the most fingerprints are compared in full, through a cache of at most CACHE
fingerprinted modules. benchmarks/similarity_scale.py measures it.
"""
from __future__ import annotations

import collections
import csv
import io
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from autograder import MODULES
from autograder.files import SHARED, write_atomic
from autograder.classrun import gradebook
from autograder.submission.take import SubmissionError, taken
from autograder.paths import KIT
from autograder.report.html import STYLE, document, esc
from autograder.report.model import csv_cell, safe_line
from autograder.submission import intake
from autograder.submission.notebooks import handing_out

NOISE = 25  # filtered characters of a fingerprint: shorter shared runs are noise (copydetect's default)
GUARANTEE = 35  # a shared run this long or longer is always found (window of GUARANTEE - NOISE + 1 hashes)
COMMON = 10  # a fingerprint in more submissions than this is common code, not evidence (MOSS's -m default)
MAX_CHARS = 200_000  # characters of one module fingerprinted (the kit's largest module is ~8,000)
CANDIDATES = 200  # pairs compared in full: those that share the largest share of their fingerprints
CACHE = 512  # fingerprinted modules kept while the candidates are compared
TOP = 50  # pairs reported, at most
MIN_SIMILARITY = 0.1  # a pair is reported when the mean of its two similarities is at least this
MIN_SHARED = 2 * GUARANTEE  # filtered characters two submissions must share to be reported at all
MIN_FINGERPRINTS = 2  # fingerprints a pair must share to be compared in full (MIN_SHARED characters hold more)
MIN_MOSTLY_COMMON = 20  # fingerprints of its own a submission needs before "mostly common code" is said of it
CONTEXT = 2  # lines shown around each shared region
TEMPLATE = KIT / "student_template"

EVIDENCE = ("Similarity is evidence for a person to judge, not a verdict. Students may write alike because they "
            "followed the same lecture, tutorial or worked example, or because one copied the other: only a "
            "person who reads the shared code, and hears the students, can tell.")
COLUMNS = ["rank", "id_a", "id_b", "similarity_a", "similarity_b", "shared_chars", "modules"]


def _detector():
    """Import copydetect (it imports pyplot, which then needs no display: Agg)."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    import copydetect

    return copydetect


# -- reading submissions, as grading reads them ---------------------------------------------------------------
def _modules_of(folder: Path, parts=MODULES) -> dict[str, str]:
    """{module: its source, at most MAX_CHARS characters} of a folder that intake made (autograder.submission.
    take.taken): the modules of the parts handed out (`parts`: a course file's, or the kit's five), each read as
    intake reads a file (a regular file, never through a link)."""
    found = {}
    for module in parts:
        try:
            data = intake.read_regular(folder / f"{module}.py", intake.MAX_FILE[".py"], f"{module}.py")
        except intake.Refused:
            continue  # not handed in, or left out by intake (its notes say why)
        found[module] = data.decode("utf-8", "replace")[:MAX_CHARS]
    return found


def read_submission(path: Path, max_unzipped=None, parts=MODULES) -> dict[str, str]:
    """The modules of one class-folder entry, as grading takes them in (under a course file, its parts: `parts`);
    SubmissionError when intake refuses it or when the entry is neither a folder nor a regular file (a link is
    never followed, a FIFO never opened)."""
    mode = os.lstat(path).st_mode
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        raise SubmissionError(f"{safe_line(Path(path).name)} is {intake.kind_of(mode)}: not read")
    with taken(path, max_unzipped, parts) as got:
        return _modules_of(got.folder, parts)


def boilerplate_sources(folders, parts=MODULES) -> list[str]:
    """The code given to every student, from each folder of `folders` (the student template by default): its .py
    stubs, and each of its notebooks taken in alone, as a submission of that notebook (so that its code is what
    intake makes of a student's copy of it); `parts`: the parts handed out (a course file's, or the kit's five)."""
    sources = []
    for folder in folders:
        folder = Path(folder)
        try:
            with taken(folder, parts=parts) as got:
                sources += _modules_of(got.folder, parts).values()
        except SubmissionError:
            pass
        with handing_out(parts):  # a file stands for a module of the parts handed out (the name rule)
            entries = sorted(os.listdir(folder))
            notebooks = [e for e in entries if e.lower().endswith(".ipynb") and intake.module_of_file(e)]
            helpers = [e for e in entries if e.endswith(".py") and intake.module_of_file(e) is None]
        for entry in notebooks:
            try:
                with taken(folder / entry, parts=parts) as got:
                    sources += _modules_of(got.folder, parts).values()
            except (SubmissionError, OSError):
                continue
        for entry in helpers:  # .py files beside the modules (a given helper)
            if intake.is_regular(folder / entry):
                try:
                    sources.append(intake.read_regular(folder / entry, intake.MAX_FILE[".py"]).decode("utf-8",
                                                                                                        "replace"))
                except intake.Refused:
                    continue
    return sources


# -- fingerprints ----------------------------------------------------------------------------------------------
@dataclass
class Module:
    """One module as copydetect's compare_files reads a CodeFingerprint: its filtered code and the offsets back to
    its source, its winnowed hashes and where they start, the filtered characters they span (token_coverage)."""

    raw_code: str
    filtered_code: str
    offsets: object
    hashes: set
    hash_idx: dict
    token_coverage: float
    k: int = NOISE


class Fingerprints:
    """copydetect's fingerprints of modules (its tokenizer and filter, its k-gram hashes, its winnowing), less
    what no pair may count: every fingerprint that touches code given to every student (the boilerplate: not
    only its own k-grams, but every k-gram that overlaps one of them, so that the line where a student's code
    meets the template's is not shared by all), and the common ones (`common`: in more than max_share
    submissions)."""

    def __init__(self, boilerplate: list[str]):
        import numpy as np
        from copydetect.utils import filter_code, get_token_coverage, winnow

        _detector()  # copydetect, imported with the Agg backend
        self.np, self.filter, self.winnow, self.coverage = np, filter_code, winnow, get_token_coverage
        from copydetect import compare_files

        self.compare = compare_files
        found = [self.kgrams(self.filter(code, "module.py", "python")[0], NOISE) for code in boilerplate]
        self.boilerplate = np.unique(np.concatenate(found)) if found else np.array([], dtype=np.int64)
        self.common = np.array([], dtype=np.int64)

    def kgrams(self, filtered: str, k: int):
        """The hash of the k characters starting at each character of `filtered`, as copydetect's hashed_kgrams
        gives them, but the same in every process: copydetect hashes with Python's hash(), which is seeded afresh
        in each process, so which fingerprints winnowing keeps, and so a short shared region found or not, would
        change from one run to the next. Here a polynomial hash of the characters' code points, mod 2^64."""
        np = self.np
        codes = np.frombuffer(filtered.encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
        if len(codes) < k:
            return np.array([], dtype=np.int64)
        powers = np.uint64(0x100000001B3) ** np.arange(k - 1, -1, -1, dtype=np.uint64)  # FNV's prime, mod 2^64
        windows = np.lib.stride_tricks.sliding_window_view(codes, k)
        with np.errstate(over="ignore"):
            return (windows * powers).sum(axis=1, dtype=np.uint64).view(np.int64)

    def filtered(self, code: str) -> tuple[str, object]:
        """copydetect's filtered code (Pygments' tokens, names as one letter, no comments nor whitespace) and the
        offsets back to `code`: the costly step (Pygments), done once per module."""
        return self.filter(code, "module.py", "python")

    def of(self, filtered: str, offsets=None, code: str = "") -> Module:
        """The fingerprinted module: its winnowed hashes less the boilerplate's and the common ones, where they
        start, and the filtered characters they span. Without `offsets`, copydetect's slices stay in filtered
        characters (enough to measure); with them (and `code`), they are in the source's (to show)."""
        np = self.np
        every = self.kgrams(filtered, NOISE)  # the hash of the k-gram starting at each filtered character
        given = np.zeros(len(filtered) + 1, dtype=np.int64)  # filtered characters inside the boilerplate
        if len(every):
            starts = np.flatnonzero(np.isin(every, self.boilerplate))
            np.add.at(given, starts, 1)
            np.add.at(given, starts + NOISE, -1)
        inside = np.r_[0, np.cumsum(np.cumsum(given)[:-1] > 0)]  # inside[i]: given characters before i
        hashes, idx = self.winnow(every, GUARANTEE - NOISE + 1, remove_duplicates=False) if len(every) else (
            np.array([], dtype=np.int64), np.array([], dtype=np.int64))
        keep = (inside[np.minimum(idx + NOISE, len(filtered))] == inside[idx]) & ~np.isin(hashes, self.common)
        hash_idx = {}
        for h, i in zip(hashes[keep].tolist(), idx[keep].tolist()):
            hash_idx.setdefault(h, []).append(i)
        return Module(code, filtered, offsets if offsets is not None else np.array([]), set(hash_idx), hash_idx,
                      float(self.coverage(hash_idx, NOISE, len(filtered))))

    def hashes(self, filtered: str):
        """The module's distinct hashes, as one sorted array (what the index keeps of it)."""
        return self.np.array(sorted(self.of(filtered).hashes), dtype=self.np.int64)


# -- the comparison --------------------------------------------------------------------------------------------
@dataclass
class Shared:
    module: str
    slices_a: list  # [(start, end)] of the shared regions in a's source
    slices_b: list


@dataclass
class Pair:
    a: str
    b: str
    similarity_a: float  # the share of a's fingerprinted code that b holds too
    similarity_b: float
    shared_chars: int  # filtered characters of a shared with b
    shared: list = field(default_factory=list)  # Shared, per module

    @property
    def score(self) -> float:
        return (self.similarity_a + self.similarity_b) / 2


@dataclass
class Result:
    pairs: list  # Pair, ranked
    compared: list  # ids read
    left_out: dict  # id -> why it was not compared
    sources: dict  # id -> {module: source}, for the pairs shown
    max_share: int
    candidates: int  # pairs compared in full
    min_similarity: float = MIN_SIMILARITY
    timings: dict = field(default_factory=dict)
    mostly_common: list = field(default_factory=list)  # (id, share): submissions most of whose code is common code


def _slices(array) -> list:
    return sorted((int(s), int(e)) for s, e in zip(array[0], array[1])) if len(array) and len(array[0]) else []


def compare(folder: Path, *, boilerplate=(TEMPLATE,), max_share: int = COMMON, top: int = TOP,
            min_similarity: float = MIN_SIMILARITY, candidates: int = CANDIDATES, max_unzipped=None,
            progress=None, parts=MODULES) -> Result:
    """Rank the pairs of submissions of the class folder `folder` whose code is most alike (module docstring):
    at most `top` pairs, those whose mean similarity is at least `min_similarity`. `boilerplate`: folders of
    code given to every student; `max_unzipped`: intake's cap, as grade-all's; `progress(done, total)` after
    each submission read; `parts`: the modules compared, the parts handed out (a course file's, an optional part
    included; the kit's five by default)."""
    import time

    import numpy as np

    clock = time.monotonic()
    timings = {}
    prints = Fingerprints(boilerplate_sources(boilerplate, parts))
    entries = gradebook.discover(folder)
    ids, left_out = [], {}
    filtered: list[dict] = []  # per submission: {module: its filtered code} (a third of its source, or less)
    index = {m: [] for m in parts}  # module -> [(its distinct hashes, submission number)]
    for done, (sub_id, path) in enumerate(entries, 1):
        try:
            modules = read_submission(path, max_unzipped, parts)
        except (SubmissionError, OSError) as exc:
            left_out[sub_id] = str(exc)
            modules = None
        if modules is not None:
            number = len(ids)
            ids.append(sub_id)
            filtered.append({})
            for module, code in modules.items():
                filtered[number][module] = prints.filtered(code)[0]
                index[module].append((prints.hashes(filtered[number][module]), number))
        if progress:
            progress(done, len(entries))
    timings["read and fingerprint"] = time.monotonic() - clock

    clock = time.monotonic()
    n = len(ids)
    codes, common = [], []
    kept, every = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)  # each one's fingerprints: not common, all
    for module, docs in index.items():
        if not docs:
            continue
        hashes = np.concatenate([h for h, _ in docs])
        owners = np.concatenate([np.full(len(h), number, dtype=np.int64) for h, number in docs])
        order = np.lexsort((owners, hashes))  # by hash, then by submission: each group's owners ascending
        hashes, owners = hashes[order], owners[order]
        starts = np.flatnonzero(np.r_[True, hashes[1:] != hashes[:-1]])
        sizes = np.diff(np.r_[starts, len(hashes)])
        common.append(hashes[starts[sizes > max_share]])
        kept += np.bincount(owners[np.repeat(sizes, sizes) <= max_share], minlength=n)
        every += np.bincount(owners, minlength=n)
        for size in range(2, max_share + 1):  # every pair of a group's owners, one array per group size
            members = owners[starts[sizes == size][:, None] + np.arange(size)]
            first, second = np.triu_indices(size, 1)
            codes.append((members[:, first] * n + members[:, second]).ravel())
    index.clear()
    prints.common = np.unique(np.concatenate(common)) if common else np.array([], dtype=np.int64)
    found, shared = np.unique(np.concatenate(codes), return_counts=True) if codes else (np.array([]),) * 2
    # the pairs compared in full: those whose shared fingerprints are the largest share of the two submissions'
    # (the winnowed fingerprints sample the code evenly), at most `candidates` of them
    able = shared >= MIN_FINGERPRINTS
    found, shared = found[able].astype(np.int64), shared[able]
    first, second = found // max(n, 1), found % max(n, 1)
    estimate = (shared / np.maximum(kept[first], 1) + shared / np.maximum(kept[second], 1)) / 2
    best = np.argsort(-estimate, kind="stable")[:candidates]
    chosen = sorted(zip(first[best].tolist(), second[best].tolist()))
    timings["index"] = time.monotonic() - clock

    clock = time.monotonic()
    cache: collections.OrderedDict = collections.OrderedDict()

    def fingerprint(number, module):
        key = (number, module)
        if key in cache:
            cache.move_to_end(key)
            return cache[key]
        fp = cache[key] = prints.of(filtered[number][module])
        if len(cache) > CACHE:
            cache.popitem(last=False)
        return fp

    own = {}

    def coverage(number):
        """The filtered characters of a submission's own code (its fingerprints' span, past boilerplate and
        common code), all modules together."""
        if number not in own:
            own[number] = sum(fingerprint(number, m).token_coverage for m in filtered[number])
        return own[number]

    pairs = []
    for a, b in chosen:
        modules, chars_a, chars_b = [], 0.0, 0.0
        for module in parts:
            if module not in filtered[a] or module not in filtered[b]:
                continue
            fa, fb = fingerprint(a, module), fingerprint(b, module)
            if not (fa.hashes & fb.hashes):
                continue
            _, (sim_a, sim_b), _ = prints.compare(fa, fb)
            # the filtered characters of each side that the other holds too (copydetect's measure, per module)
            chars_a += float(sim_a) * fa.token_coverage
            chars_b += float(sim_b) * fb.token_coverage
            modules.append(module)
        if not modules or min(chars_a, chars_b) < MIN_SHARED:
            continue
        cov_a, cov_b = coverage(a), coverage(b)
        pair = Pair(ids[a], ids[b], min(1.0, chars_a / cov_a) if cov_a else 0.0,
                    min(1.0, chars_b / cov_b) if cov_b else 0.0, int(round(chars_a)),
                    [Shared(m, [], []) for m in modules])
        if pair.score >= min_similarity:
            pairs.append(pair)
    pairs.sort(key=lambda p: (-p.score, -p.shared_chars, p.a, p.b))
    pairs = pairs[:top]
    timings["compare"] = time.monotonic() - clock

    # the shared regions of the pairs reported, in their sources (read again, as before)
    clock = time.monotonic()
    shown = {p.a for p in pairs} | {p.b for p in pairs}
    paths = dict(entries)
    sources = {}
    for sub_id in sorted(shown):
        try:
            sources[sub_id] = read_submission(paths[sub_id], max_unzipped, parts)
        except (SubmissionError, OSError) as exc:  # changed since: shown without its code
            left_out[sub_id] = f"changed while it was compared: {exc}"
            sources[sub_id] = {}
    located = {}

    def in_source(sub_id, module):
        if (sub_id, module) not in located:
            code = sources[sub_id].get(module, "")
            text, offsets = prints.filtered(code)
            located[(sub_id, module)] = prints.of(text, offsets, code)
        return located[(sub_id, module)]

    for p in pairs:
        for s in p.shared:
            _, _, (slices_a, slices_b) = prints.compare(in_source(p.a, s.module), in_source(p.b, s.module))
            s.slices_a, s.slices_b = _slices(slices_a), _slices(slices_b)
    timings["shared regions"] = time.monotonic() - clock
    mostly = [(ids[k], 1 - kept[k] / every[k]) for k in range(n)
              if every[k] >= MIN_MOSTLY_COMMON and kept[k] < every[k] / 2]
    return Result(pairs, ids, left_out, sources, max_share, len(chosen), min_similarity, timings, mostly)


# -- the outputs -----------------------------------------------------------------------------------------------
def _percent(x: float) -> str:
    return f"{100 * x:.0f}%"


def to_csv(result: Result) -> str:
    """similarity.csv: the ranked pairs (COLUMNS), the similarities as fractions of 1."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(COLUMNS)
    for rank, p in enumerate(result.pairs, 1):
        writer.writerow([rank, csv_cell(p.a), csv_cell(p.b), f"{p.similarity_a:.3f}", f"{p.similarity_b:.3f}",
                         p.shared_chars, csv_cell(" ".join(s.module for s in p.shared))])
    return buf.getvalue()


def _marked(code: str, slices: list) -> str:
    """`code` as HTML: escaped as every string the kit shows, its shared regions in <mark>, and only the lines
    within CONTEXT lines of a shared region (the others as one "…" line)."""
    merged = []
    for start, end in sorted(slices):
        start, end = max(0, start), min(len(code), end)
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        elif start < end:
            merged.append([start, end])
    lines = code.split("\n")
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)

    def line_of(offset):
        lo, hi = 0, len(starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo

    keep = set()
    for start, end in merged:
        for n in range(max(0, line_of(start) - CONTEXT), min(len(lines), line_of(max(start, end - 1)) + CONTEXT + 1)):
            keep.add(n)
    out, gap = [], False
    for n, line in enumerate(lines):
        if n not in keep:
            gap = True
            continue
        if gap and out:
            out.append("<span class='gap'>…</span>")
        gap = False
        lo, hi = starts[n], starts[n] + len(line)
        pieces, cursor = [], lo
        for start, end in merged:
            s, e = max(start, lo), min(end, hi)
            if s >= e:
                continue
            pieces.append(esc(code[cursor:s]) + "<mark>" + esc(code[s:e]) + "</mark>")
            cursor = e
        pieces.append(esc(code[cursor:hi]))
        out.append(f"<span class='ln'>{n + 1:>4}</span> " + "".join(pieces))
    if gap and out:
        out.append("<span class='gap'>…</span>")
    return "\n".join(out)


# Readable on a phone and by a screen reader: the pairs as a numbered list, each one line or two that unfolds
# (<details>) to its shared code, so that a class of alike submissions is a short page (50 pairs: under 20 phone
# screens, tests/test_accessibility.py); shared code marked by more than its colour (underlined, and "shared
# code starts" / "ends" said to a screen reader by text the eye does not see); line numbers dark enough to read
# on the code's grey (6.4:1). The ids run as text, not in a table's narrow column, so that they break only where
# a line has no room for them, never mid-word.
_PAGE_STYLE = STYLE + """
.side{display:grid;grid-template-columns:repeat(auto-fit,minmax(18rem,1fr));gap:.8rem}
.side pre{font-size:.8rem;margin:0;overflow-x:auto;white-space:pre-wrap}
mark{background:#ffe08a;color:inherit;text-decoration:underline 2px #7a5c00;text-underline-offset:.2em}
mark::before,mark::after{clip-path:inset(100%);clip:rect(0 0 0 0);height:1px;width:1px;overflow:hidden;
position:absolute;white-space:nowrap}
mark::before{content:" [shared code starts] "}mark::after{content:" [shared code ends] "}
mark.key::before,mark.key::after{content:none}
.ln,.gap{color:#595959;user-select:none}.verdict{border-left:4px solid #a4161a;padding:.4rem .8rem;background:#fff5f5}
ol.pairs{padding-left:2rem}ol.pairs>li{margin:.5rem 0}ol.pairs summary{font-weight:400}
.pair h3{font-size:1rem;margin:.8rem 0 .3rem}.sub{color:#555}"""


def to_html(result: Result) -> str:
    parts = ["<h1>Similar submissions: multi-head attention assignment</h1>",
             f"<p class='verdict'><b>{esc(EVIDENCE)}</b></p>",
             f"<p class='note'>{len(result.compared)} submissions compared, module with module, the code given to "
             f"every student left out (the student template and its released notebooks), and so is code that more "
             f"than {result.max_share} submissions share (what many write alike). Similarity: the share of one "
             "submission's remaining code that the other holds too, names and comments aside (a copy whose "
             "names were changed is still found). Listed: the pairs whose mean of the two is "
             f"{_percent(result.min_similarity)} or more, most alike first. Made with copydetect (winnowing, as "
             "MOSS does).</p>"]
    if result.mostly_common:
        many = len(result.mostly_common) != 1
        parts.append(f"<p class='bad'>{len(result.mostly_common)} submission{'s are' if many else ' is'} "
                     f"mostly code that more than {result.max_share} submissions share, which is left out as common "
                     "code: a solution that went round would not show here. Run the command again with --max-share "
                     "above the size of such a group (the class size shows every group).</p><details><summary>"
                     "Mostly common code</summary><ul>"
                     + "".join(f"<li>{esc(i)}: {_percent(share)} of its fingerprints</li>"
                               for i, share in result.mostly_common) + "</ul></details>")
    if result.left_out:
        parts.append(f"<details><summary>Not compared ({len(result.left_out)})</summary><ul>"
                     + "".join(f"<li>{esc(i)}: {esc(why)}</li>" for i, why in result.left_out.items())
                     + "</ul></details>")
    if not result.pairs:
        parts.append(f"<p class='ok'>No two submissions share {_percent(result.min_similarity)} of their code or "
                     "more, beyond the template and common code.</p>")
    else:
        parts.append(f"<h2>The pairs, most alike first ({len(result.pairs)})</h2><p class='note'>Each pair: the share "
                     "of the first one's code that the second holds, then of the second's that the first holds, and "
                     "the modules they share. Open a pair to read their shared modules side by side, the shared "
                     "code <mark class='key'>highlighted and underlined</mark>, a few lines around it.</p>"
                     "<ol class='pairs'>")
        for rank, p in enumerate(result.pairs, 1):
            parts.append(f"<li id='pair-{rank}'><details><summary><b>{esc(p.a)}</b> and <b>{esc(p.b)}</b>: "
                         f"{_percent(p.similarity_a)} and {_percent(p.similarity_b)} <span class='sub'>("
                         f"{esc(', '.join(s.module for s in p.shared))})</span></summary><div class='pair'>"
                         f"<p>{_percent(p.similarity_a)} of {esc(p.a)}'s own code is in {esc(p.b)}'s, "
                         f"{_percent(p.similarity_b)} of {esc(p.b)}'s in {esc(p.a)}'s ({p.shared_chars} characters "
                         "shared, names and comments aside).</p>")
            for s in p.shared:
                parts.append(f"<h3>{esc(s.module)}.py</h3><div class='side'>")
                for sub, slices in ((p.a, s.slices_a), (p.b, s.slices_b)):
                    code = result.sources.get(sub, {}).get(s.module, "")
                    parts.append(f"<div><b>{esc(sub)}</b><pre>{_marked(code, slices)}</pre></div>")
                parts.append("</div>")
            parts.append("</div></details></li>")
        parts.append("</ol>")
    parts.append(f"<p class='note'>{esc(EVIDENCE)}</p>")
    return document("Similar submissions: multi-head attention", _PAGE_STYLE, parts)


def write(result: Result, out: Path) -> tuple[Path, Path]:
    """OUT/similarity.html and OUT/similarity.csv (atomically, under the user's umask); their paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    page, table = out / "similarity.html", out / "similarity.csv"
    write_atomic(table, to_csv(result), mode=SHARED)
    write_atomic(page, to_html(result), mode=SHARED)
    return page, table
