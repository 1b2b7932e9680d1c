import torch
from transformers.models.qwen3_5 import modeling_qwen3_5 as q
from transformers import Qwen3_5TextConfig
cfg = Qwen3_5TextConfig(hidden_size=256, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=32, linear_value_head_dim=32, linear_conv_kernel_dim=4, num_hidden_layers=1, layer_types=["linear_attention"])
print("fast path:", q.is_fast_path_available if hasattr(q, "is_fast_path_available") else None)
m = q.Qwen3_5GatedDeltaNet(cfg, 0).to(torch.bfloat16)
x = torch.randn(1, 128, 256, dtype=torch.bfloat16, requires_grad=True)
seen = {}
def pack(t):
    try:
        st = t.untyped_storage()
        seen[st.data_ptr()] = st.nbytes()
    except Exception as e:
        pass
    return t
with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
    y = m(x)
print("saved bytes (distinct storages):", sum(seen.values()), "count", len(seen))
print("param bytes", sum(p.numel()*p.element_size() for p in m.parameters()))
pp = {p.untyped_storage().data_ptr() for p in m.parameters()}
act = {k: v for k, v in seen.items() if k not in pp}
print("saved activations bytes:", sum(act.values()), "count", len(act))
for s in (256, 1024):
    x = torch.randn(1, s, 256, dtype=torch.bfloat16, requires_grad=True)
    seen.clear()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = m(x)
    print(s, "saved activations bytes:", sum(v for k, v in seen.items() if k not in pp))
