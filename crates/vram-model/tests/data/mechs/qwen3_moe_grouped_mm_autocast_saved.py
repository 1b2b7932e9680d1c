# Same block, fp32 parameters and input (the autocast training layout), under bf16 autocast.
import torch
from transformers import Qwen3MoeConfig
from transformers.models.qwen3_moe import modeling_qwen3_moe as q
cfg = Qwen3MoeConfig(hidden_size=64, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2, norm_topk_prob=True)
cfg._experts_implementation = "grouped_mm"
m = q.Qwen3MoeSparseMoeBlock(cfg)
seen = {}; dt = {}
def pack(t):
    st = t.untyped_storage(); seen[st.data_ptr()] = st.nbytes(); dt[st.data_ptr()] = (t.dtype, tuple(t.shape)); return t
pp = {p.untyped_storage().data_ptr() for p in m.parameters()}
x = torch.randn(2, 8, 64, dtype=torch.float32, requires_grad=True)
with torch.autocast("cpu", dtype=torch.bfloat16):
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = m(x)
print("out dtype", y.dtype if not isinstance(y, tuple) else y[0].dtype)
for k,v in seen.items():
    if k not in pp: print(dt[k], v)
print("saved activations bytes:", sum(v for k, v in seen.items() if k not in pp))
