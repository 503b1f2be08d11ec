#!/usr/bin/env python3
"""Where a build-and-test run spent its time (CI prints this after every run).

    scripts/build-times.py [--phases FILE] [--build DIR] [--fuzz-build DIR]
                           [--junit FILE] [--objects N] [--tests N]

Reads, each where present (a missing input is said, never an error):
  --phases FILE     the wall time of each phase, one line a phase:
                    "NAME<TAB>START<TAB>END<TAB>EXIT" (seconds since the epoch),
                    as .ci/run writes them (default BUILD/ci-phases.tsv)
  --build DIR       the build's .ninja_log (default build)
  --fuzz-build DIR  the fuzz build's .ninja_log (default build-fuzz)
  --junit FILE      ctest's JUnit record (default BUILD/ctest-junit.xml,
                    written by `make test`)

and prints: the phases' wall times; for each build, its compile-seconds by
folder (each source folder's objects, the links, the generated code) and its
N slowest steps; the N slowest tests. Compile-seconds add up every step's own
time: two steps side by side on two cores count twice; the phase table says
what the wall clock saw.

The ninja log keeps the last run of each output: after an incremental build
the figures mix this build with earlier ones (a clean build reads true).
"""

import argparse
import collections
import os
import sys
import xml.etree.ElementTree as ET


def read_phases(path):
    """[(name, start, end, exit)] in file order, or None when the file is absent."""
    if not os.path.exists(path):
        return None
    phases = []
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 4:
                continue
            name, start, end, code = parts
            try:
                phases.append((name, float(start), float(end), int(code)))
            except ValueError:
                continue
    return phases


class Step:
    """One build step of the ninja log: its outputs and its own time."""

    def __init__(self, seconds, outputs):
        self.seconds = seconds
        self.outputs = outputs

    @property
    def name(self):
        # A link step also writes gtest_discover_tests' list beside the
        # binary: name the binary.
        for out in self.outputs:
            if not os.path.isabs(out) and not out.endswith((".cmake", ".d")):
                return out
        return self.outputs[0]


def read_ninja_log(build):
    """The steps of the last run of each output, or None without a log."""
    path = os.path.join(build, ".ninja_log")
    if not os.path.exists(path):
        return None
    last = {}  # output -> (start, end, hash)
    with open(path) as f:
        header = f.readline()
        if not header.startswith("# ninja log v"):
            return None
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 5:
                continue
            start, end, _, output, cmd_hash = parts[:5]
            last[output] = (int(start), int(end), cmd_hash)
    # One command with several outputs (protoc, a CUDA object and its
    # dependency file) is one step: group by its start, end and hash.
    grouped = collections.OrderedDict()
    for output, key in last.items():
        grouped.setdefault(key, []).append(output)
    return [Step((end - start) / 1000.0, sorted(outs)) for (start, end, _), outs in grouped.items()]


def step_folder(step):
    """The folder a step's time is charged to: the source folder of an object,
    'generated' for generated code, 'links' for binaries and libraries."""
    out = step.name
    if "/CMakeFiles/" in out and (out.endswith(".o") or out.endswith(".gch")):
        folder, _, rest = out.partition("/CMakeFiles/")
        if out.endswith(".gch"):
            return "precompiled headers"
        # An object of a source outside its target's folder (the emulated
        # kernels, the bench sources a fuzzer links) names that source's
        # path after the target: ".../foo.dir/__/__/kernels/x.cc.o".
        obj = rest.split("/", 1)[1] if "/" in rest else rest
        if obj.startswith("__/"):
            return "(outside its target's folder) " + folder
        if "/gen/" in obj or obj.startswith("gen/") or ".pb.cc" in obj:
            return "generated code"
        return folder
    if out.endswith((".pb.cc", ".pb.h", ".grpc.pb.cc", "_pb2.py")):
        return "generated code"
    if out.endswith((".a", ".so")) or "." not in os.path.basename(out):
        return "links"
    return "other"


def print_build(title, steps, top):
    if steps is None:
        print(f"\n== {title}: no .ninja_log")
        return
    total = sum(s.seconds for s in steps)
    print(f"\n== {title}: {len(steps)} steps, {total:.0f} compile-seconds")
    by_folder = collections.Counter()
    count = collections.Counter()
    for s in steps:
        f = step_folder(s)
        by_folder[f] += s.seconds
        count[f] += 1
    # Each source folder (tests/worker, common/transform), then the same
    # rolled up to the top-level folders.
    print(f"{'compile-s':>10} {'share':>6} {'steps':>6}  folder")
    for folder, secs in by_folder.most_common():
        if secs < 0.5:
            continue
        print(f"{secs:10.1f} {100 * secs / total:5.1f}% {count[folder]:6d}  {folder}")
    top_level = collections.Counter()
    for folder, secs in by_folder.items():
        top_level[folder.split("/")[0].replace("(outside its target's folder) ", "")] += secs
    print("by top-level folder: " + ", ".join(
        f"{name} {secs:.0f} s" for name, secs in top_level.most_common()))
    print(f"\n{top} slowest steps of {title}:")
    for s in sorted(steps, key=lambda s: -s.seconds)[:top]:
        print(f"{s.seconds:8.1f} s  {s.name}")


def read_junit(path):
    """[(name, seconds, status)], or None without the file."""
    if not os.path.exists(path):
        return None
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        print(f"(ctest record {path} unreadable: {e})", file=sys.stderr)
        return None
    tests = []
    for case in root.iter("testcase"):
        status = case.get("status", "run")
        if case.find("failure") is not None:
            status = "failed"
        elif case.find("skipped") is not None:
            status = "skipped"
        try:
            secs = float(case.get("time", "0"))
        except ValueError:
            secs = 0.0
        tests.append((case.get("name", "?"), secs, status))
    return tests


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("--build", default="build")
    ap.add_argument("--fuzz-build", default="build-fuzz")
    ap.add_argument("--phases")
    ap.add_argument("--junit")
    ap.add_argument("--objects", type=int, default=20)
    ap.add_argument("--tests", type=int, default=10)
    args = ap.parse_args()
    phases_path = args.phases or os.path.join(args.build, "ci-phases.tsv")
    junit_path = args.junit or os.path.join(args.build, "ctest-junit.xml")

    print("== where the time went")
    phases = read_phases(phases_path)
    if phases is None:
        print(f"phases: no {phases_path}")
    else:
        # Phases may overlap (the fuzz build runs beside the tests): the
        # whole is first start to last end, not the sum.
        total = (max(p[2] for p in phases) - min(p[1] for p in phases)) if phases else 0.0
        first = min(p[1] for p in phases) if phases else 0.0
        print(f"{'wall-s':>8} {'share':>6} {'from':>7}  phase")
        for name, start, end, code in phases:
            secs = end - start
            flag = "" if code == 0 else f"  (exit {code})"
            print(f"{secs:8.1f} {100 * secs / total if total else 0:5.1f}% "
                  f"{start - first:7.0f}  {name}{flag}")
        print(f"{total:8.1f}                 all of it ({total / 60:.1f} min)")

    print_build(f"build ({args.build})", read_ninja_log(args.build), args.objects)
    if os.path.isdir(args.fuzz_build):
        print_build(f"fuzz build ({args.fuzz_build})", read_ninja_log(args.fuzz_build),
                    min(args.objects, 10))

    tests = read_junit(junit_path)
    if tests is None:
        print(f"\n== tests: no {junit_path}")
    else:
        counts = collections.Counter(t[2] for t in tests)
        total = sum(t[1] for t in tests)
        print(f"\n== tests: {len(tests)} ({', '.join(f'{n} {s}' for s, n in counts.most_common())}), "
              f"{total:.0f} test-seconds")
        print(f"{args.tests} slowest tests:")
        for name, secs, _ in sorted(tests, key=lambda t: -t[1])[:args.tests]:
            print(f"{secs:8.1f} s  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
