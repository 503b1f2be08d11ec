#!/usr/bin/env python3
"""Unit tests of the demo's timing logic (python/gift_ps/demo): the overlap
comparison (an overlapped configuration's step against its sequential twin's
compute + sync seconds) and the time to a target validation loss, on
synthetic per-step records. Exit 77 (skipped by ctest) without torch, which
the gift_ps package imports."""

import json
import os
import tempfile
import unittest

import demo_test_env  # noqa: F401  (python/ on the path; exit 77 without torch)

from gift_ps.demo.driver import time_to_loss  # noqa: E402
from gift_ps.demo.report import choice_kind, choice_lines, overlap_lines, overlap_rows  # noqa: E402


def row(name, step_s, compute_s, sync_s):
    return {"name": name, "step_s": step_s, "compute_s": compute_s, "sync_s": sync_s}


class OverlapTest(unittest.TestCase):
    def test_hidden_against_the_twins_sum(self):
        rows = overlap_rows([row("gift", 1.0, 0.6, 0.4), row("gift-overlap", 0.75, 0.7, 0.05), row("fp32", 2.0, 0.6, 1.4)])
        self.assertEqual(len(rows), 1)
        o = rows[0]
        self.assertEqual((o["name"], o["twin"]), ("gift-overlap", "gift"))
        self.assertAlmostEqual(o["sum_s"], 1.0)
        self.assertAlmostEqual(o["hidden_s"], 0.25)
        self.assertAlmostEqual(o["step_s"], 0.75)
        (line,) = overlap_lines(rows)
        self.assertIn("0.250 s (62 % of the sync) hidden", line)

    def test_slower_overlap_says_nothing_hidden(self):
        (line,) = overlap_lines(overlap_rows([row("gift", 1.0, 0.6, 0.4), row("gift-overlap", 1.1, 0.9, 0.2)]))
        self.assertIn("0.100 s slower, nothing hidden", line)

    def test_needs_both_configurations(self):
        self.assertEqual(overlap_rows([row("gift-overlap", 0.75, 0.7, 0.05)]), [])
        self.assertEqual(overlap_rows([row("gift", 1.0, 0.6, 0.4)]), [])


class TimeToLossTest(unittest.TestCase):
    def test_sums_step_seconds_up_to_the_first_evaluation_at_the_target(self):
        recs = [
            {"step": 1, "step_s": 1.0},
            {"step": 2, "step_s": 2.0, "val_loss": 3.0, "eval_s": 9.0},
            {"step": 3, "step_s": 1.5},
            {"step": 4, "step_s": 0.5, "val_loss": 2.4, "eval_s": 9.0},
            {"step": 5, "step_s": 1.0, "val_loss": 2.9, "final_val_loss": 2.2},
            {"final": True, "checksum": "x"},
        ]
        with tempfile.TemporaryDirectory(prefix="gift-demo-report-") as d:
            with open(os.path.join(d, "rank0.jsonl"), "w") as f:
                f.write("".join(json.dumps(r) + "\n" for r in recs))
            self.assertEqual(time_to_loss(d, 2.5), (5.0, 4))  # evaluations' seconds excluded
            self.assertEqual(time_to_loss(d, 2.2), (6.0, 5))  # the final evaluation counts
            self.assertEqual(time_to_loss(d, 2.0), (None, None))


class ChoiceTest(unittest.TestCase):
    def test_kinds_of_the_owners_choices(self):
        self.assertEqual(choice_kind("p=0.25 r=64"), "basis")
        self.assertEqual(choice_kind("p=0.25 r=16 (budget)"), "lower")
        self.assertEqual(choice_kind("direct (budget)"), "skipped")
        self.assertEqual(choice_kind("direct"), "direct")
        self.assertEqual(choice_kind(None), "unmeasured")

    def test_kinds_of_the_fidelity_targets_choices(self):
        self.assertEqual(choice_kind("p=0.25 r=64 [nvfp4 / nvfp4]"), "target-fewer")
        self.assertEqual(choice_kind("direct [nvfp4/mse / e4m3/block128]"), "target-fewer")
        self.assertEqual(choice_kind("direct [target: e4m3/block128 / e4m3/block128]"), "target-direct")
        self.assertEqual(choice_kind("direct (above target: 0.031 > 0.025)"), "target-fallback")

    def test_lines_name_the_matrices_of_each_kind(self):
        results = [
            {"name": "fp8-block", "choices": None},
            {"name": "gift", "choices": {"a.w": "p=0.25 r=64", "b.w": "direct (budget)", "c.w": "p=0.5 r=8 (budget)",
                                         "d.w": None}},
        ]
        lines = choice_lines(results)
        self.assertEqual(len(lines), 1)
        line = lines[0]
        self.assertTrue(line.startswith("gift matrices at the end: "), line)
        self.assertIn("in a basis at the policy's rank: 1 [a.w (p=0.25 r=64)]", line)
        self.assertIn("(the step budget cut it): 1 [c.w (p=0.5 r=8 (budget))]", line)
        self.assertIn("skipped a basis that won: 1 [b.w (direct (budget))]", line)
        self.assertIn("not measured (no refresh yet): 1 [d.w]", line)
        self.assertNotIn("no basis won", line)


if __name__ == "__main__":
    unittest.main()
