"""measure2.py's decode-speed prompts held no pad token (issue 33: the batch-16 decode gap).

measure2_prompt.py recomputes PyTorch's CUDA `randint` (Philox4x32-10 as curand runs it), checked
against Random123's known answers and torch's own `torch.rand(5, device="cuda")` after seed 0.
"""

import measure2_prompt as mp


def test_measure2_prompts_hold_no_pad_token():
    got = mp.check()
    assert got["batch1_pad_ids"] == 0
    assert got["batch16_pad_ids"] == 0
    assert got["batch16_rows_with_pad"] == 0
    assert got["batch16_min_id"] == 15


def test_a_drawn_zero_would_be_seen():
    # The check can fail: with a range of 1 every id is 0; with 16, 64 draws hold a 0.
    assert mp.randint_cuda(1, 8) == [0] * 8
    assert 0 in mp.randint_cuda(16, 64)
