"""Pack /tmp/exp for the trip back, one archive per part (each well under 16 MiB): the campaign
folders (the checkpoint lives elsewhere, in /tmp/models) and the `vllm bench serve` results
without per-token gaps or texts."""

import json
import pathlib
import tarfile

exp = pathlib.Path("/tmp/exp")
out = pathlib.Path("/tmp/pack")
slim = pathlib.Path("/tmp/pack-vbs")
out.mkdir(exist_ok=True)
slim.mkdir(exist_ok=True)
for path in (exp / "vbs").glob("*.json"):
    data = json.loads(path.read_text())
    for key in ("itls", "generated_texts", "errors"):
        data.pop(key, None)
    (slim / path.name).write_text(json.dumps(data))
for part in ("ladder", "cap-chat", "cap-long"):
    if (exp / part).exists():
        with tarfile.open(out / f"steps-{part}.tgz", "w:gz") as tar:
            tar.add(exp / part, part)
with tarfile.open(out / "vllm-bench-serve.tgz", "w:gz") as tar:
    tar.add(slim, "vbs")
    for path in (exp / "vbs").glob("*.log"):
        tar.add(path, f"vbs/{path.name}")
    for path in (
        sorted(exp.glob("*.log")) + sorted(exp.glob("*.txt")) + [exp / "log", exp / "ckpt.err"]
    ):
        if path.exists():
            tar.add(path, path.name)
