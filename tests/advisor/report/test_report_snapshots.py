"""Every example profile's report is the same as the one recorded in snapshots/, except its
timestamp and the fingerprint of the machine that built it.

A refactor must not change what a review reads: this test builds each example profile's report
in-process (the real `assemble_report`, an empty store, the shipped data/reference: not the
seed-only folder the other advisor tests get) and compares
its JSON, field by field, with the recorded one. A change meant to alter reports re-records
them: `UPDATE_REPORT_SNAPSHOTS=1 python -m pytest tests/advisor/report/test_report_snapshots.py`,
and the diff of the commit says which profiles moved.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.advisor.conftest import SHIPPED_REFERENCE_DIR

REPO = Path(__file__).resolve().parents[3]
PROFILES = sorted((REPO / "examples" / "profiles").glob("*.y*ml"))
SNAPSHOTS = Path(__file__).with_name("snapshots")
UPDATE = os.environ.get("UPDATE_REPORT_SNAPSHOTS") == "1"
MACHINE_DEPENDENT = ("environment",)
"""Report fields that describe the machine building the report (its free memory changes between
two builds), not the answer."""


def normalised(report_json: str) -> dict[str, Any]:
    """The report as data without its build time and the building machine's fingerprint."""
    data = json.loads(report_json)
    data["meta"].pop("generated_at")
    for key in MACHINE_DEPENDENT:
        data.pop(key)
    return data


def differences(old: Any, new: Any, path: str = "") -> list[str]:
    """JSON paths where two documents differ, with both values (shortened)."""
    if isinstance(old, dict) and isinstance(new, dict):
        found = []
        for key in sorted(set(old) | set(new)):
            if key not in new:
                found.append(f"{path}/{key}: removed")
            elif key not in old:
                found.append(f"{path}/{key}: added")
            else:
                found += differences(old[key], new[key], f"{path}/{key}")
        return found
    if isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            return [f"{path}: {len(old)} items -> {len(new)}"]
        pairs = enumerate(zip(old, new, strict=True))
        return [line for i, (a, b) in pairs for line in differences(a, b, f"{path}/{i}")]
    return [] if old == new else [f"{path}: {str(old)[:80]!r} -> {str(new)[:80]!r}"]


@pytest.fixture(scope="module")
def empty_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    from bench.storage.store import ResultStore

    path = tmp_path_factory.mktemp("store") / "empty.sqlite"
    ResultStore(path).close()
    return str(path)


def test_a_snapshot_for_every_example_profile() -> None:
    recorded = {path.name.removesuffix(".json.gz") for path in SNAPSHOTS.glob("*.json.gz")}
    assert recorded == {path.stem for path in PROFILES} or UPDATE


@pytest.mark.parametrize("profile", PROFILES, ids=[path.stem for path in PROFILES])
def test_report_unchanged(profile: Path, empty_store: str) -> None:
    from advisor.report.build import assemble_report
    from advisor.report.json import render_json

    report = normalised(
        render_json(assemble_report(profile, [], empty_store, reference_dir=SHIPPED_REFERENCE_DIR))
    )
    snapshot = SNAPSHOTS / f"{profile.stem}.json.gz"
    if UPDATE:
        SNAPSHOTS.mkdir(exist_ok=True)
        text = json.dumps(report, indent=1, sort_keys=True) + "\n"
        # mtime=0: the same report gives the same bytes, so git sees no change
        snapshot.write_bytes(gzip.compress(text.encode("utf-8"), mtime=0))
        return
    recorded = json.loads(gzip.decompress(snapshot.read_bytes()))
    changed = differences(recorded, report)
    assert not changed, f"{len(changed)} report fields changed:\n" + "\n".join(changed[:30])
