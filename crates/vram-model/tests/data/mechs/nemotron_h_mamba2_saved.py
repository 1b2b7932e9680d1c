# Saved-tensor bytes of NemotronHMamba2Mixer's forward (torch_forward: mamba_ssm and
# causal_conv1d absent), transformers 5.24, bf16, distinct storages, parameters excluded.
# With `-v`, each saved storage's bytes, shape, dtype and strides (what `mechs::mamba2`
# itemises: torch.einsum's contiguous bmm operand copies show as 3-D [batch, m, k] fp32 tensors).
import sys
import torch
from transformers import NemotronHConfig
from transformers.models.nemotron_h import modeling_nemotron_h as q
cfg = NemotronHConfig(hidden_size=256, mamba_num_heads=8, mamba_head_dim=32, ssm_state_size=16, n_groups=2, conv_kernel=4, chunk_size=64, num_hidden_layers=1, hybrid_override_pattern="M")
m = q.NemotronHMamba2Mixer(cfg, 0).to(torch.bfloat16)
seen = {}
def pack(t):
    st = t.untyped_storage()
    seen.setdefault(st.data_ptr(), (st.nbytes(), tuple(t.shape), t.dtype, tuple(t.stride())))
    return t
pp = {p.untyped_storage().data_ptr() for p in m.parameters()}
for s in (128, 1024):
    x = torch.randn(1, s, 256, dtype=torch.bfloat16, requires_grad=True)
    seen.clear()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = m(x)
    if "-v" in sys.argv:
        for k, v in seen.items():
            if k not in pp:
                print(" ", *v)
    print(s, "saved activations bytes:", sum(v[0] for k, v in seen.items() if k not in pp))
