"""Benchmark: `grader_cli.py similarity` on a generated class, with a planted copy.

Generates N submissions (tests/corpus/generated.py: the student template, each body filled with code drawn
for that student), replaces one with a copy of another whose locals are renamed and comments changed, runs the
similarity check as the command does, and prints the time of each phase, the peak memory of the process
(getrusage's ru_maxrss), the rank of the planted pair, and the size of what was written.

    python benchmarks/similarity_scale.py [--students 200] [--keep DIR]
"""
import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

from autograder.paths import KIT as ROOT  # the kit is installed (make setup)

sys.path.insert(0, str(ROOT))  # for the kit's test corpus (tests/corpus), which is not installed

from autograder.classrun import similarity  # noqa: E402
from tests.corpus.generated import make_class, renamed_copy  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=200)
    parser.add_argument("--keep", type=Path, default=None, help="write the class and the outputs here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        folder = root / "class"
        ids = make_class(folder, args.students, width=len(str(args.students)))
        original, copy = ids[len(ids) // 10], ids[len(ids) * 7 // 10]
        renamed_copy(folder / original, folder / copy)
        start, cpu = time.monotonic(), time.process_time()
        result = similarity.compare(folder)
        page, table = similarity.write(result, root / "out")
        elapsed, cpu = time.monotonic() - start, time.process_time() - cpu
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        ranks = [k for k, p in enumerate(result.pairs, 1) if {p.a, p.b} == {original, copy}]
        print(f"{len(ids)} submissions: {elapsed:.1f} s in all ("
              + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in result.timings.items())
              + f"; writing {elapsed - sum(result.timings.values()):.1f} s), {cpu:.1f} s of CPU, "
              f"peak memory {peak:.0f} MiB, "
              f"{result.candidates} pairs compared in full")
        if ranks:
            p = result.pairs[ranks[0] - 1]
            print(f"planted copy ({original} -> {copy}): rank {ranks[0]} of {len(result.pairs)} reported, "
                  f"{100 * p.similarity_a:.0f}% / {100 * p.similarity_b:.0f}%")
        else:
            print(f"planted copy ({original} -> {copy}): NOT FOUND among {len(result.pairs)} reported")
        if result.pairs[1:]:
            p = result.pairs[1] if ranks == [1] else result.pairs[0]
            print(f"next pair: {p.a} and {p.b}, {100 * p.similarity_a:.0f}% / {100 * p.similarity_b:.0f}%")
        print(f"{page.name} {page.stat().st_size / 1024:.0f} KiB, {table.name} {table.stat().st_size / 1024:.0f} KiB")
        return 0 if ranks == [1] else 1


if __name__ == "__main__":
    sys.exit(main())
