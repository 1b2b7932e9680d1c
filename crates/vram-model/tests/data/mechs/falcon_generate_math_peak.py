# Peak allocated bytes of FalconForCausalLM.generate with SDPA's math composite (what PyTorch
# runs for Falcon's one-head K/V with an explicit mask on a GPU; the CPU's own flash kernel
# accepts that call, so the math backend is forced here), transformers 5.24, torch 2.15, bf16,
# on the CPU: the torch profiler's memory timeline (every allocation and free), the peak above
# what existed before the call (the weights). Falcon-7B's shape (71 heads, multi-query, parallel
# attention) at 2 layers, hidden 1136 (head dim 16), vocabulary 4096; batch 2, prompt 252, 4 new
# tokens. Prints the config as `vram estimate` reads it, then the peak.
import json, torch
import transformers
from torch.nn.attention import sdpa_kernel, SDPBackend
from torch.profiler import profile, ProfilerActivity
from torch.profiler._memory_profiler import MemoryProfileTimeline, Action
cfg = transformers.FalconConfig(vocab_size=4096, hidden_size=1136, num_hidden_layers=2, num_attention_heads=71,
    multi_query=True, parallel_attn=True, bias=False, new_decoder_architecture=False, alibi=False)
print(json.dumps({k: cfg.to_dict()[k] for k in ("model_type", "vocab_size", "hidden_size", "num_hidden_layers",
    "num_attention_heads", "multi_query", "parallel_attn", "bias", "new_decoder_architecture", "alibi")}))
torch.manual_seed(0)
m = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=torch.bfloat16).eval()
ids = torch.randint(1, cfg.vocab_size, (2, 252))
kw = dict(max_new_tokens=4, min_new_tokens=4, do_sample=False, pad_token_id=0)
with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
    m.generate(ids[:, :32], **kw)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        m.generate(ids, **kw)
cur = peak = 0
for t, action, key, n in MemoryProfileTimeline(prof._memory_profile()).timeline:
    cur += n if action == Action.CREATE else -n if action == Action.DESTROY else 0
    peak = max(peak, cur)
print("peak above the weights:", peak)
