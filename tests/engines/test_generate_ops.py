"""The committed `generate` host counts (issue 33) are still what transformers runs.

crates/vram-plan/tests/it/generate.rs holds vram's per-mechanism counts to
crates/vram-plan/tests/data/generate_ops/counts.json; this test holds that file to transformers.
"""

import json

import generate_ops as ops


def test_committed_counts_match_the_library():
    doc, configs = ops.compute()
    committed = json.loads((ops.DATA / "counts.json").read_text())
    assert doc == committed
    for name, raw in configs.items():
        assert json.loads((ops.DATA / f"{name}.json").read_text()) == raw, name


def test_one_decode_step_syncs_the_host_once():
    # StopCheck's `bool(unfinished_sequences.max() == 0)`: DeferredStopCheck is only for mps.
    committed = json.loads((ops.DATA / "counts.json").read_text())
    for name, case in committed["cases"].items():
        assert sum(p["syncs"] for p in case["decode_step"].values()) == 1, name
