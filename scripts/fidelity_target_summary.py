#!/usr/bin/env python3
"""A Markdown table of the fidelity target's choices written by scripts/fidelity_target_table.sh.

Reads DIR/<source>.<matrix>.json (gift-bench fidelity --json with --target: the
method results, then the choice as the element marked "target_choice") and
prints, per source and matrix, the chosen method and push codec, its error
and wire bytes per step against the target's (direct e4m3/block128), and the
lowest error any 4-bit option reached against the target's.

    scripts/fidelity_target_summary.py out/target/d512
"""

import glob
import json
import os
import sys

SOURCES = ("ema-mean", "ema-per-worker", "activations")


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 64
    directory = argv[1]
    print("| source | matrix | chosen (method, push codec) | error / target's | bytes / target's "
          "| lowest 4-bit error / target's |")
    print("|---|---|---|---|---|---|")
    rows = 0
    for src in SOURCES:
        for path in sorted(glob.glob(os.path.join(directory, f"{src}.*.json"))):
            matrix = os.path.basename(path)[len(src) + 1:-len(".json")]
            with open(path) as f:
                doc = json.load(f)
            choices = [x for x in doc if x.get("target_choice")]
            if not choices:
                print(f"{path}: no target choice (run with --target)", file=sys.stderr)
                return 1
            choice, results = choices[0], [x for x in doc if not x.get("target_choice")]
            target = choice["target_error"]
            lowest4 = min(x["rel_l2_avg"] for x in results if x["spec"].startswith("nvfp4"))
            c = choice["chosen"]
            method = c["method"].replace("family/both/", "").replace("/iso", "")
            print(f"| {src} | {matrix} | {method}, {c['spec']} | {c['error'] / target:.3f} "
                  f"| {c['bytes_per_step'] / choice['target_bytes_per_step']:.3f} | {lowest4 / target:.3f} |")
            rows += 1
    if rows == 0:
        print(f"{directory}: no <source>.<matrix>.json files", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
