"""The peak of one QLoRA step as TRL 1.16's SFTTrainer runs it, on the meta device (issue 33, item 1).

`python qlora_peak.py CONFIG MICRO_BATCH SEQ [--prepare]` builds the model from a config.json on
the meta device with every decoder `nn.Linear` replaced by a real bitsandbytes 0.50.2
`Linear4bit` (NF4, double quantization, compute dtype bf16) whose packed weight and `QuantState`
are meta tensors of the stored shapes, then does what `SFTTrainer` does to it: `get_peft_model`
(`LoraConfig(r=16, target_modules="all-linear")`), `enable_input_require_grads`, the bf16 cast of
the adapters (`_is_quantized_model`), non-reentrant gradient checkpointing (transformers 5.24's
default kwargs). With `--prepare`, `prepare_model_for_kbit_training` first (PEFT 0.21.2).

A `TorchDispatchMode` follows every storage an operator creates until Python drops it, through
the forward, the checkpointed recompute and the backward of the backbone (the LM head's loss is
left out: vram models TRL's fused head separately), and prints the peak of those bytes (weights,
adapters and optimizer states are not in it) and the tensors alive then. bitsandbytes' fake
`gemm_4bit` allocates only its output; above 1536 rows the CUDA kernel takes
`_dequant_linear_fallback` (backends/cuda/ops.py), so the tracker counts its transients there:
the fp32 absmax (two: the dequantized one and `+ offset`) and the bf16 weight, alive while the
output is made. `MatMul4Bit.backward`'s `F.dequantize_4bit` runs through the fake ops and is
followed as it is.
"""
import json
import sys
import weakref

import torch
import transformers
from torch.utils._python_dispatch import TorchDispatchMode

import bitsandbytes as bnb
from bitsandbytes.functional import QuantState

TRACE = "--trace" in sys.argv
NO_STORAGE = {"t", "view", "transpose", "expand", "slice", "select", "unsqueeze", "squeeze",
              "_unsafe_view", "reshape", "permute", "split", "split_with_sizes", "alias",
              "as_strided", "detach", "unbind", "narrow", "chunk", "_to_copy_view"}


class Live(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.live = {}
        self.cur = 0
        self.peak = 0
        self.at_peak = []
        self.op_at_peak = None
        self.phase = ""
        self.phase_at_peak = ""
        self.trace = []

    def bump(self, name, extra=0, extra_desc=None):
        if self.cur + extra > self.peak:
            self.peak = self.cur + extra
            self.op_at_peak = name
            self.phase_at_peak = self.phase
            self.at_peak = sorted((v for v in self.live.values() if v[0]), key=lambda v: -v[0])
            if extra_desc:
                self.at_peak = extra_desc + self.at_peak

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name == "gemm_4bit":
            a, shape_b = args[0], args[2]
            k = a.shape[-1]
            m = a.numel() // k
            absmax8 = (kwargs or {}).get("absmax_8bit")
            if m > 1536:
                n = shape_b[0]
                deq = n * k * a.element_size()
                am = 2 * absmax8.numel() * 4 if absmax8 is not None else 0
                out_b = m * n * a.element_size()
                self.bump("gemm_4bit dequant fallback", deq + am + out_b,
                          [(deq, "dequantize_4bit (fwd)", (n, k), str(a.dtype)), (am, "absmax fp32", (), "")])
        if (func is torch.ops.aten.add.Tensor and not kwargs and not torch.is_grad_enabled()
                and self.phase.endswith("backward") and isinstance(args[1], torch.Tensor)
                and args[0].shape == args[1].shape and args[0].dtype == args[1].dtype
                and args[0].is_contiguous() and id(args[0].untyped_storage()) in self.live):
            # The autograd engine sums two gradients of one input in place into the first
            # (input_buffer.cpp `accumulate`: `old_var.add_(var)`) unless a dispatch mode is on,
            # as this one is: do what it does without the mode.
            return args[0].add_(args[1])
        out = func(*args, **(kwargs or {}))
        if name in NO_STORAGE:
            return out
        for o in out if isinstance(out, (tuple, list)) else [out]:
            if not isinstance(o, torch.Tensor):
                continue
            st = o.untyped_storage()
            key = id(st)
            if st.nbytes() == 0 or key in self.live:
                continue
            nb = st.nbytes()
            self.live[key] = (nb, name, tuple(o.shape), str(o.dtype).replace("torch.", ""))
            self.cur += nb

            def gone(nb=nb, key=key):
                if key in self.live:
                    self.cur -= nb
                    self.live.pop(key, None)

            weakref.finalize(st, gone)
            self.bump(name)
            if TRACE and self.phase == "step 2 backward" and len(self.trace) < 400:
                self.trace.append((self.cur, nb, name, tuple(o.shape), str(o.dtype)))
        return out


class FusedSdpa(torch.autograd.Function):
    """A fused attention kernel's memory (FlashAttention-2 / memory-efficient, what SDPA runs on
    an H200 for bf16): the output and the fp32 log-sum-exp in forward, saved with q, k, v and
    the output; dq, dk, dv in backward. The meta device would take the math path instead."""

    @staticmethod
    def forward(ctx, q, k, v):
        # Flash and cuDNN write the output as [b, s, h, d] and return its [b, h, s, d] view, so
        # the `transpose(1, 2).contiguous()` after them is free.
        b, h, s, _ = q.shape
        out = q.new_empty((b, s, h, v.shape[-1])).transpose(1, 2)
        lse = q.new_empty(q.shape[:-1], dtype=torch.float32)
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, g):
        q, k, v, _, _ = ctx.saved_tensors
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def fused_sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    # TRL's bf16=True runs the step under autocast, which casts SDPA's fp32 inputs (the residual
    # stream is fp32 after prepare_model_for_kbit_training) to bf16; the meta device has no
    # autocast, so the cast is made here.
    if q.dtype == torch.float32:
        q, k, v = q.to(torch.bfloat16), k.to(torch.bfloat16), v.to(torch.bfloat16)
    return FusedSdpa.apply(q, k, v)


class Head(torch.autograd.Function):
    """TRL's fused LM head as the backbone sees it: it keeps its own compact copy of the final
    hidden states (not the backbone's output) and gives back the hidden states' gradient."""

    @staticmethod
    def forward(ctx, h):
        ctx.shape, ctx.dtype = h.shape, h.dtype
        return h.new_empty(())

    @staticmethod
    def backward(ctx, g):
        return g.new_empty(ctx.shape, dtype=ctx.dtype)


def quantize_meta(model):
    """Every decoder nn.Linear becomes a bitsandbytes Linear4bit with meta storage of the packed
    NF4 weight and its double-quantized QuantState (what transformers' bnb integration loads)."""
    for mname, mod in list(model.named_modules()):
        for cname, child in list(mod.named_children()):
            full = f"{mname}.{cname}" if mname else cname
            if not isinstance(child, torch.nn.Linear) or "lm_head" in full:
                continue
            n, k = child.out_features, child.in_features
            q = bnb.nn.Linear4bit(k, n, bias=child.bias is not None, compute_dtype=torch.bfloat16,
                                  compress_statistics=True, quant_type="nf4", device="meta")
            blocks = (n * k) // 64
            state2 = QuantState(absmax=torch.empty(blocks // 256 + 1, dtype=torch.float32, device="meta"),
                                code=torch.empty(256, dtype=torch.float32, device="meta"),
                                blocksize=256, dtype=torch.float32)
            qs = QuantState(absmax=torch.empty(blocks, dtype=torch.uint8, device="meta"), shape=torch.Size([n, k]),
                            code=torch.empty(16, dtype=torch.float32, device="meta"), blocksize=64,
                            quant_type="nf4", dtype=torch.bfloat16,
                            offset=torch.empty((), dtype=torch.float32, device="meta"), state2=state2)
            w = bnb.nn.Params4bit(torch.empty(((n * k + 1) // 2, 1), dtype=torch.uint8, device="meta"),
                                  requires_grad=False, quant_state=qs, blocksize=64, compress_statistics=True,
                                  quant_type="nf4", bnb_quantized=True, module=q)
            q.weight = w
            q.compute_type_is_set = True
            setattr(mod, cname, q)
    model.is_loaded_in_4bit = True
    model.quantization_method = "bitsandbytes"


def step_peak(path, mb, seq, method):
    """The peak of the bytes the step's backbone allocates (second step), the op and phase
    there, the tensors alive then, and the parameters' dtypes. `method`: "qlora",
    "qlora-prepare" or "lora"."""
    prepare = method == "qlora-prepare"
    lora_only = method == "lora"
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
    sdpa = torch.nn.functional.scaled_dot_product_attention
    torch.nn.functional.scaled_dot_product_attention = fused_sdpa
    linear = torch.nn.functional.linear
    if lora_only or prepare:
        # Autocast's F.linear: fp32 inputs and weights are cast to bf16 (the copies are what
        # autograd saves); the meta device has no autocast.
        def autocast_linear(x, w, b=None):
            if x.dtype == torch.float32 or w.dtype == torch.float32:
                x, w = x.to(torch.bfloat16), w.to(torch.bfloat16)
                b = None if b is None else b.to(torch.bfloat16)
            return linear(x, w, b)
        torch.nn.functional.linear = autocast_linear
    packed = transformers.masking_utils.find_packed_sequence_indices
    # The meta device cannot read a value: no packed sequences (TRL's collator pads, one row each).
    transformers.masking_utils.find_packed_sequence_indices = lambda position_ids: None
    try:
        raw = json.load(open(path))
        raw.pop("quantization_config", None)
        cfg = transformers.AutoConfig.for_model(**raw)
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa",
                                                                  dtype=torch.bfloat16)
        if not lora_only:
            quantize_meta(model)
        if prepare:
            model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=True,
                                                    gradient_checkpointing_kwargs={"use_reentrant": False})
        model = get_peft_model(model, LoraConfig(r=16, target_modules="all-linear", task_type="CAUSAL_LM"))
        model.enable_input_require_grads()
        for p in model.parameters():
            if p.requires_grad and not lora_only:
                p.data = p.data.to(torch.bfloat16)
        model.get_base_model().gradient_checkpointing_enable()
        model.train()
        dtypes = sorted({str(p.dtype).replace("torch.", "") for p in model.parameters()})
        ids = torch.zeros(mb, seq, dtype=torch.long, device="meta")
        backbone = model.get_base_model().model
        mode = Live()
        with mode:
            for step in (1, 2):
                mode.phase = f"step {step} forward"
                loss = Head.apply(backbone(input_ids=ids, use_cache=False).last_hidden_state)
                mode.phase = f"step {step} backward"
                loss.backward()
                del loss
                for p in model.parameters():
                    p.grad = None
                if step == 1:
                    mode.peak = 0
    finally:
        # Everything patched is put back: later tests in the same pytest process (the text-only
        # gradient checks, generate_ops) run the real attention.
        torch.nn.functional.scaled_dot_product_attention = sdpa
        torch.nn.functional.linear = linear
        transformers.masking_utils.find_packed_sequence_indices = packed
    return mode, dtypes


def main():
    path, mb, seq = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    method = "qlora-prepare" if "--prepare" in sys.argv else "lora" if "--lora" in sys.argv else "qlora"
    mode, dtypes = step_peak(path, mb, seq, method)
    print(json.dumps({"method": method, "param_dtypes": dtypes, "peak": mode.peak,
                      "op": mode.op_at_peak, "phase": mode.phase_at_peak}))
    for t in mode.trace:
        print("T", t[0] / 1e6, t[1] / 1e6, *t[2:])
    agg = {}
    for nb, op, shape, dt in mode.at_peak:
        key = (op, shape, dt)
        c, b = agg.get(key, (0, 0))
        agg[key] = (c + 1, b + nb)
    for (op, shape, dt), (c, b) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:25]:
        print(f"{b / 1e6:10.1f} MB  {c:3d} x {op:28s} {shape} {dt}")


if __name__ == "__main__":
    main()
