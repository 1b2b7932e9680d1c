"""vramkit.data.MemoryAwareBatchSampler and vramkit.data.pack against the installed wheel."""

import random

import pytest

import vramkit
from vramkit import VramError
from vramkit.data import pack

# Lengths of a synthetic text data set: 300 sequences of 8 to 1024 tokens (GPT-2's maximum),
# fixed by the seed so the test is repeatable.
LENGTHS = [random.Random(7).randint(8, 1024) for _ in range(300)]
# A T4 (16 GiB, datasheet) training GPT-2 small with AdamW: a handful of long sequences per
# batch, so the data set needs many batches.
SETUP = dict(gpu="t4", precision="fp16-amp")


def check_batches(batches, lengths):
    """Every index once, and every batch's estimated step fits the GPU."""
    flat = sorted(i for b in batches for i in b)
    assert flat == list(range(len(lengths)))
    for b in batches:
        padded = max(lengths[i] for i in b)
        e = vramkit.estimate("gpt2", micro_batch=len(b), seq=padded, **SETUP)
        assert e.fits, (len(b), padded, e)


def test_pack_fits_every_batch_and_covers_every_index():
    packed = pack(LENGTHS, "gpt2", **SETUP)
    batches = [b["indices"] for b in packed["batches"]]
    assert len(batches) > 5
    check_batches(batches, LENGTHS)
    # A batch one sequence larger at the same padded length would not fit (the packing is
    # greedy: each batch holds as many as fit), except where the data ran out.
    first = packed["batches"][0]
    bigger = vramkit.estimate("gpt2", micro_batch=len(first["indices"]) + 1, seq=first["padded_len"], **SETUP)
    assert not bigger.fits
    assert 0 < packed["fill"] <= 1


def _sampler(**kw):
    from vramkit.data import MemoryAwareBatchSampler

    return MemoryAwareBatchSampler(LENGTHS, "gpt2", **SETUP, **kw)


def test_sampler_is_deterministic_and_reshuffles_per_epoch():
    a, b = _sampler(seed=3), _sampler(seed=3)
    e0 = list(a)
    assert e0 == list(b)  # same seed, same epoch: same batches in the same order
    check_batches(e0, LENGTHS)
    a.set_epoch(1)
    e1 = list(a)
    assert e1 != e0  # a new epoch: a new order
    assert sorted(map(sorted, e1)) == sorted(map(sorted, e0))  # of the same batches
    b.set_epoch(1)
    assert list(b) == e1
    assert list(_sampler(seed=4)) != e0
    assert len(a) == len(e0)
    unshuffled = list(_sampler(shuffle=False))
    # Longest first, as packed.
    assert [max(LENGTHS[i] for i in x) for x in unshuffled] == sorted(
        (max(LENGTHS[i] for i in x) for x in unshuffled), reverse=True)


def test_sampler_with_a_real_dataloader():
    torch = pytest.importorskip("torch", reason="torch is not installed (CI installs Debian's python3-torch)")
    from torch.utils.data import DataLoader, Dataset, Sampler

    class Sequences(Dataset):
        def __len__(self):
            return len(LENGTHS)

        def __getitem__(self, i):
            return torch.full((LENGTHS[i],), i, dtype=torch.long)

    def pad(items):
        n = max(len(x) for x in items)
        out = torch.zeros((len(items), n), dtype=torch.long)
        for row, x in enumerate(items):
            out[row, : len(x)] = x
        return out

    sampler = _sampler(seed=0)
    assert isinstance(sampler, Sampler)
    loader = DataLoader(Sequences(), batch_sampler=sampler, collate_fn=pad)
    seen = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        shapes = []
        for batch in loader:
            ids = batch[:, 0].tolist()  # each row starts with its index
            padded = max(LENGTHS[i] for i in ids)
            assert batch.shape == (len(ids), padded)
            assert vramkit.estimate("gpt2", micro_batch=len(ids), seq=padded, **SETUP).fits
            shapes.append(tuple(batch.shape))
        assert sum(s[0] for s in shapes) == len(LENGTHS)
        seen.append(shapes)
    assert seen[0] != seen[1]  # reshuffled by set_epoch
    assert sorted(seen[0]) == sorted(seen[1])


def test_sampler_bad_input():
    from vramkit.data import MemoryAwareBatchSampler

    # 100,000 tokens of GPT-2 on a T4 do not fit even alone: the fp32 logits alone are
    # 100,000 x 50,257 x 4 B = 20.1 GB > 16 GiB.
    with pytest.raises(VramError, match="do not fit on t4 even alone"):
        MemoryAwareBatchSampler([100_000, 100], "gpt2", **SETUP)
    s = MemoryAwareBatchSampler([100_000, 100, 200], "gpt2", drop_too_long=True, **SETUP)
    assert s.too_long == [0] and sorted(i for b in s for i in b) == [1, 2]
    with pytest.raises(VramError, match="item 2"):
        pack([10, "x"], "gpt2")
    with pytest.raises(VramError, match="must be between 1"):
        pack([10, 0], "gpt2")
    with pytest.raises(VramError, match="no sequence lengths"):
        pack([], "gpt2")
