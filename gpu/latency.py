"""Alloc+free pair latency on the GPU: vramkit (through the C functions PyTorch calls),
PyTorch's caching allocator, cudaMalloc/cudaFree and cudaMallocAsync/cudaFreeAsync.

Every contender is called the same way, through ctypes or a Python call, so the Python
overhead (also measured: an empty ctypes call) is comparable; vram-cuda-check --bench gives
vramkit's own figure without Python. Writes JSON; claims nothing.
"""
import argparse, ctypes, ctypes.util, glob, json, os, sys, time

p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--iters", type=int, default=20000)
p.add_argument("--iters-slow", type=int, default=500)
a = p.parse_args()

import torch
import vramkit_torch

torch.cuda.init()
torch.zeros(1, device="cuda")  # creates the primary context; it is current on this thread
stream = torch.cuda.current_stream().cuda_stream
SIZES = [512, 1 << 20, 64 << 20]


def pairs(alloc, free, size, n):
    p = alloc(size)
    if not p:
        raise RuntimeError(f"allocation of {size} B failed: {vramkit_torch.last_error()}")
    free(p, size)
    t = time.perf_counter_ns()
    for _ in range(n):
        p = alloc(size)
        free(p, size)
    torch.cuda.synchronize()
    return (time.perf_counter_ns() - t) / n


def find_cudart():
    libdir = os.path.join(os.path.dirname(torch.__file__), "lib")
    cands = glob.glob(os.path.join(libdir, "libcudart*.so*"))
    for sp in sys.path:
        cands += glob.glob(os.path.join(sp, "nvidia", "cuda_runtime", "lib", "libcudart.so*"))
    name = ctypes.util.find_library("cudart")
    if name:
        cands.append(name)
    for c in cands:
        try:
            return ctypes.CDLL(c), c
        except OSError:
            pass
    return None, None


results = {"iters": a.iters, "stream": "torch current stream", "entries": []}

lib = vramkit_torch._lib()
noop = ctypes.CDLL(None).getpid
t = time.perf_counter_ns()
for _ in range(a.iters):
    noop(); noop()
results["python_ctypes_two_calls_ns"] = (time.perf_counter_ns() - t) / a.iters

dev = torch.cuda.current_device()
contenders = {
    "vramkit (vram_malloc/vram_free)": (
        lambda s: lib.vram_malloc(s, dev, stream), lambda p, s: lib.vram_free(p, s, dev, stream), a.iters),
    "pytorch caching allocator": (
        lambda s: torch.cuda.caching_allocator_alloc(s, dev, stream),
        lambda p, s: torch.cuda.caching_allocator_delete(p), a.iters),
}
cudart, cudart_path = find_cudart()
results["cudart"] = cudart_path
if cudart is not None:
    vp = ctypes.c_void_p
    cudart.cudaMalloc.argtypes = [ctypes.POINTER(vp), ctypes.c_size_t]
    cudart.cudaFree.argtypes = [vp]
    cudart.cudaMallocAsync.argtypes = [ctypes.POINTER(vp), ctypes.c_size_t, vp]
    cudart.cudaFreeAsync.argtypes = [vp, vp]

    def cm(s):
        ptr = vp()
        assert cudart.cudaMalloc(ctypes.byref(ptr), s) == 0
        return ptr

    def cma(s):
        ptr = vp()
        assert cudart.cudaMallocAsync(ctypes.byref(ptr), s, vp(stream)) == 0
        return ptr

    contenders["cudaMalloc/cudaFree"] = (cm, lambda p, s: cudart.cudaFree(p), a.iters_slow)
    contenders["cudaMallocAsync/cudaFreeAsync"] = (cma, lambda p, s: cudart.cudaFreeAsync(p, vp(stream)), a.iters)

for name, (al, fr, n) in contenders.items():
    for size in SIZES:
        try:
            ns = pairs(al, fr, size, n)
            results["entries"].append({"what": name, "size": size, "iters": n, "ns_per_pair": round(ns, 1)})
        except Exception as e:
            results["entries"].append({"what": name, "size": size, "error": repr(e)})
        print(results["entries"][-1], flush=True)

results["vramkit_stats"] = {k: v for k, v in vramkit_torch.memory_stats(dev).items()
                            if k.startswith(("num_", "reserved_bytes.all", "allocated_bytes.all"))}
json.dump(results, open(a.out, "w"), indent=1)
