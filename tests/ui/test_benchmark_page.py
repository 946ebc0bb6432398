"""AppTest of the Benchmark page: plan, engine-argument validation, job creation, live progress."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from advisor.workload.profile import StageProfile, WorkloadProfile
from bench.core.config import LengthDistribution
from ui.state import PROFILE_KEY, default_profile

PAGE = "ui/benchmark_page.py"


def _tiny_profile(**changes: object) -> WorkloadProfile:
    """The first-visit profile with tiny-llama at 2 in flight (and any other stage changes)."""
    profile = default_profile()
    stage = profile.primary.model_copy(
        update={"model": "tiny-llama", "dynamic_control_flow": True, "concurrency": 2, **changes}
    )
    return profile.model_copy(update={"stages": [StageProfile.model_validate(dict(stage))]})


@pytest.fixture(autouse=True)
def idle_machine(monkeypatch):
    """Plan estimates as on an idle machine: a stand-in for the load average, which other work
    on a shared test host moves from minute to minute (a busy host would make a plan ask for
    confirmation and keep Run disabled)."""
    import advisor.plan.run_estimate

    monkeypatch.setattr(advisor.plan.run_estimate, "host_busy_factor", lambda: 1.0)


@pytest.fixture
def no_runner(monkeypatch):
    """Records ensure_runner calls instead of starting the detached runner (a test stand-in)."""
    calls = []
    import bench.orchestrate.jobs

    monkeypatch.setattr(
        bench.orchestrate.jobs, "ensure_runner", lambda *a, **k: calls.append(a) or 0
    )
    return calls


def test_machine_panel_and_empty_states(app_test):
    at = app_test(PAGE).run()
    assert not at.exception
    assert at.title[0].value == "Benchmark"
    from bench.run.environment import fingerprint

    if not fingerprint().gpu_available:
        assert any("CPU-only machine" in w.value for w in at.warning)
    assert any("No plan yet" in i.value for i in at.info)
    assert any("No benchmark has run yet" in i.value for i in at.info)


def test_quick_plan_then_run_creates_a_job(app_test, store_path, no_runner):
    at = app_test(PAGE)
    at.session_state[PROFILE_KEY] = _tiny_profile()
    at.run()
    next(b for b in at.button if b.label == "Quick plan").click().run()
    assert not at.exception
    editor = at.data_editor[0]
    backends = list(editor.value["backend"])
    assert backends[0] == "pytorch"
    run_button = next(b for b in at.button if b.label.startswith("Run "))
    run_button.click().run()
    assert not at.exception
    from bench.storage.store import ResultStore

    jobs = ResultStore(store_path).list_jobs()
    assert len(jobs) == 1
    assert [c.backend for c in jobs[0].configs] == [b for b in backends if b != "jax"][
        : len(jobs[0].configs)
    ]
    assert jobs[0].configs[0].model == "tiny-llama"
    assert no_runner, "Run must make sure a job runner serves the store"


def test_a_plan_made_for_another_profile_cannot_run(app_test, store_path, no_runner):
    at = app_test(PAGE)
    at.session_state[PROFILE_KEY] = _tiny_profile()
    at.run()
    next(b for b in at.button if b.label == "Quick plan").click().run()
    run_button = next(b for b in at.button if b.label.startswith("Run "))
    assert not run_button.disabled and not any("another profile" in w.value for w in at.warning)
    changed = _tiny_profile(prompt_tokens=LengthDistribution(mean=64))  # any edit, not a model
    at.session_state[PROFILE_KEY] = changed
    at.run()
    assert not at.exception
    assert any("This plan was made for another profile" in w.value for w in at.warning)
    run_button = next(b for b in at.button if b.label.startswith("Run "))
    assert run_button.disabled
    from bench.storage.store import ResultStore

    assert ResultStore(store_path).list_jobs() == []
    next(b for b in at.button if b.label == "Quick plan").click().run()
    assert not any("another profile" in w.value for w in at.warning)
    assert not next(b for b in at.button if b.label.startswith("Run ")).disabled


def test_running_job_shows_progress_and_stop_reaches_the_store(app_test, store_path, no_runner):
    from bench.core.config import RunConfig
    from bench.core.progress import RunProgress
    from bench.orchestrate.jobs import JobProgress
    from bench.storage.store import ResultStore

    store = ResultStore(store_path)
    config = RunConfig(backend="fake", model="tiny-llama")
    job_id = store.create_job([config], label="ui test")
    store.claim_next_job(pid=12345, runner="gpu-host-b:12345")
    progress = JobProgress([config], lambda state: store.update_job(job_id, progress=state))
    progress.start_run(0)
    for step in range(3):
        progress.on_progress(
            0,
            RunProgress(
                stage="running",
                phase="concurrency",
                phase_index=0,
                phases_total=1,
                completed=step * 4,
                failed=0,
                elapsed_s=1.0 + step,
                phase_elapsed_s=1.0 + step,
                phase_duration_s=10.0,
                output_tokens=step * 64,
                in_flight=2,
            ),
        )
    progress.flush(force=True)
    store.job_heartbeat(job_id)

    at = app_test(PAGE).run()
    assert not at.exception
    texts = [p.text or "" for p in at.get("progress")]
    assert any("3 s of the 10 s window" in text for text in texts), texts
    assert any("runner gpu-host-b:12345" in c.value for c in at.caption)  # the claiming host
    stop = next(b for b in at.button if b.label == "Stop")
    stop.click().run()
    assert store.get_job(job_id).stop_requested


def test_a_real_runs_progress_round_trips_through_the_job_row_to_the_page(
    app_test, store_path, no_runner, tmp_path
):
    """The progress a real launch (fake backend: timed fake tokens, a test double of the engine)
    sends, through the job runner's JobProgress into the store's job row, reads back as the same
    RunProgress and drives the page's live readout."""
    from bench.core.config import ConcurrencyLoad, GenerateWorkload, LengthDistribution, RunConfig
    from bench.core.progress import RunProgress
    from bench.orchestrate.jobs import JobProgress
    from bench.run.api import launch
    from bench.storage.store import ResultStore

    config = RunConfig(
        backend="fake",
        model="tiny-llama",
        engine_args={"ttft_s": 0.005, "itl_s": 0.002},
        workload=GenerateWorkload(
            prompt_tokens=LengthDistribution(mean=8), output_tokens=LengthDistribution(mean=16)
        ),
        load=ConcurrencyLoad(concurrency=2, duration_s=1.0, warmup_requests=1),
        validity={"min_duration_s": 0.5, "min_requests": 1},
        device="cpu",
    )
    sent: list[RunProgress] = []
    launch(config, out_dir=tmp_path / "run", on_progress=sent.append)
    running = [p for p in sent if p.stage == "running" and p.phase_index == 0 and p.completed]
    assert running, [p.stage for p in sent]
    latest = running[-1]
    assert latest.run_id and latest.worker_pid and latest.phases_total == 1

    store = ResultStore(store_path)
    job_id = store.create_job([config], label="ui test")
    store.claim_next_job(pid=12345, runner="gpu-host-b:12345")
    progress = JobProgress([config], lambda state: store.update_job(job_id, progress=state))
    progress.start_run(0)
    for update in sent[: sent.index(latest) + 1]:
        progress.on_progress(0, update)
    progress.flush(force=True)
    stored_run = store.get_job(job_id).progress.runs[0]
    assert stored_run.latest == latest
    assert stored_run.history[-1].completed == latest.completed

    at = app_test(PAGE).run()
    assert not at.exception
    texts = [p.text or "" for p in at.get("progress")]
    expected = f"{latest.completed} requests done, {latest.failed} failed"
    assert any(expected in text for text in texts), texts


def test_a_job_row_the_old_runner_wrote_drives_the_page(app_test, store_path, no_runner):
    """A running job whose row the job runner before the typed progress wrote (free-form JSON,
    tests/bench/data/job_progress_before_typed.json, with the ray executor's queued placement)
    still shows its runs, the live readout and the placement line."""
    import json

    from bench.storage.store import ResultStore
    from tests.bench.test_job_progress import OLD_CONFIGS, OLD_ROWS, write_raw_progress

    store = ResultStore(store_path)
    job_id = store.create_job(OLD_CONFIGS, label="old row")
    store.claim_next_job(pid=12345, runner="gpu-host-b:12345")
    row = {**OLD_ROWS["mid_run"], "placement": OLD_ROWS["queued_placement"]}
    write_raw_progress(store, job_id, json.dumps(row))
    store.job_heartbeat(job_id)

    at = app_test(PAGE).run()
    assert not at.exception
    latest = row["runs"][0]["latest"]
    texts = [p.text or "" for p in at.get("progress")]
    expected = f"{latest['completed']} requests done, {latest['failed']} failed"
    assert any(expected in text for text in texts), texts
    assert any("2. **no-such-backend**" in m.value for m in at.markdown)
    assert any("waiting for a node with 1 × GPU, 1 CPU" in i.value for i in at.info)


def test_plan_shows_its_cost_and_a_long_plan_asks_for_confirmation(
    app_test, store_path, no_runner, tmp_path, monkeypatch
):
    """Default profile (a 7B model): on a machine without a GPU the Quick plan is tiny-llama and
    needs no confirmation; the Full plan keeps the 7B model, is estimated over 10 minutes and
    its Run button stays disabled until "Run it anyway" is ticked."""
    from bench.run.environment import fingerprint

    if fingerprint().gpu_available:
        pytest.skip("the CPU sizing applies to machines without a GPU")
    monkeypatch.setenv("ADVISOR_MODEL_CACHE", str(tmp_path / "models"))  # nothing written yet
    model = default_profile().primary.model
    at = app_test(PAGE).run()
    next(b for b in at.button if b.label == "Quick plan").click().run()
    assert not at.exception
    assert any(f"instead of {model}" in i.value for i in at.info)
    assert set(at.data_editor[0].value["model"]) == {"tiny-llama"}
    assert any("Estimated for the ticked runs" in c.value for c in at.caption)
    assert not at.checkbox  # no confirmation for a plan of minutes
    assert not next(b for b in at.button if b.label.startswith("Run ")).disabled

    next(b for b in at.button if b.label == "Full plan").click().run()
    assert not at.exception
    assert set(at.data_editor[0].value["model"]) == {model}
    assert any("estimated to take" in w.value for w in at.warning)
    run = next(b for b in at.button if b.label.startswith("Run "))
    assert run.disabled
    next(c for c in at.checkbox if c.label.startswith("Run it anyway")).check().run()
    run = next(b for b in at.button if b.label.startswith("Run "))
    assert not run.disabled


def test_checkpoint_path_outside_the_model_roots_is_refused_naming_the_setting(
    app_test, store_path, no_runner, monkeypatch
):
    """A profile naming a real checkpoint folder: the form refuses it until the server's
    ADVISOR_MODEL_ROOTS covers it."""
    from bench.engines.models import resolve_model

    checkpoint = resolve_model("tiny-llama", dtype="float32").path
    profile = _tiny_profile(model=str(checkpoint))
    monkeypatch.delenv("ADVISOR_MODEL_ROOTS", raising=False)
    at = app_test(PAGE)
    at.session_state[PROFILE_KEY] = profile
    at.run()
    # The full plan keeps the profile's model (a quick plan on a CPU may swap in tiny-llama)
    next(b for b in at.button if b.label == "Full plan").click().run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert errors and all("ADVISOR_MODEL_ROOTS=unset" in e for e in errors), errors
    assert next(b for b in at.button if b.label.startswith("Run ")).disabled

    monkeypatch.setenv("ADVISOR_MODEL_ROOTS", str(Path(checkpoint).parent))
    at.run()
    assert not any("ADVISOR_MODEL_ROOTS" in e.value for e in at.error)


def test_full_plan_lists_its_capacity_searches_and_repeats_and_runs_them_all(
    app_test, store_path, no_runner
):
    """The Full plan's table has each comparison run with the plan's repeats and the SLO
    capacity searches after them; the plan's time parts show before Run; Run queues every
    comparison run `repeats` times (consecutive runs of one job) and each search once."""
    from advisor.plan.stage_plan import FULL_REPEATS
    from bench.storage.store import ResultStore

    at = app_test(PAGE)
    at.session_state[PROFILE_KEY] = _tiny_profile()
    at.run()
    next(b for b in at.button if b.label == "Full plan").click().run()
    assert not at.exception
    table = at.data_editor[0].value
    roles = list(table["role"])
    searches = [i for i, role in enumerate(roles) if role == "capacity search"]
    comparisons = [i for i, role in enumerate(roles) if role == "comparison"]
    assert searches and comparisons and max(comparisons) < min(searches), roles
    assert {int(table["repeats"][i]) for i in comparisons} == {FULL_REPEATS}
    assert {table["pattern"][i] for i in searches} == {"capacity"}
    summary = " ".join(c.value for c in at.caption)
    assert f"{FULL_REPEATS} repeats of each comparison run add" in summary
    assert "the capacity searches take" in summary and "Capacity search:" in summary
    box = next((c for c in at.checkbox if c.label.startswith("Run it anyway")), None)
    if box is not None:
        box.check().run()
    run = next(b for b in at.button if b.label.startswith("Run "))
    ticked = [i for i in range(len(roles)) if table["run"][i]]
    expected = sum(FULL_REPEATS if i in comparisons else 1 for i in ticked)
    assert run.label == f"Run {expected} benchmarks"
    run.click().run()
    assert not at.exception
    job = ResultStore(store_path).list_jobs()[0]
    assert [c.load.pattern for c in job.configs].count("capacity") == len(
        [i for i in searches if i in ticked]
    )
    first = [c for c in job.configs if c.backend == job.configs[0].backend][:FULL_REPEATS]
    assert len(first) == FULL_REPEATS and len({c.model_dump_json() for c in first}) == 1


def test_a_deleted_plan_row_leaves_every_other_row_on_its_own_config():
    """Deleting a row moves the rows below it up; each must still run the config it was made
    from (a capacity search stays a capacity search), and an added row starts from the plan's
    first config. The deletion is applied by Streamlit's own data-editor function."""
    from streamlit.elements.widgets.data_editor import _apply_row_deletions

    from advisor.plan.plan_table import PLAN_ROW, chosen_runs, plan_table
    from advisor.plan.stage_plan import plan_for_stage

    stage = _tiny_profile().primary
    plan = plan_for_stage(stage, quick=False, cpu_only=True)
    assert plan.configs and plan.capacity_configs, "the full plan has comparisons and searches"
    configs = [*plan.configs, *plan.capacity_configs]
    available = {config.backend for config in configs}
    table = plan_table(plan.configs, available, 1, plan.capacity_configs)
    table["run"] = True
    edited = _apply_row_deletions(table, [0])  # the first comparison row's marker + Delete
    assert list(edited[PLAN_ROW]) == list(range(1, len(configs)))
    chosen, problems = chosen_runs(edited, configs, available)
    assert not problems, problems
    assert [c.model_dump_json() for c in chosen] == [c.model_dump_json() for c in configs[1:]]
    assert [c.load.pattern for c in chosen][-len(plan.capacity_configs) :] == ["capacity"] * len(
        plan.capacity_configs
    )
    added = pd.concat(
        [edited, pd.DataFrame([{**table.iloc[0].to_dict(), PLAN_ROW: None, "repeats": None}])],
        ignore_index=True,
    )
    chosen, problems = chosen_runs(added, configs, available)
    assert not problems and chosen[-1].model_dump_json() == configs[0].model_dump_json()


def _availability() -> dict[str, tuple[bool, str]]:
    from bench.engines.backends import all_availability

    return {item.name: (item.available, item.reason) for item in all_availability()}


def test_the_plan_names_the_frameworks_this_install_cannot_run(app_test, store_path):
    """The default profile's quick plan on this machine: every plan row whose framework the
    backends' own availability check finds missing is named, with the command that adds it or
    the backend's reason when this project's setup cannot; the rows that can run are not."""
    import streamlit as st

    from bench.run.environment import fingerprint
    from ui.engines import missing_engines

    st.cache_data.clear()  # the page caches availability; an earlier test may have changed it
    at = app_test(PAGE)
    at.session_state[PROFILE_KEY] = default_profile()
    at.run()
    next(b for b in at.button if b.label == "Quick plan").click().run()
    assert not at.exception
    backends = list(at.data_editor[0].value["backend"])
    availability = _availability()
    unavailable = [name for name in backends if not availability[name][0]]
    expected = missing_engines(backends, availability, cpu_only=not fingerprint().gpu_available)
    warnings = " ".join(w.value for w in at.warning)
    if not unavailable:
        assert expected is None and "Cannot run in this install" not in warnings
        pytest.skip("every framework of this plan is installed here")
    assert f"Cannot run in this install: {', '.join(unavailable)}." in warnings
    runnable = [name for name in backends if availability[name][0]]
    assert not any(name in warnings.split("install:")[1].split(".")[0] for name in runnable)
    captions = " ".join(c.value for c in at.caption)
    for backend, why in expected.elsewhere.items():
        assert f"**{backend}**: {why}" in captions
    codes = [c.value for c in at.code]
    assert (expected.command in codes) == bool(expected.command)


def test_an_install_without_the_engines_says_which_command_adds_vllm(
    app_test, store_path, monkeypatch
):
    """scripts/app.sh sets up with --no-engines: vLLM missing. Test stand-in: the vLLM adapter's
    version probe answers "not installed" (the real availability check runs on it); the page
    must then untick vLLM, name it, and give the command that installs the CPU engines file
    (scripts/setup.sh from the project's .venv, pip of this interpreter otherwise)."""
    import streamlit as st

    import bench.engines.backends.vllm
    from ui.engines import CPU_ENGINES_REQUIREMENTS, REPO, missing_engines

    monkeypatch.setattr(bench.engines.backends.vllm, "vllm_version", lambda: None)
    st.cache_data.clear()
    try:
        at = app_test(PAGE)
        at.session_state[PROFILE_KEY] = default_profile()
        at.run()
        next(b for b in at.button if b.label == "Quick plan").click().run()
        assert not at.exception
        table = at.data_editor[0].value
        assert "vllm" in list(table["backend"]), "the advisor plans vLLM for the default profile"
        assert not table["run"][list(table["backend"]).index("vllm")]  # unticked
        warnings = " ".join(w.value for w in at.warning)
        assert "Cannot run in this install: vllm" in warnings
        markdown = " ".join(m.value for m in at.markdown)
        assert "Add vllm with one command" in markdown and CPU_ENGINES_REQUIREMENTS in markdown
        expected = missing_engines(["vllm"], _availability(), cpu_only=True)
        assert expected.command in [c.value for c in at.code]
        assert CPU_ENGINES_REQUIREMENTS in expected.command or "scripts/setup.sh" in (
            expected.command
        )
        run = next(b for b in at.button if b.label.startswith("Run "))
        assert run.label.startswith("Run ")
        assert not any("vllm is not installed" in e.value for e in at.error)  # unticked: no error
    finally:
        st.cache_data.clear()  # the stand-in's answer must not outlive this test
    # The command is the one for the environment running the app.
    venv = missing_engines(
        ["vllm"], {"vllm": (False, "")}, cpu_only=True, prefix=str(REPO / ".venv")
    )
    assert venv.command == f"cd {REPO} && scripts/setup.sh" and venv.file_notes == []
    other = missing_engines(
        ["vllm"], {"vllm": (False, "")}, cpu_only=True, python="/opt/py/bin/py", prefix="/opt/py"
    )
    pip = "/opt/py/bin/py -m pip install -r"
    assert other.command == f"cd {REPO} && {pip} {CPU_ENGINES_REQUIREMENTS}"
    assert "remove torchvision" in other.file_notes[0]  # the file's own instruction, shown


def test_on_a_gpu_host_the_gpu_engines_file_adds_vllm_and_tensorrt_llm_is_named_apart():
    """Read from the shipped requirements files: vLLM is in requirements-gpu.txt, TensorRT-LLM
    is commented out there (not installable by this project's setup), so its own reason shows."""
    from ui.engines import GPU_ENGINES_REQUIREMENTS, missing_engines

    missing = missing_engines(
        ["vllm", "tensorrt_llm", "pytorch"],
        {
            "vllm": (False, ""),
            "tensorrt_llm": (False, "install it from NVIDIA's index"),
            "pytorch": (True, ""),
        },
        cpu_only=False,
        python="python",
        prefix="/nowhere",
    )
    assert missing.backends == ["vllm", "tensorrt_llm"] and missing.installable == ["vllm"]
    assert missing.command.endswith(f"python -m pip install -r {GPU_ENGINES_REQUIREMENTS}")
    assert (
        "does not install it (not in requirements-gpu.txt). Install it from NVIDIA's index"
        in (missing.elsewhere["tensorrt_llm"])
    )
