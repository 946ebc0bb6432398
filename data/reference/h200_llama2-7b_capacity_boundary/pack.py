"""Pack /tmp/exp for the trip back: `vllm bench serve` results without per-token gaps or texts."""

import json
import pathlib
import tarfile

out = pathlib.Path("/tmp/pack")
out.mkdir(exist_ok=True)
for path in pathlib.Path("/tmp/exp/vbs").glob("*.json"):
    data = json.loads(path.read_text())
    for key in ("itls", "generated_texts", "errors"):
        data.pop(key, None)
    (out / path.name).write_text(json.dumps(data))
with tarfile.open("/tmp/pack.tgz", "w:gz") as tar:
    tar.add(out, "vbs")
    for name in ("log3", "nvidia-smi.txt", "bench-env.txt", "vllm-serve.log"):
        if (pathlib.Path("/tmp/exp") / name).exists():
            tar.add(f"/tmp/exp/{name}", name)
