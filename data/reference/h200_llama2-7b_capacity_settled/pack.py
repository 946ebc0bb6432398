"""Pack /tmp/exp for the trip back: the campaign folders (checkpoints left out) and the
`vllm bench serve` results without per-token gaps or texts."""

import json
import pathlib
import tarfile

exp = pathlib.Path("/tmp/exp")
out = pathlib.Path("/tmp/pack")
out.mkdir(exist_ok=True)
for path in (exp / "vbs").glob("*.json"):
    data = json.loads(path.read_text())
    for key in ("itls", "generated_texts", "errors"):
        data.pop(key, None)
    (out / path.name).write_text(json.dumps(data))
with tarfile.open("/tmp/pack.tgz", "w:gz") as tar:
    tar.add(out, "vbs")
    for path in (exp / "vbs").glob("*.log"):
        tar.add(path, f"vbs/{path.name}")
    for name in (
        "log",
        "nvidia-smi.txt",
        "bench-env.txt",
        "vllm-serve.log",
        "ckpt.err",
        "cap-inproc.log",
        "cap-openai.log",
        "cap-inproc",
        "cap-openai",
    ):
        if (exp / name).exists():
            tar.add(exp / name, name)
