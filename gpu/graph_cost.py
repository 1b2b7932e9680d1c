"""What the driver keeps on the device for CUDA graphs and for small `cudaMalloc`s.

Issue 35's two unpredicted refusals (vllm#17469, vllm#17462) and the by-driver graph share
(BENCHMARKS.md, "The driver's share of the graphs, by driver branch") need two figures no
NVIDIA document states: the device memory an executable graph keeps per kernel node and per
graph, and what one small `cudaMalloc` (NCCL's 512-byte per-channel buffers under capture)
takes. Public measurements exist for R470 (NVIDIA forum 244901) and an A/B for R535/R550
(vllm#5517); this probe measures them on whatever driver the device has, and records it.

In a fresh process, every figure is the fall in `cudaMemGetInfo`'s free memory less the growth
of PyTorch's own reserved memory (`memory_reserved`), so the caching allocator's segments and
the graphs' private pool are not counted:

  malloc   K raw `cudaMalloc(512)` calls through the CUDA runtime (K = 256, 1024, 4096), kept,
           then freed: bytes per allocation, and whether freeing returns them;
  nodes    one graph of N `add_` kernel nodes (N = 250, 1000, 4000): after capture and
           instantiation, and after its first replay; per node;
  graphs   G graphs of 8 nodes each (G = 64, 256): per graph, less 8 nodes' share.

Under ten seconds of device time. usage: python3 gpu/graph_cost.py (env: OUT; writes
$OUT/graph_cost.json)
"""
import ctypes, glob, json, os, subprocess, sys

import torch

OUT = os.environ.get("OUT", "out")


def cudart():
    """The CUDA runtime PyTorch loaded (its wheel's, else the system's)."""
    here = os.path.dirname(torch.__file__)
    pats = [
        os.path.join(here, "lib", "libcudart.so*"),
        os.path.join(os.path.dirname(here), "nvidia", "cuda_runtime", "lib", "libcudart.so*"),
        "/usr/local/cuda/lib64/libcudart.so*",
    ]
    for p in pats:
        for f in sorted(glob.glob(p)):
            try:
                return ctypes.CDLL(f), f
            except OSError:
                continue
    return None, None


def used():
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return total - free - torch.cuda.memory_reserved()


def malloc_cost(rt, k):
    before = used()
    ptrs = []
    for _ in range(k):
        p = ctypes.c_void_p()
        if rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(512)) != 0:
            break
        ptrs.append(p)
    held = used() - before
    for p in ptrs:
        rt.cudaFree(p)
    after_free = used() - before
    return {"k": len(ptrs), "held_bytes": held, "per_alloc_bytes": held / max(len(ptrs), 1),
            "after_free_bytes": after_free}


def capture(n, x, s):
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        for _ in range(n):
            x.add_(1)
    return g


def main():
    torch.cuda.init()
    torch.cuda.set_device(0)
    x = torch.zeros(1, device="cuda")
    x.add_(1)  # the first kernel's module and local memory, outside what follows
    s = torch.cuda.Stream()
    # Warm a capture so that the capture machinery's own first-use costs are not a graph's.
    with torch.cuda.stream(s):
        g0 = capture(8, x, s)
        g0.replay()
    del g0
    torch.cuda.synchronize()

    r = {"torch": torch.__version__, "cuda_runtime": torch.version.cuda,
         "device": torch.cuda.get_device_name(0)}
    try:
        r["driver"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as e:  # noqa: BLE001 - the probe still measures without the line
        r["driver"] = f"unknown ({e})"

    rt, path = cudart()
    r["cudart"] = path
    r["malloc"] = [malloc_cost(rt, k) for k in (256, 1024, 4096)] if rt else "no cudart found"

    nodes = []
    for n in (250, 1000, 4000):
        before = used()
        g = capture(n, x, s)
        inst = used() - before
        g.replay()
        replayed = used() - before
        del g
        torch.cuda.synchronize()
        nodes.append({"nodes": n, "after_instantiate_bytes": inst,
                      "after_replay_bytes": replayed, "after_destroy_bytes": used() - before,
                      "per_node_bytes": replayed / n})
    r["nodes"] = nodes

    graphs = []
    for count in (64, 256):
        before = used()
        gs = [capture(8, x, s) for _ in range(count)]
        for g in gs:
            g.replay()
        held = used() - before
        del gs
        torch.cuda.synchronize()
        graphs.append({"graphs": count, "nodes_each": 8, "held_bytes": held,
                       "per_graph_bytes": held / count, "after_destroy_bytes": used() - before})
    r["graphs"] = graphs
    return r


if __name__ == "__main__":
    if not torch.cuda.is_available():
        sys.exit("graph_cost.py: no CUDA device")
    res = main()
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "graph_cost.json.tmp"), "w") as f:
        json.dump(res, f, indent=1)
    os.replace(os.path.join(OUT, "graph_cost.json.tmp"), os.path.join(OUT, "graph_cost.json"))
    print(json.dumps(res, indent=1))
