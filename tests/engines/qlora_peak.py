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
from contextlib import ExitStack
from unittest import mock

import torch
import transformers

import bitsandbytes as bnb
from bitsandbytes.functional import QuantState
from tracker import Peak, fused_sdpa, meta_config

TRACE = "--trace" in sys.argv


class Live(Peak):
    """`tracker.Peak` through a LoRA/QLoRA step: bitsandbytes' dequantizing fallback above 1536
    rows, the autograd engine's in-place gradient sum in the backward phases, and with `--trace`
    the second backward's births."""

    def __init__(self):
        super().__init__()
        self.trace = []

    def engine_sums(self):
        return not torch.is_grad_enabled() and self.phase.endswith("backward")

    def born(self, n, name, o):
        super().born(n, name, o)
        if TRACE and self.phase == "step 2 backward" and len(self.trace) < 400:
            self.trace.append((self.cur, n, name, tuple(o.shape), str(o.dtype)))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ == "gemm_4bit":
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
        return super().__torch_dispatch__(func, types, args, kwargs)


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


def step_peak(path, mb, seq, method, load=torch.bfloat16):
    """The peak of the bytes the step's backbone allocates (second step), the op and phase
    there, the tensors alive then, and the parameters' dtypes. `method`: "qlora",
    "qlora-prepare" or "lora". `load`: the dtype the base is loaded in (float32: a float32
    checkpoint under transformers 5's dtype="auto"); the step runs under bf16 autocast."""
    prepare = method == "qlora-prepare"
    lora_only = method == "lora"
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
    linear = torch.nn.functional.linear

    def autocast_linear(x, w, b=None):
        # Autocast's F.linear: fp32 inputs and weights are cast to bf16 (the copies are what
        # autograd saves); the meta device has no autocast.
        if x.dtype == torch.float32 or w.dtype == torch.float32:
            x, w = x.to(torch.bfloat16), w.to(torch.bfloat16)
            b = None if b is None else b.to(torch.bfloat16)
        return linear(x, w, b)

    # Everything patched is put back on the way out: later tests in the same pytest process (the
    # text-only gradient checks, generate_ops) run the real attention.
    with ExitStack() as patches:
        patches.enter_context(mock.patch.object(torch.nn.functional, "scaled_dot_product_attention",
                                                fused_sdpa))
        if lora_only or prepare or load == torch.float32:
            patches.enter_context(mock.patch.object(torch.nn.functional, "linear", autocast_linear))
        # The meta device cannot read a value: no packed sequences (TRL's collator pads, one row
        # each).
        patches.enter_context(mock.patch.object(transformers.masking_utils, "find_packed_sequence_indices",
                                                lambda position_ids: None))
        cfg = meta_config(path)
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa",
                                                                  dtype=load)
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
