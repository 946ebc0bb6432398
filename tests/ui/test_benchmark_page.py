"""AppTest of the Benchmark page: plan, engine-argument validation, job creation, live progress."""

from __future__ import annotations

from pathlib import Path

import pytest

from ui.state import PROFILE_KEY, default_profile

PAGE = "ui/benchmark_page.py"


def _tiny_profile() -> dict:
    profile = default_profile()
    profile["stages"][0].update(model="tiny-llama", dynamic_control_flow=True, concurrency=2)
    return profile


@pytest.fixture(autouse=True)
def idle_machine(monkeypatch):
    """Plan estimates as on an idle machine: a stand-in for the load average, which other work
    on a shared test host moves from minute to minute (a busy host would make a plan ask for
    confirmation and keep Run disabled)."""
    import advisor.plan

    monkeypatch.setattr(advisor.plan, "host_busy_factor", lambda: 1.0)


@pytest.fixture
def no_runner(monkeypatch):
    """Records ensure_runner calls instead of starting the detached runner (a test stand-in)."""
    calls = []
    import bench.jobs

    monkeypatch.setattr(bench.jobs, "ensure_runner", lambda *a, **k: calls.append(a) or 0)
    return calls


def test_machine_panel_and_empty_states(app_test):
    at = app_test(PAGE).run()
    assert not at.exception
    assert at.title[0].value == "Benchmark"
    from bench.environment import fingerprint

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
    from bench.store import ResultStore

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
    changed = _tiny_profile()
    changed["stages"][0]["prompt_tokens"] = {"mean": 64}  # any edit, not only another model
    at.session_state[PROFILE_KEY] = changed
    at.run()
    assert not at.exception
    assert any("This plan was made for another profile" in w.value for w in at.warning)
    run_button = next(b for b in at.button if b.label.startswith("Run "))
    assert run_button.disabled
    from bench.store import ResultStore

    assert ResultStore(store_path).list_jobs() == []
    next(b for b in at.button if b.label == "Quick plan").click().run()
    assert not any("another profile" in w.value for w in at.warning)
    assert not next(b for b in at.button if b.label.startswith("Run ")).disabled


def test_engine_arguments_are_validated_against_the_backend():
    from bench.config import RunConfig
    from bench.errors import UserError
    from ui.benchmark_page import config_from_row

    base = RunConfig(backend="fake", model="tiny-llama")
    row = {
        "backend": "fake",
        "model": "tiny-llama",
        "pattern": "concurrency",
        "load": 3,
        "duration (s)": 8,
        "engine args": "itl_s=0.01",
        "device": "cpu",
    }
    config = config_from_row(base, row)
    assert config.load.concurrency == 3 and config.load.duration_s == 8
    assert config.engine_args == {"itl_s": 0.01}
    with pytest.raises(UserError, match="bad engine argument"):
        config_from_row(base, {**row, "engine args": "no_such_option=1"})
    with pytest.raises(UserError, match="must look like key=value"):
        config_from_row(base, {**row, "engine args": "justtext"})
    step = config_from_row(base, {**row, "pattern": "step", "load": 40, "duration (s)": 5})
    assert step.load.pattern == "step" and step.load.max == 40
    assert step.load.stage_duration_s == 5


def test_running_job_shows_progress_and_stop_reaches_the_store(app_test, store_path, no_runner):
    from bench.config import RunConfig
    from bench.jobs import JobProgress
    from bench.store import ResultStore

    store = ResultStore(store_path)
    config = RunConfig(backend="fake", model="tiny-llama")
    job_id = store.create_job([config], label="ui test")
    store.claim_next_job(pid=12345, runner="gpu-host-b:12345")
    progress = JobProgress([config], lambda state: store.update_job(job_id, progress=state))
    progress.start_run(0)
    for step in range(3):
        progress.on_progress(
            0,
            {
                "stage": "running",
                "phase": "concurrency",
                "phase_index": 0,
                "phases_total": 1,
                "completed": step * 4,
                "failed": 0,
                "elapsed_s": 1.0 + step,
                "phase_elapsed_s": 1.0 + step,
                "phase_duration_s": 10.0,
                "output_tokens": step * 64,
                "in_flight": 2,
                "run_id": None,
                "telemetry": {"host_rss_bytes": 10**8},
            },
        )
    progress.flush(force=True)
    store.job_heartbeat(job_id)

    at = app_test(PAGE).run()
    assert not at.exception
    texts = [p.text or "" for p in at.get("progress")]
    assert any("3 s of 10 s" in text for text in texts), texts
    assert any("runner gpu-host-b:12345" in c.value for c in at.caption)  # the claiming host
    stop = next(b for b in at.button if b.label == "Stop")
    stop.click().run()
    assert store.get_job(job_id).stop_requested


def test_plan_table_and_cli_read_engine_arguments_the_same_way():
    """One parser: the table cell and repeated --engine-arg give identical values and types."""
    from bench.cli import build_run_config
    from bench.config import RunConfig
    from bench.keyvalue import format_pairs
    from ui.benchmark_page import config_from_row

    pairs = ["max_num_seqs=256", "enforce_eager=yes", "gpu_memory_utilization=0.5", "seed=null"]
    cli = build_run_config(None, "vllm", "tiny-llama", None, {}, pairs, [])
    base = RunConfig(backend="vllm", model="tiny-llama")
    row = {"backend": "vllm", "model": "tiny-llama", "engine args": ", ".join(pairs)}
    table = config_from_row(base, row)
    assert table.engine_args == cli.engine_args
    assert cli.engine_args == {
        "max_num_seqs": 256,
        "enforce_eager": True,
        "gpu_memory_utilization": 0.5,
        "seed": None,
    }
    assert [type(v) for v in table.engine_args.values()] == [int, bool, float, type(None)]
    # What the table shows for a plan reads back to the same values.
    shown = format_pairs(cli.engine_args)
    assert config_from_row(base, {**row, "engine args": shown}).engine_args == cli.engine_args


def test_plan_shows_its_cost_and_a_long_plan_asks_for_confirmation(
    app_test, store_path, no_runner, tmp_path, monkeypatch
):
    """Default profile (a 7B model): on a machine without a GPU the Quick plan is tiny-llama and
    needs no confirmation; the Full plan keeps the 7B model, is estimated over 10 minutes and
    its Run button stays disabled until "Run it anyway" is ticked."""
    from bench.environment import fingerprint

    if fingerprint().gpu_available:
        pytest.skip("the CPU sizing applies to machines without a GPU")
    monkeypatch.setenv("ADVISOR_MODEL_CACHE", str(tmp_path / "models"))  # nothing written yet
    model = default_profile()["stages"][0]["model"]
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
    from bench.models import resolve_model

    checkpoint = resolve_model("tiny-llama", dtype="float32").path
    profile = _tiny_profile()
    profile["stages"][0]["model"] = str(checkpoint)
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
    from advisor.plan import FULL_REPEATS
    from bench.store import ResultStore

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
