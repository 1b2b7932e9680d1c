# Saved-tensor bytes of one MoE block's forward as transformers 5.24 runs it (CPU; the experts
# through the default experts implementation), bf16, distinct storages, parameters excluded.
import torch
from transformers import Qwen3MoeConfig
from transformers.models.qwen3_moe import modeling_qwen3_moe as q
cfg = Qwen3MoeConfig(hidden_size=64, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2, norm_topk_prob=True)
cfg._experts_implementation = "grouped_mm"
print("experts impl:", cfg._experts_implementation)
m = q.Qwen3MoeSparseMoeBlock(cfg).to(torch.bfloat16)
seen = {}
def pack(t):
    st = t.untyped_storage(); seen[st.data_ptr()] = st.nbytes(); return t
pp = {p.untyped_storage().data_ptr() for p in m.parameters()}
x = torch.randn(2, 8, 64, dtype=torch.bfloat16, requires_grad=True)
with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
    y = m(x)
print("saved activations bytes:", sum(v for k, v in seen.items() if k not in pp))
