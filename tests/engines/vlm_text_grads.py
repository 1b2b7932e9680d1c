"""Which parameters a text-only training step of a vision-language model gives gradients and
AdamW states (transformers 5.24.0, PEFT 0.21.2, torch 2.15, CPU): the model's forward calls the
vision tower only for pixel values, so the tower's and projector's parameters (and LoRA adapters
on their linears) keep `grad` None, and `torch.optim.AdamW._init_group` makes no state for them.
The figures are pinned in crates/vram-model/tests/it/vision.rs
(`a_text_only_step_gives_the_vision_tower_no_gradients`).

Run: python tests/engines/vlm_text_grads.py
"""
import json
import warnings

import torch
from peft import LoraConfig, get_peft_model
from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

CONFIG = {
    "architectures": ["Qwen3VLForConditionalGeneration"],
    "model_type": "qwen3_vl",
    "tie_word_embeddings": False,
    "text_config": {
        "model_type": "qwen3_vl_text", "vocab_size": 256, "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 128,
        "rope_parameters": {"rope_type": "default", "rope_theta": 5000000.0,
                            "mrope_section": [2, 3, 3], "mrope_interleaved": True},
        "tie_word_embeddings": False,
    },
    "vision_config": {
        "model_type": "qwen3_vl", "depth": 2, "hidden_size": 32, "intermediate_size": 64,
        "num_heads": 2, "out_hidden_size": 64, "patch_size": 4, "spatial_merge_size": 2,
        "temporal_patch_size": 2, "num_position_embeddings": 16,
        "deepstack_visual_indexes": [0],
    },
}


def step(m, params):
    opt = torch.optim.AdamW(params, lr=1e-3)
    x = torch.randint(0, 256, (2, 16))
    m(input_ids=x, labels=x).loss.backward()
    opt.step()
    grad = sum(p.numel() for p in params if p.grad is not None)
    state = sum(t.numel() for s in opt.state.values() for k, t in s.items() if k in ("exp_avg", "exp_avg_sq"))
    return grad, state


def main():
    torch.manual_seed(0)
    cfg = Qwen3VLConfig(**{k: v for k, v in CONFIG.items() if k != "architectures"})
    m = Qwen3VLForConditionalGeneration(cfg)
    total = sum(p.numel() for p in m.parameters())
    tower = sum(p.numel() for n, p in m.named_parameters() if ".visual." in n or n.startswith("visual."))
    grad, state = step(m, list(m.parameters()))
    torch.manual_seed(0)
    base = Qwen3VLForConditionalGeneration(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pm = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    trainable = [p for p in pm.parameters() if p.requires_grad]
    adapters = sum(p.numel() for p in trainable)
    tower_adapters = sum(p.numel() for n, p in pm.named_parameters() if p.requires_grad and ".visual." in n)
    lora_grad, lora_state = step(pm, trainable)
    out = dict(total=total, tower=tower, grad=grad, state=state, adapters=adapters,
               tower_adapters=tower_adapters, lora_grad=lora_grad, lora_state=lora_state)
    print(json.dumps(out))
    assert grad == total - tower and state == 2 * grad
    assert lora_grad == adapters - tower_adapters and lora_state == 2 * lora_grad
    return out


if __name__ == "__main__":
    main()
