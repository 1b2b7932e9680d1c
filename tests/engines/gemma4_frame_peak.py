"""The peak of one frame through transformers 5.24's Gemma 4 vision tower, as vLLM 0.19's
`gemma4_mm.py` runs it in the encoder profile (`AutoModel.from_config(vision_config)`, eager,
one 224 x 224 dummy frame at 70 soft tokens: 576 real patches padded to 630, positions -1 on the
padding), traced on the CPU with `tracker.Peak`. `crates/vram-plan/src/capacity/encoder.rs`
`gemma4_frame_peak` is checked against its figure (22,654,800 bytes for the 26B-A4B's tower).

    python tests/engines/gemma4_frame_peak.py crates/vram-model/data/catalog/gemma-4-26b-a4b.json
"""
import json
import sys

import torch
from transformers import AutoModel
from transformers.models.gemma4.configuration_gemma4 import Gemma4VisionConfig

from tracker import Peak

SKIP = ("_name_or_path", "architectures", "id2label", "label2id")


def main(path):
    c = json.load(open(path))["vision_config"]
    cfg = Gemma4VisionConfig(**{k: v for k, v in c.items() if k not in SKIP})
    side = 24  # 384 / 16: Gemma4ImageProcessor's resize of 224 x 224 at 70 soft tokens
    grid = torch.stack(torch.meshgrid(torch.arange(side), torch.arange(side), indexing="xy"), -1)
    real = side * side
    padded = 70 * cfg.pooling_kernel_size ** 2
    positions = torch.nn.functional.pad(grid.reshape(real, 2), (0, 0, 0, padded - real), value=-1)[None]
    pixels = torch.zeros(1, padded, 3 * cfg.patch_size ** 2, dtype=torch.bfloat16)
    torch.set_default_dtype(torch.bfloat16)
    model = AutoModel.from_config(cfg).eval()
    with torch.no_grad():
        mode = Peak()
        with mode:
            model(pixels, positions, output_length=padded // cfg.pooling_kernel_size ** 2)
    print(json.dumps({"patches": padded, "peak": mode.peak, "op": mode.op_at_peak,
                      "at_peak": mode.at_peak[:16]}))


if __name__ == "__main__":
    main(sys.argv[1])
