"""Pack /tmp/exp for the trip back into OUT (argv[1]), one archive per part, each well under
16 MiB: the campaign folders (records included) and the quality results with the logs and the
GPU's fingerprint files."""

import pathlib
import sys
import tarfile

exp = pathlib.Path("/tmp/exp")
out = pathlib.Path(sys.argv[1])
for part in ("pytorch", "onnxruntime", "torch-compile"):
    if (exp / part).exists():
        with tarfile.open(out / f"steps-{part}.tgz", "w:gz") as tar:
            tar.add(exp / part, part)
with tarfile.open(out / "quality-and-logs.tgz", "w:gz") as tar:
    for pattern in ("quality-*", "*.log", "*.txt"):
        for path in sorted(exp.glob(pattern)):
            tar.add(path, path.name)
    if (exp / "log").exists():
        tar.add(exp / "log", "log")
