"""The demo report's reading of the owners' choices (TensorErrorRatio.choice)."""

import unittest

from gift_ps.demo.report import choice_kind


class ChoiceKindTest(unittest.TestCase):
    def test_fidelity_target_choices(self):
        self.assertEqual(choice_kind("p=0.25 r=64 [nvfp4 / nvfp4]"), "target-fewer")
        self.assertEqual(choice_kind("direct [nvfp4/mse / e4m3/block128]"), "target-fewer")
        self.assertEqual(choice_kind("direct [target: e4m3/block128 / e4m3/block128]"), "target-direct")
        self.assertEqual(choice_kind("direct (above target: 0.031 > 0.025)"), "target-fallback")

    def test_choices_without_the_target(self):
        self.assertEqual(choice_kind("p=0.25 r=64"), "basis")
        self.assertEqual(choice_kind("p=0.25 r=16 (budget)"), "lower")
        self.assertEqual(choice_kind("direct (budget)"), "skipped")
        self.assertEqual(choice_kind("direct"), "direct")
        self.assertEqual(choice_kind(""), "unmeasured")


if __name__ == "__main__":
    unittest.main()
