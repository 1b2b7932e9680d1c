"""`vram plan --finetune lora|qlora --emit peft|peft-yaml` (issue 22): the emitted PEFT LoraConfig,
TRL SFTConfig and BitsAndBytesConfig load in the real libraries, and one SFTTrainer step of a tiny
Llama runs with them on the CPU (bitsandbytes' CPU backend for QLoRA).

Only what cannot run without a GPU is changed: `SFTConfig` gets `use_cpu=True` (without it,
`bf16=True` refuses to construct on a machine with no GPU); the step runs under the CPU's bf16
autocast as emitted.
"""

import functools

import json
import tempfile

import pytest
import torch
import yaml

from conftest import TINY, run_vram


def emit(kind, *flags):
    r = run_vram(
        "plan", TINY, "--gpu", "h100-80g", "--gpus", "1", "--global-batch", "4", "--seq", "32",
        "--emit", kind, *flags,
    )
    assert r.returncode == 0, r.stderr
    assert "vram: emitted" in r.stderr, r.stderr
    return r.stdout


def cpu_sft_config(monkeypatch):
    import trl

    monkeypatch.setattr(trl, "SFTConfig", functools.partial(trl.SFTConfig, use_cpu=True))


def configs_from_python(text):
    ns = {}
    exec(compile(text, "emitted.py", "exec"), ns)  # the snippet imports the libraries itself
    return ns["bnb_config"], ns["peft_config"], ns["sft_config"]


def configs_from_yaml(text):
    from peft import LoraConfig
    from transformers import BitsAndBytesConfig
    from trl import SFTConfig

    y = yaml.safe_load(text)
    y["sft_config"]["use_cpu"] = True
    bnb = y["bnb_config"]
    if bnb is not None:
        bnb = dict(bnb)
        if "bnb_4bit_compute_dtype" in bnb:
            bnb["bnb_4bit_compute_dtype"] = getattr(torch, bnb["bnb_4bit_compute_dtype"])
        bnb = BitsAndBytesConfig(**bnb)
    return bnb, LoraConfig(**y["peft_config"]), SFTConfig(**y["sft_config"])


def tiny_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"w{i}": i for i in range(250)}
    vocab.update({"<unk>": 250, "<pad>": 251, "<eos>": 252})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", eos_token="<eos>")


def one_step(bnb, peft_config, sft_config, tmp):
    from datasets import Dataset
    from transformers import AutoConfig, AutoModelForCausalLM
    from trl import SFTTrainer

    cfg = AutoConfig.for_model(**json.load(open(TINY)))
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    base.save_pretrained(tmp)
    kw = {"quantization_config": bnb} if bnb is not None else {}
    model = AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.bfloat16, device_map="cpu", **kw)
    # CPU only: the emitted step, on the device this test has.
    args = sft_config
    args.output_dir = tmp
    args.max_steps = 1
    args.report_to = []
    args.save_strategy = "no"
    n = args.per_device_train_batch_size * args.gradient_accumulation_steps
    text = [" ".join(f"w{(i * 7 + j) % 250}" for j in range(20)) for i in range(n)]
    trainer = SFTTrainer(
        model=model,
        args=args,
        peft_config=peft_config,
        train_dataset=Dataset.from_dict({"text": text}),
        processing_class=tiny_tokenizer(),
    )
    before = {k: v.detach().clone() for k, v in trainer.model.named_parameters() if v.requires_grad}
    out = trainer.train()
    after = dict(trainer.model.named_parameters())
    assert before, "no trainable parameters"
    assert any(not torch.equal(before[k], after[k].detach()) for k in before), "the step changed no adapter"
    assert all("lora_" in k for k in before), sorted(before)[:4]
    return trainer, out


@pytest.mark.parametrize("kind", ["peft", "peft-yaml"])
def test_emitted_qlora_config_runs_one_step(kind, monkeypatch):
    cpu_sft_config(monkeypatch)
    text = emit(kind, "--finetune", "qlora", "--double-quant", "--lora-rank", "4")
    bnb, lora, sft = (configs_from_python if kind == "peft" else configs_from_yaml)(text)
    assert bnb.load_in_4bit and bnb.bnb_4bit_use_double_quant and bnb.bnb_4bit_quant_type == "nf4"
    assert lora.r == 4 and lora.target_modules in ("all-linear", {"all-linear"})
    assert sft.activation_checkpointing in (True, False) and sft.bf16
    assert sft.per_device_train_batch_size * sft.gradient_accumulation_steps == 4
    with tempfile.TemporaryDirectory() as tmp:
        trainer, _ = one_step(bnb, lora, sft, tmp)
        # vram's count of the adapters equals PEFT's.
        r = run_vram("estimate", TINY, "--finetune", "qlora", "--lora-rank", "4", "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["trainable_params"] == trainer.model.get_nb_trainable_parameters()[0]


def test_emitted_lora_config_runs_one_step(monkeypatch):
    cpu_sft_config(monkeypatch)
    text = emit("peft", "--finetune", "lora", "--lora-targets", "q_proj,v_proj", "--lora-dropout", "0.05")
    bnb, lora, sft = configs_from_python(text)
    assert bnb is None
    assert set(lora.target_modules) == {"q_proj", "v_proj"} and lora.lora_dropout == 0.05
    with tempfile.TemporaryDirectory() as tmp:
        one_step(bnb, lora, sft, tmp)
