"""Which token ids `measure2.py`'s decode-speed prompts held, computed without a GPU.

measure2.py (vramkit's shared H200 ground truth, 2026-11-27) draws its prompts with

    g = torch.Generator(device="cuda").manual_seed(0)
    torch.randint(0, vocab, (b, s), device="cuda", generator=g)

and calls `generate(..., pad_token_id=0)`. A prompt holding id 0 would make `generate` infer a
padding mask (a `[b, 1, 1, T]` mask and a host sync each step), which was one candidate for the
batch-16 decode gap (BENCHMARKS.md, issue 33). This module recomputes the ids as PyTorch's CUDA
kernel makes them and shows the batch-16 prompt (16 x 1024 ids of Llama-3.1's 128256) has no 0.

PyTorch 2.11's `random_from_to_kernel` (aten/src/ATen/native/cuda/DistributionTemplates.h): a
range under 2**28 takes the 32-bit path, `distribution_nullary_kernel<scalar_t, uint32_t, uint4>`,
so four values per `curand4` call. `calc_execution_policy` launches ceil(n / 256) blocks of 256
threads (at most SMs x 8 blocks; 64 for n = 16384), a grid-stride loop whose stride is the
whole grid, so for n <= grid x 256 thread i makes element i alone from the `.x` of its first
`curand4`. Each thread runs `curand_init(seed, subsequence=i, offset=0)` (a fresh generator's
Philox offset is 0): counter (0, 0, i, 0), key (seed low, seed high). Element i is then
Philox4x32-10(counter=(0, 0, i, 0), key=(0, 0)).x % range (`uniform_int_from_to`).

The Philox here is checked two ways: Random123's known-answer vectors for philox4x32-10, and
`torch.rand(5, device="cuda")` after `torch.manual_seed(0)` (the widely reproduced
0.3990, 0.5167, 0.0249, 0.9401, 0.9459: `curand_uniform4`'s x * 2**-32 + 2**-33, one value per
thread in the same kernel).

usage: python3 measure2_prompt.py   (prints the checks and the count of id 0 per batch)
"""

M0, M1 = 0xD2511F53, 0xCD9E8D57
W0, W1 = 0x9E3779B9, 0xBB67AE85
MASK = 0xFFFFFFFF


def philox4x32_10(ctr, key):
    """Philox4x32 with 10 rounds (Salmon et al., SC'11; curand's `curandStatePhilox4_32_10`)."""
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for _ in range(10):
        p0 = M0 * c0
        p1 = M1 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & MASK, p1 & MASK, ((p0 >> 32) ^ c3 ^ k1) & MASK, p0 & MASK
        k0 = (k0 + W0) & MASK
        k1 = (k1 + W1) & MASK
    return c0, c1, c2, c3


# Random123 1.09, kat_vectors: philox4x32 10 rounds (counter, key -> output).
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]

TORCH_RAND_SEED0 = [0.3990, 0.5167, 0.0249, 0.9401, 0.9459]


def first_curand4_x(i, seed=0):
    """`.x` of the first `curand4` of a thread initialised with `curand_init(seed, i, 0)`."""
    return philox4x32_10((0, 0, i & MASK, i >> 32), (seed & MASK, seed >> 32))[0]


def randint_cuda(high, n, seed=0):
    """`torch.randint(0, high, (n,), device="cuda", generator=fresh(seed))`, flattened, for
    n up to one grid (SMs x 8 x 256 = 270,336 on an H200)."""
    assert high < 1 << 28 and n <= 132 * 8 * 256
    return [first_curand4_x(i, seed) % high for i in range(n)]


def rand_cuda(n, seed=0):
    """`torch.rand(n, device="cuda")` after `manual_seed(seed)`, for a small n."""
    return [first_curand4_x(i, seed) * 2.0**-32 + 2.0**-33 for i in range(n)]


def check():
    for ctr, key, want in KAT:
        assert philox4x32_10(ctr, key) == want, (ctr, key)
    got = [round(x, 4) for x in rand_cuda(5)]
    assert got == TORCH_RAND_SEED0, got
    vocab, prompt = 128256, 1024
    ids = randint_cuda(vocab, 16 * prompt)
    return {
        "batch1_pad_ids": ids[:prompt].count(0),
        "batch16_pad_ids": ids.count(0),
        "batch16_rows_with_pad": sum(0 in ids[r * prompt:(r + 1) * prompt] for r in range(16)),
        "batch16_min_id": min(ids),
    }


if __name__ == "__main__":
    print("Random123 known answers and torch.rand(5) after seed 0: reproduced")
    print(check())
