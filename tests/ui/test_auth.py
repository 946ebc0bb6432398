"""Sign-in gate: served beyond 127.0.0.1, an anonymous visitor sees only the sign-in prompt."""

from __future__ import annotations

import pytest
from streamlit import config as st_config

from tests.ui.conftest import stored_run
from ui.auth import serves_others

AUTH_SECRETS = {  # an OpenID Connect provider's settings in the shape st.login reads
    "redirect_uri": "https://advisor.example.org/oauth2callback",
    "cookie_secret": "test-cookie-secret",
    "client_id": "advisor",
    "client_secret": "not-a-real-secret",
    "server_metadata_url": "https://id.example.org/.well-known/openid-configuration",
}


@pytest.fixture
def served_to_others():
    """The app started with --server.address 0.0.0.0 (restored afterwards)."""
    before = st_config.get_option("server.address")
    st_config.set_option("server.address", "0.0.0.0")
    yield
    st_config.set_option("server.address", before)


def test_loopback_addresses_are_local():
    assert not serves_others("127.0.0.1")
    assert not serves_others("localhost")
    assert not serves_others("::1")
    assert not serves_others("[::1]")
    assert serves_others("0.0.0.0")
    assert serves_others("")
    assert serves_others("10.1.2.3")
    assert serves_others("advisor.internal")


@pytest.mark.parametrize(
    "page", ["ui/results_page.py", "ui/benchmark_page.py", "ui/advisor_page.py"]
)
def test_anonymous_visitor_sees_only_the_sign_in_prompt(
    app_test, store_path, served_to_others, page
):
    run = stored_run(store_path)
    at = app_test(page)
    at.secrets["auth"] = AUTH_SECRETS
    at.run()
    assert not at.exception
    assert [t.value for t in at.title] == ["Sign in"]
    assert [b.label for b in at.button] == ["Sign in"]
    assert not at.dataframe and not at.data_editor and not at.selectbox and not at.tabs
    shown = " ".join(str(e.value) for e in (*at.markdown, *at.caption, *at.info, *at.warning))
    assert run.run_id not in shown and "pytorch" not in shown


def test_served_without_sign_in_configured_shows_how_to(app_test, store_path, served_to_others):
    stored_run(store_path)
    at = app_test("ui/results_page.py").run()
    assert not at.exception
    assert [t.value for t in at.title] == ["Sign-in is not configured"]
    assert "[auth]" in at.error[0].value and "0.0.0.0" in at.error[0].value
    assert not at.dataframe and not at.button


def test_local_app_needs_no_sign_in(app_test, store_path):
    stored_run(store_path)
    at = app_test("ui/results_page.py").run()
    assert not at.exception
    assert "Sign in" not in [t.value for t in at.title]
