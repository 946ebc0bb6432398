"""The measurement docs and the README's headline table come from benchmarks/reference_tables.py
over the shipped files in data/reference/."""

from __future__ import annotations

import importlib.util
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "data" / "reference"


def load_tables_module():
    spec = importlib.util.spec_from_file_location(
        "reference_tables", ROOT / "benchmarks" / "reference_tables.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# In the order they were measured (the script's own listing): the names say what was measured.
RUN_FILES = load_tables_module().run_files(REFERENCE)
CAMPAIGN_DIRS = load_tables_module().campaign_dirs(REFERENCE)


def shipped_runs() -> list[dict]:
    return [run for path in RUN_FILES for run in json.loads(path.read_text())["runs"]]


def rows(table: str) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in table.splitlines()[2:]
        if line.startswith("|")
    ]


def test_llm_table_has_every_ladder_stage_and_no_fidelity_or_quick_plan_run():
    tables = load_tables_module()
    runs = shipped_runs()
    table = rows(tables.llm_table(runs))
    stages = sum(
        len(run["phases"]) for run in runs if tables.is_ladder(run)
    )  # one row per measured stage
    assert len(table) == stages > 0
    seen = {(row[0], row[1]) for row in table}
    for model in ("llama-2-7b", "llama-2-13b"):
        assert {(model, "vllm"), (model, "pytorch"), (model, "torch_compile")} <= seen
    for row in table:  # output tok/s = req/s x 128 output tokens, within rounding
        rps, tok_s = float(row[4]), float(row[5].replace(",", ""))
        assert abs(tok_s - 128 * rps) <= max(2.0, 0.01 * tok_s)


def test_forward_ratio_is_against_eager_and_marks_runs_from_another_gpu():
    tables = load_tables_module()
    runs = shipped_runs()
    table = rows(tables.forward_table(runs))
    by_key = {(row[0], row[1], row[2]): row for row in table}
    for (model, batch, _backend), row in by_key.items():
        eager = by_key[(model, batch, "pytorch")]
        ratio = float(row[6].split()[0])
        expected = float(row[4].replace(",", "")) / float(eager[4].replace(",", ""))
        assert abs(ratio - expected) < 0.005 + 0.005 * expected  # cells are rounded
        # † exactly when the eager run used another GPU (its UUID prefix differs).
        assert row[6].endswith("†") == (row[3] != eager[3])


def test_fidelity_and_quick_plan_tables_read_every_campaign():
    tables = load_tables_module()
    steps = [
        step
        for path in CAMPAIGN_DIRS
        for campaign in sorted(path.glob("campaign-*.json"))
        for step in json.loads(campaign.read_text())["steps"]
    ]
    fidelity = rows(tables.fidelity_table(CAMPAIGN_DIRS))
    checks = [
        step
        for _, _, step in tables.campaign_steps(CAMPAIGN_DIRS)
        if step.get("kind") in ("fidelity", "fidelity_paired")
    ]
    assert len(fidelity) == len(checks) > sum(step.get("kind") == "fidelity" for step in steps)
    for row, step in zip(fidelity, checks, strict=True):
        ref, ours, ratio = (float(row[i].replace(",", "")) for i in (3, 4, 5))
        if step["kind"] == "fidelity":
            assert abs(ours / ref - ratio) < 0.002
            continue
        # Paired: the ratio is the median of the per-pair ratios, each ours / plain of one pair.
        pair_ratios = [
            pair["backend"]["output_throughput_tok_s"] / pair["plain"]["output_throughput_tok_s"]
            for pair in step["pairs"]
        ]
        assert abs(statistics.median(pair_ratios) - ratio) < 0.0005
        assert (
            abs(
                statistics.median(p["plain"]["output_throughput_tok_s"] for p in step["pairs"])
                - ref
            )
            < 0.5
        )
        assert f"{len(step['pairs'])} pairs" in row[2]
    quick = rows(tables.quick_plan_table(CAMPAIGN_DIRS))
    walls = [step["wall_s"] for step in steps if step.get("kind") == "quick_plan"]
    runs = sum(len(step["runs"]) for step in steps if step.get("kind") == "quick_plan")
    assert walls and len(quick) == runs
    assert {float(row[2]) for row in quick} == {round(w) for w in walls}


def test_prefix_cache_note_flags_references_that_reused_their_prompts():
    tables = load_tables_module()
    # Before the fix: no cached_prompt_tokens; warm-up (4) and single wave had seen prompts.
    assert "first 256 prompts had already run" in tables.prefix_cache_note(
        {"single_wave": {"requests": 256}}
    )
    assert "first 4 prompts" in tables.prefix_cache_note({"single_wave": None})
    assert tables.prefix_cache_note({"cached_prompt_tokens": 0}).endswith("hits: 0 tokens")


def test_vllm_reference_table_divides_the_same_hosts_backend_figure():
    tables = load_tables_module()
    table = rows(tables.vllm_reference_table(CAMPAIGN_DIRS))
    hosts = [p / "vllm-reference" for p in CAMPAIGN_DIRS if (p / "vllm-reference").is_dir()]
    expected = sum(
        len(list(h.glob("bench_throughput_*.json"))) + len(list(h.glob("offline_*.json")))
        for h in hosts
    )
    assert hosts and len(table) == expected
    for row in table:
        rate, ours, ratio = (float(row[i].replace(",", "")) for i in (3, 4, 5))
        assert abs(ours / rate - ratio) < 0.002
        assert 5_000 < rate < 20_000  # a 7B at 1,024 x 128 tokens on an H200, not a typo'd cell


def test_measurement_docs_are_the_generators_output():
    """docs/measurements/h200.md, docs/fidelity.md and docs/capacity-model.md are exactly what
    the script renders today from data/reference/: every table and every figure in their prose."""
    tables = load_tables_module()
    rendered = tables.render()
    assert set(rendered) == {"measurements/h200.md", "fidelity.md", "capacity-model.md"}
    for doc, text in rendered.items():
        assert (ROOT / "docs" / doc).read_text() == text, (
            f"docs/{doc} is out of date: run python benchmarks/reference_tables.py"
        )
    runs = shipped_runs()
    h200, fidelity = rendered["measurements/h200.md"], rendered["fidelity.md"]
    for table in (
        tables.llm_table(runs),
        tables.run_level_table(runs),
        tables.quick_plan_table(CAMPAIGN_DIRS),
        tables.forward_table(runs),
    ):
        assert table in h200, table.splitlines()[0]
    for table in (tables.fidelity_table(CAMPAIGN_DIRS), tables.vllm_reference_table(CAMPAIGN_DIRS)):
        assert table in fidelity, table.splitlines()[0]
    # the doc names every shipped file it was computed from
    for path in [*RUN_FILES, *CAMPAIGN_DIRS]:
        assert str(path.relative_to(ROOT)) in h200


def test_prose_ratios_are_computed_from_the_ladders():
    """A ratio in the prose divides the two runs' output tok/s at that level (and marks † only
    when they ran on different GPUs)."""
    tables = load_tables_module()
    runs = shipped_runs()
    vllm = tables.ladder_phase(runs, "llama-2-7b", "vllm", 16)[0]["output_throughput_tok_s"]
    eager = tables.ladder_phase(runs, "llama-2-7b", "pytorch", 16)[0]["output_throughput_tok_s"]
    assert tables.ratio(runs, "llama-2-7b", "vllm", "pytorch", 16) == f"{vllm / eager:.1f}×"
    # torch_compile 7B ran on another host than eager PyTorch 7B
    assert tables.ratio(runs, "llama-2-7b", "torch_compile", "pytorch", 16).endswith("†")
    with pytest.raises(KeyError):
        tables.ratio(runs, "llama-2-7b", "onnxruntime", "pytorch", 256)  # never run at 256


def test_check_mode_flags_a_stale_doc(tmp_path):
    tables = load_tables_module()
    docs = tmp_path / "docs"
    rendered = tables.render()
    for doc, text in rendered.items():
        (docs / doc).parent.mkdir(parents=True, exist_ok=True)
        (docs / doc).write_text(text.replace("| vllm |", "| vllm (edited) |", 1))
    script = ROOT / "benchmarks" / "reference_tables.py"
    stale = subprocess.run(
        [sys.executable, str(script), "--check", "--docs-dir", str(docs)],
        capture_output=True,
        text=True,
    )
    assert stale.returncode == 1 and "measurements/h200.md" in stale.stdout
    for doc, text in rendered.items():  # the fresh text, as the script (no --check) writes it
        (docs / doc).write_text(text)
    fresh = subprocess.run([sys.executable, str(script), "--check", "--docs-dir", str(docs)])
    assert fresh.returncode == 0


def test_readme_is_short_and_its_headline_table_is_generated():
    readme = (ROOT / "README.md").read_bytes()
    assert len(readme) <= 12_000, f"README.md is {len(readme):,} bytes; the limit is 12,000"
    tables = load_tables_module()
    assert tables.headline_table(shipped_runs()) in readme.decode()
    headline = rows(tables.headline_table(shipped_runs()))
    assert headline[0][0] == "vllm" and all(len(row) == len(headline[0]) for row in headline)


def test_files_and_folders_are_listed_in_the_order_they_were_measured():
    """The shipped names say what was measured, not when: the tables' order (and "the first
    such run") comes from the stored times, so every file and folder is listed, oldest first."""
    tables = load_tables_module()
    assert set(RUN_FILES) == set(REFERENCE.glob("h200_*_runs.json"))
    assert set(CAMPAIGN_DIRS) == {p for p in REFERENCE.glob("h200_*") if p.is_dir()}
    firsts = [
        min(tables.timestamp(run["created_at"]) for run in json.loads(path.read_text())["runs"])
        for path in RUN_FILES
    ]
    assert firsts == sorted(firsts) and len(set(firsts)) == len(firsts)
    started = [tables.measured_at(folder) for folder in CAMPAIGN_DIRS]
    assert started == sorted(started)
    # every runs file has its raw folder of the same name
    assert {path.name.removesuffix("_runs.json") for path in RUN_FILES} <= {
        folder.name for folder in CAMPAIGN_DIRS
    }


def test_vllm_reference_host_is_joined_to_its_campaign_by_gpu():
    """vllm-reference/host.json records the campaign file's name from before the rename; the
    campaign it ran beside is the one fingerprinted on the same GPU."""
    tables = load_tables_module()
    (host_path,) = REFERENCE.glob("h200_*/vllm-reference/host.json")
    host = json.loads(host_path.read_text())
    campaign = tables.host_campaign(host_path.parent.parent, host)
    assert campaign.name == "campaign-vllm-fidelity-second-gpu.json"
    fingerprint = tables.fingerprint_of(json.loads(campaign.read_text()))
    assert fingerprint.gpus[0].uuid == host["gpu_uuid"]
    with pytest.raises(ValueError, match="no campaign file"):
        tables.host_campaign(host_path.parent.parent, {"gpu_uuid": "GPU-not-there"})
