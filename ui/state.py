"""Session defaults and shared handles: the results store, the current profile, the chosen runs.

Nothing that matters lives only here: benchmarks are jobs in the store, results are runs in the
store, and the profile can be downloaded as YAML. The session only remembers what the person
is looking at.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING

import streamlit as st
import yaml

from advisor.workload.profile import (
    GpuProfile,
    ProfileSLO,
    StageProfile,
    WorkloadProfile,
)
from advisor.workload.profile_input import profile_from_dict
from bench.core.config import LengthDistribution
from bench.core.errors import UserError
from bench.core.schema import RunResult
from bench.storage.store import ResultStore

if TYPE_CHECKING:  # the advisor's modules load scikit-learn: imported when first asked
    from advisor.decide.recommend import Report as AdvisorReport
    from advisor.report.intervals import IntervalCache
    from advisor.sizing.calibration import Calibration, StepCalibration
    from advisor.sizing.measured import ReferenceFiles

PROFILE_KEY = "profile"
"""Session key of the current workload profile: the `WorkloadProfile` model itself."""
FORM_VERSION_KEY = "form_version"
"""Bumped when the profile is replaced (upload, reset) so every form widget starts afresh."""
ACTIVE_JOB_KEY = "active_job_id"
SELECTED_RUNS_KEY = "selected_run_ids"
MAX_PROFILE_BYTES = 256 * 1024
MAX_QUALITY_BYTES = 1024 * 1024  # the app's upload limit (.streamlit/config.toml)
"""Profiles are a few KB; anything larger is refused before YAML parses it."""


DEFAULT_GPU = "H200"
"""The first-visit profile's GPU: the one the measurements shipped in data/reference were taken
on, so a new user's first answer rests on measurements of that workload, not on the tree alone
(the Advisor page says which GPU the evidence is on whenever the profile names another)."""


def default_stage(name: str = "main") -> StageProfile:
    """A first-visit stage: llama-2-7b chat on one H200 at the shape the shipped H200 runs
    measured (128 prompt / 128 output tokens, 16 in flight), with the article's TTFT target."""
    return StageProfile(
        name=name,
        model="llama-2-7b",
        long_sequence_generation=True,
        prompt_tokens=LengthDistribution(mean=128),
        output_tokens=LengthDistribution(mean=128),
        concurrency=16,
        slo=ProfileSLO(ttft_ms=300, e2e_ms=5000),
        gpu=GpuProfile(type=DEFAULT_GPU, count=1),
    )


def default_profile() -> WorkloadProfile:
    return WorkloadProfile(title="Chat assistant", stages=[default_stage()])


def init_session() -> None:
    """Fill the session defaults once per browser session (called by app.py on every run)."""
    if PROFILE_KEY not in st.session_state:
        st.session_state[PROFILE_KEY] = default_profile()
    st.session_state.setdefault(FORM_VERSION_KEY, 0)
    st.session_state.setdefault(ACTIVE_JOB_KEY, None)
    st.session_state.setdefault(SELECTED_RUNS_KEY, [])


def current_profile() -> WorkloadProfile:
    """The profile the Advisor page last validated (the default one before any edit). Pages
    read it and never change it in place: a new profile goes in through `keep_profile` or
    `replace_profile`."""
    init_session()
    profile = st.session_state[PROFILE_KEY]
    if not isinstance(profile, WorkloadProfile):
        # Streamlit reloads an edited module while the app runs (development): a model of the
        # class before the reload is read again, field by field, as the current class.
        profile = WorkloadProfile.model_validate(profile, from_attributes=True)
        st.session_state[PROFILE_KEY] = profile
    return profile


def keep_profile(profile: WorkloadProfile) -> None:
    """The profile the form just built: kept, with the form's widgets as they are."""
    st.session_state[PROFILE_KEY] = profile


def replace_profile(profile: WorkloadProfile) -> None:
    """Swap the whole profile (upload, reset, stage added) and restart the form widgets."""
    st.session_state[PROFILE_KEY] = profile
    st.session_state[FORM_VERSION_KEY] = st.session_state.get(FORM_VERSION_KEY, 0) + 1


def store_location() -> str | None:
    """Where the results live: $ADVISOR_STORE (a SQLite path, sqlite:/// or postgresql:// URL),
    else the store's default file (None)."""
    return os.environ.get("ADVISOR_STORE") or None


@st.cache_resource(max_entries=4, ttl=3600, show_spinner=False)
def _open_store(location: str | None) -> ResultStore:
    return ResultStore(location)


def get_store() -> ResultStore:
    """The shared store handle (one connection pool per location, thread-safe)."""
    return _open_store(store_location())


@st.cache_data(ttl=5, max_entries=8, show_spinner=False)
def stored_runs(store_location: str | None) -> list[RunResult]:
    """Every run in the store, newest first (re-read at most every 5 s)."""
    return get_store().list_runs()


@st.cache_data(ttl=30, max_entries=2, show_spinner=False)
def availability_map() -> dict[str, str]:
    from advisor.decide.recommend import availability_map as read_availability

    return read_availability()


@st.cache_resource(ttl=600, max_entries=1, show_spinner=False)
def reference_files() -> ReferenceFiles:
    """data/reference read once (measured runs and published tables), shared by every page."""
    from advisor.sizing.measured import read_reference_folder

    return read_reference_folder()


def runs_version(store_location: str | None) -> str:
    """The stored runs as the advisor's answer depends on them (each run's id and state), as a
    cache key: an answer is made again when a run lands or finishes, seen within the 5 s that
    `stored_runs` keeps its list."""
    import hashlib

    runs = stored_runs(store_location)
    text = "|".join(f"{run.run_id}:{run.status.value}" for run in runs)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def advise(profile: WorkloadProfile, store_location: str | None) -> AdvisorReport:
    """`advisor.decide.recommend.recommend` on the profile and the stored runs (made again when
    they change, and at least once a minute for the store's `bench calibrate` records). Every
    page asks through here, so one view runs the advisor once whatever uses the answer, and the
    Report page reuses the answer the Advisor page showed."""
    return _advise(profile.model_dump_json(), store_location, runs_version(store_location), profile)


@st.cache_data(ttl=60, max_entries=64, show_spinner="Walking the decision tree…")
def _advise(
    profile_json: str, store_location: str | None, runs: str, _profile: WorkloadProfile
) -> AdvisorReport:
    # The profile's JSON and the runs' version are only the cache key; the advisor reads the
    # model and the store.
    from advisor.decide.recommend import recommend

    return recommend(
        _profile,
        store=get_store(),
        availability=availability_map(),
        reference=reference_files(),
        calibrated=calibration(store_location, runs),
    )


@st.cache_resource(show_spinner=False)
def interval_cache() -> IntervalCache:
    """Bootstrap intervals of finished runs, shared by every session: each report cites the
    shipped runs again, and their intervals were most of a report's build time."""
    from advisor.report.intervals import IntervalCache

    return IntervalCache()


_WARMING: set[tuple[str, ...]] = set()
_WARMED: dict[tuple[tuple[str, ...], str], None] = {}
"""Run sets already warmed, with the stored runs' version then (oldest first, at most
WARMED_KEPT): an Advisor page run for the same answer starts no thread, and reads no stored
records again."""
WARMED_KEPT = 256
_WARMING_GUARD = threading.Lock()


def warm_report(answer: AdvisorReport, store_location: str | None) -> None:
    """Compute, in a background thread, the intervals the answer's report will need (its
    cited runs' bootstraps, `advisor.report.build.warm_intervals`): the first report that
    cites a run paid them on the Report page (0.9 s of the first report at 40 requests in
    flight, alone; several seconds for every report waiting on it with 20 sessions at once).
    Started when the Advisor page shows the answer; a report asked for meanwhile waits for
    the same computation instead of making its own. Once per set of runs at a time."""
    from advisor.report.build import relevant_run_ids, warm_intervals

    runs = tuple(relevant_run_ids(answer))
    done = (runs, runs_version(store_location))
    with _WARMING_GUARD:
        if not runs or runs in _WARMING or done in _WARMED:
            return
        _WARMING.add(runs)
    store, reference, cache = get_store(), reference_files(), interval_cache()

    def work() -> None:
        try:
            warm_intervals(answer, store, reference, cache)
            with _WARMING_GUARD:
                _WARMED[done] = None
                while len(_WARMED) > WARMED_KEPT:
                    del _WARMED[next(iter(_WARMED))]
        except Exception:  # a report asked for later computes (and reports) it itself
            logging.getLogger(__name__).exception("warming the report's intervals failed")
        finally:
            with _WARMING_GUARD:
                _WARMING.discard(runs)

    threading.Thread(target=work, name="warm-report", daemon=True).start()


@st.cache_resource(ttl=60, max_entries=4, show_spinner=False)
def calibration(store_location: str | None, runs: str) -> tuple[Calibration, StepCalibration]:
    """The one calibration on the stored and shipped evidence, shared by every session's answers
    (made again when `_advise` is: the runs changed, or a minute passed): made per answer, it
    was a sixth of the Advisor page's server time with 20 sessions at once, and the shared
    lookup fits each (GPU, engine, precision) once instead of once per answer. Not copied per
    session: the lookup only adds fits it has made, the same whoever asks first."""
    from advisor.decide.recommend import evidence_calibration

    return evidence_calibration(get_store(), reference_files())


def profile_yaml(profile: WorkloadProfile) -> str:
    return yaml.safe_dump(
        profile.model_dump(mode="json", exclude_none=True), sort_keys=False, allow_unicode=True
    )


def save_uploaded_quality(data: bytes, name: str) -> str:
    """Check an uploaded quality.json (a QualityResult of `python -m bench quality`) and keep it
    where the profile can name it: the results store's data folder, `quality/<digest>.json`
    (the same bytes give the same path). UserError with a one-line message otherwise."""
    import hashlib

    from pydantic import ValidationError

    from bench.core.files import parse_json
    from bench.core.outputs import write_atomic
    from bench.core.quality import QualityResult
    from bench.core.strict import describe_validation_error
    from bench.storage.store_url import default_location

    if len(data) > MAX_QUALITY_BYTES:
        raise UserError(
            f"{name}: {len(data) // 1024} KB is too large for a quality result (max 1 MB)"
        )
    try:
        QualityResult.model_validate(parse_json(data, f"quality result {name}"))
    except ValidationError as exc:
        raise UserError(f"quality result {name}: {describe_validation_error(exc)}") from None
    folder = default_location().parent / "quality"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{hashlib.sha256(data).hexdigest()[:16]}.json"
    write_atomic(path, data)
    return str(path)


def read_uploaded_profile(data: bytes, name: str) -> WorkloadProfile:
    """Parse an uploaded YAML/JSON profile; UserError with a one-line message otherwise."""
    if len(data) > MAX_PROFILE_BYTES:
        raise UserError(f"{name}: {len(data) // 1024} KB is too large for a profile (max 256 KB)")
    from bench.core.files import decode_text, parse_user_mapping

    # The CLI's bounded parser: nesting depth and YAML alias expansion are capped the same way.
    loaded = parse_user_mapping(decode_text(data, name), name)
    return profile_from_dict(loaded, source=name)
