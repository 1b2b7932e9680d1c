"""Models by Hub id from Python (issue 32), against the loopback hub: ``vramkit.estimate``
takes ``org/name`` and ``revision=``, and what vram puts in the Hugging Face cache is what
huggingface_hub reads (``hf_hub_download(..., local_files_only=True)``), with no shard stub.

The loopback hub is the Rust one (``vram_hub::fake``) as a process: .ci/python-tests builds it
(``cargo build --release -p vram-hub --features fake --example fake_hub``) and names it in
``VRAMKIT_FAKE_HUB``. It serves the folders of a directory as repos, ``*.safetensors`` behind a
redirect to a second loopback host, as the Hub's CDN. No test touches the network.
"""

import json
import os
import pathlib
import struct
import subprocess

import pytest

import vramkit

ROOT = pathlib.Path(__file__).resolve().parents[2]

# A two-layer Llama: hidden 64, 4 heads of 16 (2 KV heads), MLP 128, vocab 256, untied head.
TINY = {
    "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "vocab_size": 256, "max_position_embeddings": 512, "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}


def tensors(c):
    """Every tensor of transformers' LlamaForCausalLM for config ``c``, with its shape."""
    h, i, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    hd = h // c["num_attention_heads"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    out = [("model.embed_tokens.weight", [v, h])]
    for n in range(c["num_hidden_layers"]):
        p = f"model.layers.{n}."
        out += [
            (p + "input_layernorm.weight", [h]),
            (p + "self_attn.q_proj.weight", [q, h]),
            (p + "self_attn.k_proj.weight", [kv, h]),
            (p + "self_attn.v_proj.weight", [kv, h]),
            (p + "self_attn.o_proj.weight", [h, q]),
            (p + "post_attention_layernorm.weight", [h]),
            (p + "mlp.gate_proj.weight", [i, h]),
            (p + "mlp.up_proj.weight", [i, h]),
            (p + "mlp.down_proj.weight", [h, i]),
        ]
    return out + [("model.norm.weight", [h]), ("lm_head.weight", [v, h])]


def safetensors_bytes(ts):
    """A safetensors file of bf16 zeros: 8-byte length, the JSON header, the data."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in ts:
        n = 2
        for d in shape:
            n *= d
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + bytes(offset)


def params(ts):
    total = 0
    for _, shape in ts:
        n = 1
        for d in shape:
            n *= d
        total += n
    return total


def fake_hub_binary():
    named = os.environ.get("VRAMKIT_FAKE_HUB")
    if named:
        return named
    for profile in ("release", "debug"):
        p = ROOT / "target" / profile / "examples" / "fake_hub"
        if p.is_file():
            return str(p)
    return None


@pytest.fixture()
def hub(tmp_path, monkeypatch):
    """The loopback hub serving ``org/tiny`` (a config and a real two-shard checkpoint), and
    the environment pointing vram at it with fresh caches."""
    binary = fake_hub_binary()
    if binary is None:
        pytest.skip("the loopback hub is not built (cargo build --release -p vram-hub --features fake --example fake_hub)")
    repo = tmp_path / "repos" / "org" / "tiny"
    repo.mkdir(parents=True)
    (repo / "config.json").write_text(json.dumps(TINY))
    ts = tensors(TINY)
    shards = [ts[: len(ts) // 2], ts[len(ts) // 2:]]
    weight_map = {}
    for k, part in enumerate(shards, 1):
        name = f"model-{k:05d}-of-00002.safetensors"
        (repo / name).write_bytes(safetensors_bytes(part))
        weight_map.update({t: name for t, _ in part})
    (repo / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    proc = subprocess.Popen([binary, str(tmp_path / "repos")], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        endpoint = proc.stdout.readline().strip()
        assert endpoint.startswith("http://127.0.0.1:"), endpoint
        for k in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_CACHE",
                  "TRANSFORMERS_OFFLINE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE"):
            monkeypatch.delenv(k, raising=False)
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
        monkeypatch.setenv("VRAM_CACHE", str(tmp_path / "vram"))
        monkeypatch.setenv("NO_PROXY", "*")
        monkeypatch.setenv("no_proxy", "*")
        yield {"endpoint": endpoint, "cache": tmp_path / "hf" / "hub", "params": params(ts),
               "shards": [n for n in sorted(os.listdir(repo)) if n.endswith(".safetensors")]}
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)


def test_estimate_takes_a_hub_id(hub):
    e = vramkit.estimate("org/tiny", gpu="h100-80g")
    assert e.params == hub["params"]
    assert e.checkpoint_params == hub["params"]
    assert e.model == "org/tiny"
    # The same model from its config as a dict: the same figures.
    same = vramkit.estimate(TINY, gpu="h100-80g")
    assert same.peak_bytes == e.peak_bytes
    with pytest.raises(vramkit.VramError, match="revision `v9` not found"):
        vramkit.estimate("org/tiny", revision="v9")


def test_huggingface_hub_reads_what_vram_cached(hub, monkeypatch):
    hf = pytest.importorskip("huggingface_hub")
    vramkit.estimate("org/tiny")
    # Offline, huggingface_hub finds config.json and the index where vram put them ...
    for name in ("config.json", "model.safetensors.index.json"):
        path = hf.hf_hub_download("org/tiny", name, cache_dir=str(hub["cache"]), local_files_only=True)
        assert pathlib.Path(path).read_text().startswith("{")
    assert json.loads(pathlib.Path(hf.hf_hub_download(
        "org/tiny", "config.json", cache_dir=str(hub["cache"]), local_files_only=True)).read_text()) == TINY
    # ... and no shard: only headers were fetched, and they are not in its cache.
    for shard in hub["shards"]:
        with pytest.raises(hf.errors.LocalEntryNotFoundError):
            hf.hf_hub_download("org/tiny", shard, cache_dir=str(hub["cache"]), local_files_only=True)
    # Offline, vram needs nothing more either.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert vramkit.estimate("org/tiny").params == hub["params"]
