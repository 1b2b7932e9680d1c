"""Which parameters a text-only training step of Llama 3.2 Vision's text model gives gradients
and AdamW states (transformers 5.24.0, torch 2.15, CPU): `MllamaTextModel.forward` passes over
its cross-attention layers without image features, so their `grad` stays None and
`torch.optim.AdamW._init_group` makes no state for them. The figures are pinned in
crates/vram-model/tests/it/vision.rs (`mllama_text_only_training_...`).

Run: python tests/engines/mllama_text_grads.py
Printed on 2026-11-27: total 181380, grad 107328, state 214656, cross 74052.
"""
import torch
from transformers import MllamaTextConfig
from transformers.models.mllama.modeling_mllama import MllamaForCausalLM

torch.manual_seed(0)
cfg = MllamaTextConfig(
    vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
    num_attention_heads=4, num_key_value_heads=2, cross_attention_layers=[1, 3],
    max_position_embeddings=128, tie_word_embeddings=False,
    bos_token_id=1, eos_token_id=2, pad_token_id=0,
)
m = MllamaForCausalLM(cfg)
opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
x = torch.randint(0, 256, (2, 16))
m(input_ids=x, labels=x).loss.backward()
opt.step()
total = sum(p.numel() for p in m.parameters())
grad = sum(p.numel() for p in m.parameters() if p.grad is not None)
state = sum(
    t.numel() for s in opt.state.values() for k, t in s.items() if k in ("exp_avg", "exp_avg_sq")
)
cross = sum(p.numel() for n, p in m.named_parameters() if ".layers.1." in n or ".layers.3." in n)
print(f"total {total}, grad {grad}, state {state}, cross {cross}")
assert grad == total - cross and state == 2 * grad
