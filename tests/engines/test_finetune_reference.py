"""The committed fine-tuning references (issue 22) are still what the pinned libraries give.

crates/vram-model/tests/it/finetune.rs holds `vram` to these files; this test holds the files to
bitsandbytes (CPU backend), transformers and PEFT themselves.
"""

import json

import finetune_reference as ref


def test_committed_references_match_the_libraries():
    got = ref.compute()
    for key, rows in got.items():
        committed = json.loads((ref.DATA / f"{key}.json").read_text())["cases"]
        assert rows == committed, key


def test_get_memory_footprint_leaves_the_quant_state_out():
    rows = json.loads((ref.DATA / "bnb_storage.json").read_text())["cases"]
    for r in rows:
        assert r["get_memory_footprint"] == r["params_bytes"] + r["buffers_bytes"], r
        assert r["quant_state_bytes"] > 0, r
