"""`bench calibrate`: the campaign through the real CLI and launch path on the fake backend (a
labelled test double: the harness, store and record are real; the engine's timings are not),
the record's store table, its schema guard and the one-line errors. The real engine run is
tests/bench/test_calibrate_cpu.py (slow)."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from bench.cli import main
from bench.core.calibration import CalibrationRecord, precision_class
from bench.core.config import PrecisionConfig
from bench.core.errors import UserError
from bench.storage.calibrations import (
    get_calibration,
    list_calibrations,
    parse_record,
    put_calibration,
)
from bench.storage.store import ResultStore

FAKE_CAMPAIGN = [
    "calibrate",
    "--backend",
    "fake",
    "--model",
    "tiny-llama",
    "--device",
    "cpu",
    "--engine-arg",
    "itl_s=0.02",
    "--engine-arg",
    "ttft_s=0.05",
    "--mix",
    "16x8",
    "--ladder",
    "1,4",
    "--stage-duration-s",
    "1",
    "--settled-probes",
    "3",
    "--settle-s",
    "0.5",
    "--level-duration-s",
    "1.5",
    "--budget-s",
    "300",
]


@pytest.fixture(scope="module")
def fake_calibration(tmp_path_factory):
    """One campaign of the fake backend: (store path, record written with --out, stderr)."""
    folder = tmp_path_factory.mktemp("calibrate")
    store, out = folder / "store.sqlite", folder / "record.json"
    err = io.StringIO()  # a module fixture cannot take capsys
    with contextlib.redirect_stderr(err):
        code = main([*FAKE_CAMPAIGN, "--store", str(store), "--out", str(out)])
    assert code == 0, err.getvalue()
    record = CalibrationRecord.model_validate_json(out.read_text())
    return store, record, err.getvalue()


def test_campaign_stores_a_record_of_ladder_and_settled_levels(fake_calibration):
    store_path, record, _ = fake_calibration
    assert record.engine == "fake" and record.device_type == "cpu"
    assert record.precision_class == "16-bit weights"
    ladder = [level for level in record.levels if level.kind == "ladder"]
    assert [level.level for level in ladder] == [1.0, 4.0]
    assert all(level.prompt_tokens == 16 and level.output_tokens == 8 for level in record.levels)
    settled = record.settled_levels
    assert 1 <= len(settled) <= 3
    assert all(level.over == "rate" and level.tpot_ms is not None for level in settled)
    # the settled search starts at 0.6 x the best ladder throughput, judged after its settle
    best = max(level.request_throughput_rps for level in ladder)
    assert settled[0].level == pytest.approx(0.6 * best)
    assert all(not level.phase.endswith("-settle") for level in settled)
    assert any("0.5 s of arrivals before each is judged" in note for note in record.notes)
    assert len(record.run_ids) == 2 and record.elapsed_s <= record.budget_s
    assert record.environment is not None
    with ResultStore(store_path, create=False) as store:
        assert get_calibration(store, record.calibration_id) == record
        assert list_calibrations(store, engine="fake", device_type="cpu") == [record]
        assert list_calibrations(store, engine="vllm") == []
        assert all(store.has_run(run_id) for run_id in record.run_ids)


def test_campaign_reports_progress_with_a_time_estimate(fake_calibration):
    _, _, err = fake_calibration
    lines = [line for line in err.splitlines() if line.startswith("[")]
    assert lines[0].startswith("[1/2] ladder 16/8: loading")
    assert any(line.startswith("[2/2] settled levels from") for line in lines)
    assert all(" s of ~" in line for line in lines)


def test_a_run_past_the_budget_is_skipped_and_noted(tmp_path, capsys):
    # The first run always runs (its load time is unknown until measured); the settled search
    # (0.5 s settle + 5 s judged + the measured load) cannot fit in what is left of 2.5 s.
    args = [*FAKE_CAMPAIGN[:-1], "2.5", "--no-store", "--json"]
    args[args.index("--level-duration-s") + 1] = "5"
    assert main(args) == 0
    record = CalibrationRecord.model_validate_json(capsys.readouterr().out)
    assert record.settled_levels == []
    assert any("skipped, it would overrun the 2.5 s budget" in n for n in record.notes), (
        record.notes
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("--mix", "16y8"), "--mix '16y8': give PROMPTxOUTPUT tokens"),
        (("--ladder", "1,x"), "--ladder '1,x': give comma-separated numbers"),
        (("--budget-s", "601"), "--budget-s"),
        (("--stage-duration-s", "200"), "one ladder takes 400 s, over the 300 s budget"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(change, message, tmp_path, capsys):
    args = list(FAKE_CAMPAIGN)
    flag, value = change
    args[args.index(flag) + 1] = value
    assert main([*args, "--store", str(tmp_path / "s.sqlite")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


def test_a_newer_record_schema_is_refused_in_one_line(fake_calibration):
    _, record, _ = fake_calibration
    data = json.loads(record.model_dump_json())
    data["schema_version"] = record.schema_version + 1
    with pytest.raises(UserError, match="record schema 2; this version reads up to 1"):
        parse_record(record.calibration_id, json.dumps(data))


def test_a_stored_id_is_not_overwritten(fake_calibration, tmp_path):
    _, record, _ = fake_calibration
    with ResultStore(tmp_path / "s.sqlite") as store:
        put_calibration(store, record)
        with pytest.raises(Exception, match=r"UNIQUE|unique"):
            put_calibration(store, record)


def test_precision_class_reads_weights_and_kv_formats():
    assert precision_class(PrecisionConfig(dtype="bfloat16")) == "16-bit weights"
    fp8 = PrecisionConfig(dtype="bfloat16", quantization="fp8", kv_cache_dtype="fp8")
    assert precision_class(fp8) == "fp8 weights + fp8 KV"


def test_check_holds_on_the_same_engine_and_not_on_a_slower_one(fake_calibration, capsys):
    store_path, record, _ = fake_calibration
    base = ["calibrate", "--check", record.calibration_id, "--store", str(store_path)]
    # the fake's timings are sleeps of tens of ms: on a busy shared machine they stretch by
    # milliseconds (with 2 ms sleeps a check at load average 36 measured TPOT x0.59)
    assert main([*base, "--tolerance", "0.5"]) == 0
    holds = capsys.readouterr().out.strip()
    assert holds.startswith(f"calibration {record.calibration_id} holds: ") and "\n" not in holds
    # the same plan with a 5x slower first token: TTFT p50 about 5x, so it no longer holds
    assert main([*base, "--tolerance", "0.5", "--engine-arg", "ttft_s=0.25"]) == 1
    drifted = capsys.readouterr().out.strip()
    assert f"calibration {record.calibration_id} no longer holds: c1 TTFT p50 x" in drifted
    assert "run `bench calibrate` again" in drifted


def test_check_of_an_unknown_id_is_one_line(fake_calibration, capsys):
    store_path, _, _ = fake_calibration
    assert main(["calibrate", "--check", "cal-nope", "--store", str(store_path)]) == 2
    assert capsys.readouterr().err.strip() == "error: no calibration cal-nope in the store"
