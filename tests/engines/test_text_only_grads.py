"""A text-only training step gives no gradient and no AdamW state to what its forward does not
run: Llama 3.2 Vision's cross-attention layers (`mllama_text_grads.py`) and a vision-language
model's tower and projector, with or without LoRA adapters on them (`vlm_text_grads.py`). The
figures are the ones crates/vram-model/tests/it/vision.rs pins vram to."""

import runpy
from pathlib import Path

import vlm_text_grads

HERE = Path(__file__).resolve().parent


def test_the_vision_tower_gets_no_gradient_in_a_text_only_step():
    got = vlm_text_grads.main()
    assert got == dict(total=177440, tower=70560, grad=106880, state=213760, adapters=14848,
                       tower_adapters=6656, lora_grad=8192, lora_state=16384)


def test_mllamas_cross_attention_layers_get_no_gradient_in_a_text_only_step(capsys):
    runpy.run_path(str(HERE / "mllama_text_grads.py"), run_name="__main__")
    assert "total 181380, grad 107328, state 214656, cross 74052" in capsys.readouterr().out
