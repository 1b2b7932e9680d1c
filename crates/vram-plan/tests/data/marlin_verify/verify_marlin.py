"""Runs a vLLM release's own `_check_marlin_supported` (the text `verify_marlin_supported` raises
from `AutoGPTQLinearMethod.__init__`) on the CPU, for the GPUs and GPTQ group sizes listed, and
prints one JSON line per case. Usage: python verify_marlin.py <release>/vllm <version>

The functions and `MARLIN_SUPPORTED_GROUP_SIZES` are taken from the release's
`model_executor/layers/quantization/utils/marlin_utils.py` as they are (by `ast`, so the module's
torch/CUDA imports are not needed); `ScalarType` is the release's `scalar_type.py`. The platform is
a stand-in that reports the case's compute capability, CUDA or ROCm."""
import ast, importlib.util, json, sys, types

root, version = sys.argv[1], sys.argv[2]
spec = importlib.util.spec_from_file_location("scalar_type", f"{root}/scalar_type.py")
st = importlib.util.module_from_spec(spec)
spec.loader.exec_module(st)

src = open(f"{root}/model_executor/layers/quantization/utils/marlin_utils.py").read()
keep = {"query_marlin_supported_quant_types", "_check_marlin_supported", "MARLIN_SUPPORTED_GROUP_SIZES"}
body = [
    n for n in ast.parse(src).body
    if (isinstance(n, ast.FunctionDef) and n.name in keep)
    or (isinstance(n, ast.Assign) and any(getattr(t, "id", None) in keep for t in n.targets))
]
assert len(body) == 3, [getattr(n, "name", None) for n in body]
code = compile(ast.Module(body=body, type_ignores=[]), "marlin_utils.py", "exec")


class Capability(tuple):
    def to_int(self):
        return self[0] * 10 + self[1]


def run(cap, rocm, group):
    platform = types.SimpleNamespace(
        is_cpu=lambda: False,
        is_xpu=lambda: False,
        is_rocm=lambda: rocm,
        get_device_capability=lambda: Capability(cap),
    )
    ns = {
        "current_platform": platform,
        "scalar_types": st.scalar_types,
        "ScalarType": st.ScalarType,
        "_query_cpu_marlin_supported_quant_types": None,
    }
    exec(code, ns)
    # AutoGPTQConfig.TYPE_MAP[(4, True)]: 4-bit symmetric GPTQ.
    ok, msg = ns["_check_marlin_supported"](st.scalar_types.uint4b8, group, False)
    return None if ok else f"ValueError: {msg}"


for gpu, cap, rocm in [("v100-16g", (7, 0), False), ("gtx-1080", (6, 1), False),
                       ("t4", (7, 5), False), ("h100-80g", (9, 0), False),
                       ("mi300x", (9, 4), True)]:
    for group in [128, -1, 256]:
        print(json.dumps({"version": version, "gpu": gpu, "group_size": group,
                          "error": run(cap, rocm, group)}))
