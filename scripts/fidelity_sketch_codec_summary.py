#!/usr/bin/env python3
"""A Markdown table of what the per-worker sketches' wire format does to the fidelity target.

Reads DIR/<run>/<source>.<matrix>.json, one directory per run of
scripts/fidelity_target_table.sh with SOURCES="ema-per-worker activations"
(`exact`: statistics decomposed exactly; the others with EXTRA="--sketch-size
128 --sketch-codec C", named by C with '/' as '_'), and prints per source and
matrix, for each run: the lowest error of an NVFP4 option whose statistics
travel (a per-worker source) against the target's, and the choice's bytes
against the target's (with its push codec when it is not the target's).

    scripts/fidelity_sketch_codec_summary.py out/sketch-codec exact fp32 bf16 e4m3_block128_sr
"""

import json
import os
import sys

SOURCES = ("ema-per-worker", "activations")


def cell(path):
    with open(path) as f:
        doc = json.load(f)
    choice = next(x for x in doc if x.get("target_choice"))
    results = [x for x in doc if not x.get("target_choice")]
    target = choice["target_error"]
    travelling = [x["rel_l2_avg"] for x in results
                  if x["spec"].startswith("nvfp4") and "per-worker" in x["source"]]
    lowest = f"{min(travelling) / target:.3f}" if travelling else "-"
    chosen = choice["chosen"]
    bytes_ratio = chosen["bytes_per_step"] / choice["target_bytes_per_step"]
    what = "" if chosen["method"] == "direct" else f" {chosen['spec']}"
    return f"{lowest} / {bytes_ratio:.3f}{what}"


def main(argv):
    if len(argv) < 3 or argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 64
    directory, runs = argv[1], argv[2:]
    print("| source | matrix | " + " | ".join(runs) + " |")
    print("|---|---|" + "---|" * len(runs))
    matrices = sorted({name.split(".", 1)[1][:-len(".json")]
                       for name in os.listdir(os.path.join(directory, runs[0]))
                       if name.endswith(".json")})
    for src in SOURCES:
        for m in matrices:
            cells = []
            for run in runs:
                path = os.path.join(directory, run, f"{src}.{m}.json")
                cells.append(cell(path) if os.path.exists(path) else "-")
            print(f"| {src} | {m} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
