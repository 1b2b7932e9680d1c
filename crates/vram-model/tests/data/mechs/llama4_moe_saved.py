import torch
from transformers import Llama4TextConfig
from transformers.models.llama4 import modeling_llama4 as q
cfg = Llama4TextConfig(hidden_size=64, intermediate_size=32, intermediate_size_mlp=32, num_local_experts=4, num_experts_per_tok=1)
m = q.Llama4TextMoe(cfg).to(torch.bfloat16)
seen = {}
def pack(t):
    st = t.untyped_storage(); seen[st.data_ptr()] = st.nbytes(); return t
pp = {p.untyped_storage().data_ptr() for p in m.parameters()}
x = torch.randn(2, 8, 64, dtype=torch.bfloat16, requires_grad=True)
with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
    y = m(x)
print("saved activations bytes:", sum(v for k, v in seen.items() if k not in pp))
# without the shared expert
m.shared_expert.forward = lambda h: torch.zeros_like(h)
seen.clear()
with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
    y = m(x)
print("without shared:", sum(v for k, v in seen.items() if k not in pp))
