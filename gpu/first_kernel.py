"""What a CUDA process's first kernel costs in device memory, outside PyTorch's allocator.

SGLang sizes its weights as the fall in free device memory over `load_model` (after
`empty_cache()`; `model_runner.py` at 0.4.2 and 0.5.3). At TP 1 that window holds the process's
first kernel launches; at TP > 1 PyNccl's warm-up all-reduce runs them earlier, in
`init_torch_distributed`. The H100 logs at TP 1 read 0.10-0.12 GiB more than the tensors
(BENCHMARKS.md, "SGLang's TP-1 load window"). One candidate is the driver's local-memory
allocation, context-wide and made at the first launch that needs it: per NVIDIA's forum
answers, max threads per SM x SMs x the per-thread size (the kernel's `localSizeBytes` plus a
syscall stack, rounded up). This probe measures it, in a fresh process:

  A  free memory once the context exists (`torch.cuda.init`, no kernel yet);
  B  after a 512-byte allocation (PyTorch's segment, subtracted through `memory_reserved`);
  C  after the first kernel (`fill_`);
  D  after four more distinct kernels (`add_`, `cos`, `mul`, `copy_` from the host).

C - B is the first launch's driver cost (local memory and the kernel's module under lazy
loading), D - C the modules of the later kernels. It also records the SM count, the maximum
threads per SM and the context's stack-size limit, so that C - B can be set against
`threads x SMs x per-thread bytes`. Under a second of device time.

usage: python3 gpu/first_kernel.py   (env: OUT; writes $OUT/first_kernel.json)
"""
import ctypes, json, os, subprocess, sys

import torch

OUT = os.environ.get("OUT", "out")


def probe():
    torch.cuda.init()
    torch.cuda.set_device(0)
    torch.cuda.synchronize()

    def free():
        torch.cuda.synchronize()
        f, total = torch.cuda.mem_get_info()
        return total - f - torch.cuda.memory_reserved(), total

    rec = {}
    rec["A_context"], rec["total"] = free()
    x = torch.empty(128, device="cuda")
    rec["B_allocated"], _ = free()
    x.fill_(0)
    rec["C_first_kernel"], _ = free()
    x.add_(1)
    y = x.cos() * 2
    y.copy_(torch.ones(128))
    rec["D_more_kernels"], _ = free()
    p = torch.cuda.get_device_properties(0)
    rec.update(
        gpu=p.name,
        sms=p.multi_processor_count,
        max_threads_per_sm=getattr(p, "max_threads_per_multi_processor", None),
        torch=torch.__version__,
        cuda=torch.version.cuda,
        module_loading=os.environ.get("CUDA_MODULE_LOADING", "(default: lazy)"),
    )
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        v = ctypes.c_size_t()
        if lib.cuCtxGetLimit(ctypes.byref(v), 0) == 0:  # CU_LIMIT_STACK_SIZE
            rec["stack_size_limit"] = v.value
        drv = ctypes.c_int()
        if lib.cuDriverGetVersion(ctypes.byref(drv)) == 0:
            rec["driver_api"] = drv.value
    except OSError as e:
        rec["libcuda"] = repr(e)
    rec["first_kernel_bytes"] = rec["C_first_kernel"] - rec["B_allocated"]
    rec["later_kernels_bytes"] = rec["D_more_kernels"] - rec["C_first_kernel"]
    return rec


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(probe()))
        return
    if not torch.cuda.is_available():
        print("first_kernel.py: no CUDA device; nothing measured")
        return
    os.makedirs(OUT, exist_ok=True)
    runs = []
    # Each run in a fresh process: the first launch happens once per context.
    for loading in ("LAZY", "EAGER"):
        env = dict(os.environ, CUDA_MODULE_LOADING=loading)
        r = subprocess.run(
            [sys.executable, __file__, "--child"], env=env, capture_output=True, text=True
        )
        runs.append(json.loads(r.stdout) if r.returncode == 0 else {"error": r.stderr[-2000:]})
    with open(os.path.join(OUT, "first_kernel.json"), "w") as f:
        json.dump(runs, f, indent=1)
    print(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
