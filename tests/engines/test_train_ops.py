"""The committed per-layer training-step counts (issue 33, item 3) are still what transformers runs.

crates/vram-plan/tests/it/measured.rs holds the step-time model's per-layer operators to
crates/vram-plan/tests/data/train_ops/counts.json; this test holds that file to transformers.
"""

import json

import train_ops as ops


def test_committed_counts_match_the_library():
    assert ops.compute() == json.loads((ops.DATA / "counts.json").read_text())
