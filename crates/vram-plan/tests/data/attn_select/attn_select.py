"""Runs a vLLM release's own `is_mm_prefix_lm` and, for a chosen FLASH_ATTN, its own
`validate_configuration` and `get_attn_backend_cls` refusal text on the CPU, for the configs
listed, and prints one JSON line per case. Usage: python attn_select.py <release>/vllm <version>

Taken from the release's files as they are, by `ast` (so torch and CUDA are not needed):
- `is_mm_prefix_lm`: `ModelConfig.is_mm_prefix_lm` (`config/model.py`, to 0.19), or from 0.20
  `ModelArchConfigConvertorBase.is_mm_prefix_lm` and, for the model types
  `MODEL_ARCH_CONFIG_CONVERTORS` maps to it, `Gemma4ModelArchConfigConvertor.is_mm_prefix_lm`
  (`transformers_utils/model_arch_config_convertor.py`). A config is a namespace holding only
  the keys it has, as transformers keeps them (so `hasattr` answers as on a real config).
- the refusal: `AttentionBackend.validate_configuration` (`v1/attention/backend.py`) on a
  stand-in FlashAttention class with the release's `FlashAttentionBackend.supports_head_size`
  and the base class's `supports_mm_prefix`; every other check passes (16-bit dtype, the
  model's KV dtype, block size 16, an H100), which is the domain vram judges; and the
  `ValueError` text of `CudaPlatform.get_attn_backend_cls` (`platforms/cuda.py`), its f-string
  evaluated with the release's `AttentionBackendEnum` member."""
import __future__, ast, enum, inspect, json, sys, types

root, version = sys.argv[1], sys.argv[2]


def parse(path):
    return ast.parse(open(f"{root}/{path}").read())


def method(tree, cls, name):
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for f in node.body:
                if isinstance(f, ast.FunctionDef) and f.name == name:
                    f = ast.FunctionDef(**{**f.__dict__, "decorator_list": []})
                    ns = {}
                    mod = ast.fix_missing_locations(ast.Module(body=[f], type_ignores=[]))
                    exec(compile(mod, path_of[id(tree)], "exec", flags=__future__.annotations.compiler_flag), ns)
                    return ns[name]
    return None


path_of = {}


def load(path):
    try:
        t = parse(path)
    except FileNotFoundError:
        return None
    path_of[id(t)] = path
    return t


conv = load("transformers_utils/model_arch_config_convertor.py")
base = conv and method(conv, "ModelArchConfigConvertorBase", "is_mm_prefix_lm")
if base:
    gemma4 = method(conv, "Gemma4ModelArchConfigConvertor", "is_mm_prefix_lm")
    routed = set()
    for node in conv.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Dict):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            if getattr(target, "id", None) == "MODEL_ARCH_CONFIG_CONVERTORS":
                for k, v in zip(node.value.keys, node.value.values):
                    if getattr(v, "id", None) == "Gemma4ModelArchConfigConvertor":
                        routed.add(k.value)

    def mm_prefix(hf, text):
        f = gemma4 if getattr(hf, "model_type", None) in routed and gemma4 else base
        return bool(f(types.SimpleNamespace(hf_config=hf, hf_text_config=text)))
else:
    model = load("config/model.py")
    own = method(model, "ModelConfig", "is_mm_prefix_lm")

    def mm_prefix(hf, text):
        if own is None:  # releases before the property
            return False
        return bool(own(types.SimpleNamespace(hf_config=hf, hf_text_config=text)))


def ns(d):
    return types.SimpleNamespace(**d)


CASES = [
    ("gemma3 listed", {"model_type": "gemma3"}, None),
    ("gemma3 own false", {"model_type": "gemma3", "is_mm_prefix_lm": False}, None),
    ("gemma3 own null", {"model_type": "gemma3", "is_mm_prefix_lm": None}, None),
    ("llama own true", {"model_type": "llama", "is_mm_prefix_lm": True}, None),
    ("llama", {"model_type": "llama"}, None),
    ("paligemma listed", {"model_type": "paligemma"}, None),
    ("molmo2 listed", {"model_type": "molmo2"}, None),
    ("bagel listed", {"model_type": "bagel"}, None),
    ("umm listed", {"model_type": "umm"}, None),
    ("moondream3 listed", {"model_type": "moondream3"}, None),
    ("gemma4 vision", {"model_type": "gemma4"}, {"use_bidirectional_attention": "vision"}),
    ("gemma4 null", {"model_type": "gemma4"}, {"use_bidirectional_attention": None}),
    ("gemma4 own true", {"model_type": "gemma4", "is_mm_prefix_lm": True},
     {"use_bidirectional_attention": None}),
]

for name, hf, text in CASES:
    hf_ns = ns(hf)
    text_ns = ns(text) if text is not None else hf_ns
    print(json.dumps({"version": version, "case": name, "config": hf, "text_config": text,
                      "mm_prefix": mm_prefix(hf_ns, text_ns)}))

# The refusal of a chosen FLASH_ATTN.
backend = load("v1/attention/backend.py") or load("attention/backends/abstract.py")
validate = backend and method(backend, "AttentionBackend", "validate_configuration")
fa = load("v1/attention/backends/flash_attn.py")
cuda = load("platforms/cuda.py")
if validate and fa and cuda:
    supports_mm_prefix = method(backend, "AttentionBackend", "supports_mm_prefix")
    head = method(fa, "FlashAttentionBackend", "supports_head_size")
    message = None
    for node in ast.walk(cuda):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            arg = node.exc.args[0] if node.exc.args else None
            if isinstance(arg, ast.JoinedStr) and "is not valid for this configuration" in ast.unparse(arg):
                message = compile(ast.Expression(body=arg), "platforms/cuda.py", "eval")
    assert message is not None

    Registry = enum.Enum("AttentionBackendEnum", {"FLASH_ATTN": "flash_attn", "TRITON_ATTN": "triton_attn"})

    class FlashAttention:
        pass

    passes = lambda *a, **k: True
    for attr in ["supports_dtype", "supports_kv_cache_dtype", "supports_block_size",
                 "supports_compute_capability"]:
        setattr(FlashAttention, attr, classmethod(passes))
    FlashAttention.supports_head_size = classmethod(head)
    FlashAttention.supports_mm_prefix = classmethod(supports_mm_prefix)
    FlashAttention.is_mla = classmethod(lambda cls: False)
    FlashAttention.supports_sink = classmethod(lambda cls: False)
    FlashAttention.is_sparse = classmethod(lambda cls: False)
    FlashAttention.supports_per_head_quant_scales = classmethod(lambda cls: False)
    FlashAttention.supports_attn_type = classmethod(lambda cls, t: True)
    FlashAttention.supports_combination = classmethod(lambda cls, *a: None)
    # 0.22's supports_head_size asks whether FlashAttention 4 is built; vram does not know it.
    head.__globals__["is_fa_version_supported"] = lambda v: False
    FlashAttention.validate_configuration = classmethod(validate)
    params = inspect.signature(validate).parameters
    for name, head_size, use_mm_prefix in [("gemma3", 256, True), ("gemma4 vision", 512, True),
                                           ("gemma4 text", 512, False), ("llama", 128, False)]:
        kwargs = dict(head_size=head_size, dtype="bfloat16", kv_cache_dtype=None, block_size=16,
                      use_mla=False, has_sink=False, use_sparse=False,
                      use_mm_prefix=use_mm_prefix, use_per_head_quant_scales=False,
                      device_capability=(9, 0), attn_type="decoder")
        kwargs = {k: v for k, v in kwargs.items() if k in params}
        reasons = FlashAttention.validate_configuration(**kwargs)
        error = None
        if reasons:
            text = eval(message, {"selected_backend": Registry.FLASH_ATTN,
                                  "invalid_reasons": reasons})
            error = f"ValueError: {text}"
        print(json.dumps({"version": version, "refusal": name, "head_size": head_size,
                          "mm_prefix": use_mm_prefix, "error": error}))
