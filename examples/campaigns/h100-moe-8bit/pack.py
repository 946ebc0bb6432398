"""Pack /tmp/exp for the trip back into OUT (argv[1]): one archive per plan's campaign folder
(records included) and one of the logs with the GPU's fingerprint files, so every poll brings
back everything finished so far."""

import pathlib
import sys
import tarfile

exp = pathlib.Path("/tmp/exp")
out = pathlib.Path(sys.argv[1])
for part in ("moe", "8bit"):
    if (exp / part).exists():
        with tarfile.open(out / f"steps-{part}.tgz", "w:gz") as tar:
            tar.add(exp / part, part)
with tarfile.open(out / "logs.tgz", "w:gz") as tar:
    for pattern in ("*.log", "*.txt", "log"):
        for path in sorted(exp.glob(pattern)):
            tar.add(path, path.name)
