"""Tests of the environment fingerprint and the read-only preflight (fake NVML = test double)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.core.fingerprint import Fingerprint
from bench.run.environment import fingerprint, library_versions, preflight, torch_build_info
from tests.bench.fake_nvml import (
    SETTING_CALL,
    FakeGpu,
    FakeNvml,
    FakeProcess,
    NVMLError_DriverNotLoaded,
)

GB = 10**9


def tuned_gpu(**changes) -> FakeGpu:
    """A fake GPU set up the way seed 3.1 asks: nothing for the preflight to say."""
    settings = {
        "name": "NVIDIA A100 80GB PCIe",
        "memory_total_bytes": 80 * GB,
        "memory_used_bytes": 1 * GB,
        "persistence_mode": 1,
        "app_sm_clock_mhz": 1410,
        "app_mem_clock_mhz": 1512,
        "default_app_sm_clock_mhz": 1065,
        "default_app_mem_clock_mhz": 1512,
    }
    settings.update(changes)
    return FakeGpu(**settings)


def rules(items) -> list[tuple[str, str]]:
    return [(item.severity, item.what) for item in items]


# --------------------------------------------------------------------------- fingerprint


def test_fingerprint_gpu_fields_from_fake():
    fake = FakeNvml(
        [
            tuned_gpu(
                ecc_mode=(1, 1),
                mig_mode=(0, 0),
                processes=[FakeProcess(pid=424242, usedGpuMemory=3 * GB)],
            )
        ],
        driver_version="550.54.15",
        cuda_driver_version=12040,
    )
    typed = fingerprint(nvml=fake)
    assert typed.primary_gpu_name == "NVIDIA A100 80GB PCIe"
    # The stored form: the keys and values of the dict this model replaced, JSON-ready.
    fp = json.loads(typed.model_dump_json())
    assert fp["gpu_available"] is True and fp["gpu_reason"] is None
    assert fp["driver_version"] == "550.54.15"
    assert fp["cuda_driver_version"] == "12.4"
    gpu = fp["gpus"][0]
    assert gpu["name"] == "NVIDIA A100 80GB PCIe"
    assert gpu["uuid"].startswith("GPU-")
    assert gpu["memory_total_bytes"] == 80 * GB
    assert gpu["memory_free_bytes"] == 79 * GB
    assert gpu["driver_version"] == "550.54.15" and gpu["cuda_driver_version"] == "12.4"
    assert gpu["max_sm_clock_mhz"] == 1410 and gpu["max_memory_clock_mhz"] == 1512
    assert gpu["applications_sm_clock_mhz"] == 1410
    assert gpu["default_applications_sm_clock_mhz"] == 1065
    assert gpu["best_applications_clocks_mhz"] == {"memory": 1512, "sm": 1410}
    assert gpu["persistence_mode"] is True
    assert gpu["power_limit_w"] == 300.0 and gpu["power_default_limit_w"] == 300.0
    assert gpu["ecc_enabled"] is True and gpu["mig_enabled"] is False
    assert gpu["compute_mode"] == "Default"
    assert fp["gpu_processes"] == [
        {"pid": 424242, "name": "fake-process-424242", "used_bytes": 3 * GB, "device": 0}
    ]
    assert fp["executor"]["name"] == "local"
    assert Fingerprint.model_validate(fp) == typed  # round trip


def test_fingerprint_host_fields():
    fp = fingerprint(nvml=FakeNvml())
    assert fp.python.version == sys.version.split()[0]
    assert fp.cpu.logical_cores == os.cpu_count()
    assert fp.host_memory.total_bytes > 0
    assert fp.os.kernel == os.uname().release
    assert fp.hostname
    assert fp.libraries["pydantic"] is not None
    assert fp.libraries["tensorrt_llm"] is None or isinstance(fp.libraries["tensorrt_llm"], str)


def test_own_process_is_not_an_other_process():
    fake = FakeNvml([tuned_gpu(processes=[FakeProcess(pid=os.getpid(), usedGpuMemory=GB)])])
    assert fingerprint(nvml=fake).gpu_processes == []


def test_unsupported_readings_are_none_not_errors():
    gpu = tuned_gpu(
        unsupported={
            "nvmlDeviceGetApplicationsClock",
            "nvmlDeviceGetEccMode",
            "nvmlDeviceGetPowerManagementDefaultLimit",
            "nvmlDeviceGetSupportedMemoryClocks",
        }
    )
    fp = fingerprint(nvml=FakeNvml([gpu]))
    gpu_fp = fp.gpus[0]
    assert gpu_fp.applications_sm_clock_mhz is None
    assert gpu_fp.ecc_enabled is None
    assert gpu_fp.power_default_limit_w is None
    assert gpu_fp.best_applications_clocks_mhz is None
    items = preflight(fp)
    clock_item = next(item for item in items if "clocks are not pinned" in item.what)
    assert clock_item.admin_command == "sudo nvidia-smi -i 0 -lgc 1410,1410"  # no -ac pair known


def test_no_gpu_fingerprint_and_preflight():
    fake = FakeNvml(init_error=NVMLError_DriverNotLoaded("Driver Not Loaded"))
    fp = fingerprint(nvml=fake)
    assert fp.gpu_available is False
    assert fp.gpu_reason == "NVIDIA driver is not loaded"
    assert fp.gpus == [] and fp.gpu_processes == []
    items = preflight(fp)
    assert rules(items) == [("info", "CPU-only machine: GPU figures not measured")]
    assert "NVIDIA driver is not loaded" in items[0].why


def test_real_fingerprint_is_fast_and_consistent():
    fp = fingerprint()
    if not fp.gpu_available:
        assert fp.gpu_reason
        assert preflight(fp)[0].what == "CPU-only machine: GPU figures not measured"
    assert Fingerprint.model_validate_json(fp.model_dump_json()) == fp


def test_library_versions_never_import():
    code = (
        "import sys; from bench.run.environment import fingerprint; fingerprint(); "
        "heavy = [m for m in ('torch', 'vllm', 'transformers', 'onnxruntime', 'tensorrt_llm') "
        "if m in sys.modules]; print(heavy)"
    )
    output = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert output.stdout.strip() == "[]"
    assert library_versions(("pydantic", "surely-not-installed-xyz")) == {
        "pydantic": library_versions(("pydantic",))["pydantic"],
        "surely-not-installed-xyz": None,
    }


def test_torch_build_info_read_without_import():
    info = torch_build_info()
    if info is None:
        pytest.skip("torch is not installed here")
    from importlib.metadata import version

    # a CUDA wheel's metadata says "2.11.0" where torch/version.py says "2.11.0+cu130"
    assert info.version.split("+")[0] == version("torch").split("+")[0]
    assert info.cuda is None or isinstance(info.cuda, str)


# --------------------------------------------------------------------------- read-only


def test_fingerprint_and_preflight_never_change_settings():
    fake = FakeNvml([tuned_gpu(persistence_mode=0, power_limit_mw=200_000), tuned_gpu()])
    preflight(fingerprint(nvml=fake))
    assert fake.calls, "the fake recorded nothing: the test would prove nothing"
    assert fake.setting_calls() == []
    assert all(
        name.startswith(("nvmlInit", "nvmlShutdown", "nvmlDeviceGet", "nvmlSystemGet"))
        for name in fake.calls
    )


def test_the_setting_call_detector_works():
    fake = FakeNvml()
    with pytest.raises(fake.NVMLError_NotSupported):
        fake.nvmlDeviceSetPersistenceMode(fake.gpus[0], 1)
    with pytest.raises(fake.NVMLError_NotSupported):
        fake.nvmlDeviceResetGpuLockedClocks(fake.gpus[0])
    assert fake.setting_calls() == [
        "nvmlDeviceSetPersistenceMode",
        "nvmlDeviceResetGpuLockedClocks",
    ]
    assert not SETTING_CALL.match("nvmlDeviceGetPersistenceMode")


# --------------------------------------------------------------------------- preflight rules


def test_tuned_gpu_has_no_warnings():
    items = preflight(fingerprint(nvml=FakeNvml([tuned_gpu()])))
    assert [item for item in items if item.severity == "warn"] == []


def test_persistence_off():
    items = preflight(fingerprint(nvml=FakeNvml([tuned_gpu(persistence_mode=0)])))
    item = next(item for item in items if "persistence mode is off" in item.what)
    assert item.severity == "warn"
    assert item.admin_command == "sudo nvidia-smi -i 0 -pm 1"


def test_clocks_at_default_give_real_supported_values():
    gpu = tuned_gpu(
        app_sm_clock_mhz=1065,
        default_app_sm_clock_mhz=1065,
        max_sm_clock_mhz=1980,
        supported_clocks_mhz={2619: [1980, 1755, 345], 1593: [1200]},
    )
    items = preflight(fingerprint(nvml=FakeNvml([gpu])))
    item = next(item for item in items if "clocks are not pinned" in item.what)
    assert item.severity == "warn"
    assert item.admin_command == (
        "sudo nvidia-smi -i 0 -lgc 1980,1980  # or: sudo nvidia-smi -i 0 -ac 2619,1980"
    )


def test_default_clocks_already_at_max_suggest_only_locking():
    # As read on an H200 (driver 580): application clocks default = max = 3201,1980 MHz, yet
    # under load the SM clock ran at 1440-1470 MHz (power limit): only -lgc pins it.
    gpu = tuned_gpu(
        app_sm_clock_mhz=1980,
        default_app_sm_clock_mhz=1980,
        app_mem_clock_mhz=3201,
        default_app_mem_clock_mhz=3201,
        max_sm_clock_mhz=1980,
        supported_clocks_mhz={3201: [1980, 1965, 345]},
    )
    items = preflight(fingerprint(nvml=FakeNvml([gpu])))
    item = next(item for item in items if "clocks are not pinned" in item.what)
    assert item.admin_command == "sudo nvidia-smi -i 0 -lgc 1980,1980"


def test_clocks_set_by_admin_are_noted_not_warned():
    items = preflight(fingerprint(nvml=FakeNvml([tuned_gpu()])))
    assert rules(items) == [
        ("info", "GPU 0: application clocks set to 1512,1410 MHz (memory,SM; default 1512,1065)")
    ]


def test_other_processes_on_the_gpu():
    gpu = tuned_gpu(processes=[FakeProcess(pid=31337, usedGpuMemory=12 * GB)])
    items = preflight(fingerprint(nvml=FakeNvml([gpu])))
    item = next(item for item in items if "other process" in item.what)
    assert item.severity == "warn"
    assert "31337" in item.what and "12.0 GB" in item.what
    assert item.admin_command.startswith("nvidia-smi --query-compute-apps")


def test_low_free_memory():
    items = preflight(fingerprint(nvml=FakeNvml([tuned_gpu(memory_used_bytes=20 * GB)])))
    item = next(item for item in items if "memory is free" in item.what)
    assert item.what == "GPU 0: only 60.0 GB of 80.0 GB memory is free"
    assert item.severity == "warn"


def test_power_limit_below_default():
    gpu = tuned_gpu(power_limit_mw=250_000, power_default_limit_mw=300_000)
    items = preflight(fingerprint(nvml=FakeNvml([gpu])))
    item = next(item for item in items if "power limit" in item.what)
    assert item.what == "GPU 0: power limit 250 W is below the default 300 W"
    assert item.admin_command == "sudo nvidia-smi -i 0 -pl 300"


def test_ecc_and_mig_notes():
    items = preflight(fingerprint(nvml=FakeNvml([tuned_gpu(ecc_mode=(0, 0))])))
    assert ("info", "GPU 0: ECC is off") in rules(items)
    items = preflight(fingerprint(nvml=FakeNvml([tuned_gpu(ecc_mode=(0, 1))])))
    assert ("warn", "GPU 0: an ECC mode change is pending a GPU reset or reboot") in rules(items)
    items = preflight(fingerprint(nvml=FakeNvml([tuned_gpu(mig_mode=(1, 1))])))
    mig = next(item for item in items if "MIG" in item.what)
    assert mig.severity == "warn" and mig.admin_command.startswith("sudo nvidia-smi -i 0 -mig 0")
    items = preflight(fingerprint(nvml=FakeNvml([tuned_gpu(mig_mode=(0, 1))])))
    assert ("info", "GPU 0: MIG mode is pending a GPU reset") in rules(items)


def test_prohibited_compute_mode_and_mixed_models():
    gpus = [tuned_gpu(compute_mode=2), tuned_gpu(name="NVIDIA H200")]
    items = preflight(fingerprint(nvml=FakeNvml(gpus)))
    assert ("warn", "GPU 0: compute mode is Prohibited") in rules(items)
    assert ("info", "Mixed GPU models: NVIDIA A100 80GB PCIe, NVIDIA H200") in rules(items)


# --------------------------------------------------------------------------- digest


def test_digest_tracks_comparability_only():
    fp = fingerprint(nvml=FakeNvml([tuned_gpu()])).model_dump(mode="json")
    digest = Fingerprint.model_validate(fp).digest()
    assert len(digest) == 12
    same = copy.deepcopy(fp)
    same["hostname"] = "another-host"
    same["collected_at"] = "later"
    same["gpus"][0]["memory_free_bytes"] = 1
    assert Fingerprint.model_validate(same).digest() == digest
    for change in (
        lambda f: f.update(driver_version="999.1"),
        lambda f: f["gpus"][0].update(name="NVIDIA H200"),
        lambda f: f["libraries"].update(vllm="0.0.1-different"),
    ):
        changed = copy.deepcopy(fp)
        change(changed)
        assert Fingerprint.model_validate(changed).digest() != digest


# --------------------------------------------------------------------------- stored fingerprints

REFERENCE = Path(__file__).resolve().parents[2] / "data" / "reference"


def _fingerprints_in(data: Any, where: str) -> Iterator[tuple[str, dict]]:
    """Every stored fingerprint (an `environment` with a `gpus` list) anywhere in `data`. The
    published seed table's `environment` (GPU and host as the article states them) is not one."""
    if isinstance(data, dict):
        for key, value in data.items():
            if key == "environment" and isinstance(value, dict) and "gpus" in value:
                yield where, value
            else:
                yield from _fingerprints_in(value, f"{where}.{key}")
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from _fingerprints_in(value, f"{where}[{index}]")


def shipped_fingerprints() -> list[tuple[str, dict]]:
    """Every fingerprint in data/reference: runs, campaigns, checks, and the archives' files."""
    found: list[tuple[str, dict]] = []
    for path in sorted(REFERENCE.rglob("*.json")):
        found += _fingerprints_in(json.loads(path.read_text()), str(path.relative_to(REFERENCE)))
    for archive in sorted(REFERENCE.rglob("*.tgz")):
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                if member.name.endswith(".json"):
                    data = json.load(tar.extractfile(member))  # type: ignore[arg-type]
                    where = f"{archive.relative_to(REFERENCE)}:{member.name}"
                    found += _fingerprints_in(data, where)
    return found


def test_every_shipped_fingerprint_loads_and_keeps_every_value() -> None:
    """Each stored fingerprint validates as a Fingerprint, dumps back with every stored key and
    value (in the stored order), and only fields added since may be new (then None)."""
    shipped = shipped_fingerprints()
    assert len(shipped) >= 140  # 147 when this was written
    without_executor = 0
    for where, stored in shipped:
        fp = Fingerprint.model_validate(stored)
        dumped = fp.model_dump(mode="json")
        assert list(dumped)[: len(stored)] == list(stored), where  # executor, if new, is last
        for key, value in stored.items():
            if key == "executor":  # older `{"name": "local"}`: the Ray-only fields dump as None
                assert {k: v for k, v in dumped[key].items() if v is not None} == {
                    k: v for k, v in value.items() if v is not None
                }, where
            else:
                assert dumped[key] == value, (where, key)
        assert all(dumped[key] is None for key in dumped.keys() - stored.keys()), where
        without_executor += "executor" not in stored
        if where.startswith("cpu_") or "/cpu_" in where:  # a CPU measurement: no GPU
            assert not fp.gpus, where
        else:
            assert fp.primary_gpu_name and fp.gpus[0].uuid, where
    assert without_executor > 0  # the older shape (before the executor was recorded) is covered


def test_a_stored_empty_fingerprint_reads_as_none_and_a_wrong_key_is_an_error() -> None:
    from pydantic import ValidationError

    from bench.core.schema import RunResult

    _, stored = next((where, fp) for where, fp in shipped_fingerprints() if fp["gpus"])
    run_files = sorted(REFERENCE.glob("h200_*_runs.json"))
    run = json.loads(run_files[0].read_text())["runs"][0]
    assert RunResult.model_validate({**run, "environment": {}}).environment is None
    assert RunResult.model_validate({**run, "environment": stored}).environment.gpus
    with pytest.raises(ValidationError, match="gpu_count"):
        Fingerprint.model_validate({**stored, "gpu_count": 1})
    gpu = {**stored["gpus"][0], "sm_clock": 1}
    with pytest.raises(ValidationError, match="sm_clock"):
        Fingerprint.model_validate({**stored, "gpus": [gpu]})
