#!/usr/bin/env python3
"""Unit tests of the training study's report (python/gift_ps/demo/study.py) on
synthetic per-seed results: the paired gap to FP32 and its Student-t
interval, the test against FP32's seed-to-seed spread, the choice of the
best 4-bit configuration, the configurations the netlab run times, a
configuration missing from a seed, and the table. Exit 77 (skipped by ctest) without torch, which the gift_ps package
imports."""

import json
import math
import os
import tempfile
import unittest

import demo_test_env  # noqa: F401  (python/ on the path; exit 77 without torch)

from gift_ps.demo.study import best_four_bit, mean_sd, netlab_configs, parse_args, summarize, table  # noqa: E402


def config(name, loss, bytes_per_step=1000.0):
    return {"name": name, "final_val_loss": loss, "bytes_per_step": bytes_per_step, "rel_err_matrices_mean": 0.01,
            "step_s": 0.3, "val_curve": [[10, loss + 1.0], [20, loss]]}


class StudyReportTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        # fp32 1.90, 1.95, 2.00 (sd 0.05); nvfp4 +0.10 each seed; gift-nvfp4-rot +0.01, +0.03, +0.02;
        # fp8 only in seeds 1 and 2.
        losses = {1: 1.90, 2: 1.95, 3: 2.00}
        for seed, base in losses.items():
            configs = [config("fp32", base, 4000.0), config("nvfp4", base + 0.10, 500.0),
                       config("gift-nvfp4-rot", base + {1: 0.01, 2: 0.03, 3: 0.02}[seed], 500.0)]
            if seed != 3:
                configs.append(config("fp8", base - 0.01))
            os.makedirs(os.path.join(self.dir.name, f"seed{seed}"))
            with open(os.path.join(self.dir.name, f"seed{seed}", "results.json"), "w") as f:
                json.dump({"configs": configs}, f)
        self.args = parse_args(["--out", self.dir.name, "--configs", "fp32,fp8,nvfp4,gift-nvfp4-rot"])

    def tearDown(self):
        self.dir.cleanup()

    def test_paired_gaps_interval_and_spread(self):
        rows, fp32_sd = summarize(self.args)
        self.assertAlmostEqual(fp32_sd, 0.05)
        by = {r["name"]: r for r in rows}
        self.assertAlmostEqual(by["fp32"]["gap_mean"], 0.0)
        self.assertAlmostEqual(by["nvfp4"]["gap_mean"], 0.10)
        self.assertAlmostEqual(by["nvfp4"]["gap_ci95"], 0.0)  # the same gap at every seed
        self.assertFalse(by["nvfp4"]["within_fp32_spread"])  # 0.10 > 0.05
        rot = by["gift-nvfp4-rot"]
        self.assertAlmostEqual(rot["gap_mean"], 0.02)
        # sd of (0.01, 0.03, 0.02) is 0.01; t(0.975, 2) = 4.303.
        self.assertAlmostEqual(rot["gap_ci95"], 4.303 * 0.01 / math.sqrt(3))
        self.assertTrue(rot["within_fp32_spread"])
        self.assertEqual(by["fp8"]["seeds"], [1, 2])  # seed 3 did not run it
        self.assertAlmostEqual(by["fp8"]["gap_mean"], -0.01)
        self.assertEqual(rot["val_curve_mean"], [[10, 2.97], [20, 1.97]])
        self.assertEqual(best_four_bit(rows), "gift-nvfp4-rot")

    def test_table_has_a_row_per_configuration_and_the_netlab_times(self):
        rows, fp32_sd = summarize(self.args)
        netlab = {"link": "netlab at 200mbit", "time_to_fp32_loss": [
            {"name": "fp32", "seconds": 100.0, "step": 500}, {"name": "nvfp4", "seconds": None, "step": None}]}
        text = table(rows, fp32_sd, netlab)
        self.assertIn("| fp32 | 3 | 1.9500 (0.0500) |", text)
        self.assertIn("100.0 s (step 500)", text)
        self.assertIn("not reached", text)
        self.assertIn("| fp8 | 2 |", text)

    def test_netlab_run_times_every_configuration_unless_narrowed(self):
        rows, _ = summarize(self.args)
        self.assertEqual(netlab_configs(self.args, rows), ["fp32", "fp8", "nvfp4", "gift-nvfp4-rot"])
        narrowed = parse_args(["--out", self.dir.name, "--configs", "fp32,fp8,nvfp4,gift-nvfp4-rot",
                               "--netlab-configs", "best-4bit,fp8"])
        # fp32 always (it sets the loss to reach), in --configs order, best-4bit resolved.
        self.assertEqual(netlab_configs(narrowed, rows), ["fp32", "fp8", "gift-nvfp4-rot"])
        with self.assertRaises(SystemExit):
            parse_args(["--configs", "fp32,fp8", "--netlab-configs", "nvfp4"])  # not a configuration of the study
        with self.assertRaises(SystemExit):
            parse_args(["--netlab-only"])  # without --netlab-rate

    def test_mean_sd_and_bad_arguments(self):
        self.assertEqual(mean_sd([]), (None, None))
        self.assertEqual(mean_sd([2.0]), (2.0, None))
        with self.assertRaises(SystemExit):
            parse_args(["--configs", "fp8,nvfp4"])  # no fp32 to compare with
        with self.assertRaises(SystemExit):
            parse_args(["--configs", "fp32,nope"])
        with self.assertRaises(SystemExit):
            parse_args(["--seeds", "a,b"])


if __name__ == "__main__":
    unittest.main()
