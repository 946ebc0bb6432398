"""Sign-in gate: an app served beyond this machine shows nothing but a sign-in prompt to visitors
who have not signed in.

The app binds 127.0.0.1 (.streamlit/config.toml). Serving it to others is the explicit setting
`server.address` = an address other people reach (config.toml or `--server.address`); then
Streamlit's built-in OpenID Connect sign-in (`st.login`, an `[auth]` section in
.streamlit/secrets.toml) is required before any page runs: an anonymous visitor can neither read
results nor start jobs. Without `[auth]` such an app shows only how to configure it. A reverse
proxy that signs people in instead keeps the app on 127.0.0.1 (docs/cluster.md).
"""

from __future__ import annotations

import ipaddress

import streamlit as st

LOOPBACK_NAMES = ("localhost",)


def serves_others(address: str | None) -> bool:
    """Whether the server address is reachable from other machines (empty = every interface)."""
    text = (address or "").strip().strip("[]")
    if not text:
        return True
    if text.lower() in LOOPBACK_NAMES:
        return False
    try:
        return not ipaddress.ip_address(text).is_loopback
    except ValueError:  # a host name other than localhost: reachable by that name
        return True


def _auth_configured() -> bool:
    try:
        return "auth" in st.secrets
    except Exception:  # no secrets.toml at all
        return False


def require_sign_in() -> None:
    """Stop the script with the sign-in prompt unless this is a local app or a signed-in user."""
    address = st.get_option("server.address")
    if not serves_others(address):
        return
    if not _auth_configured():
        st.title("Sign-in is not configured")
        st.error(
            f"This app is served beyond this machine (server.address = {address!r}), so sign-in "
            "is required, but .streamlit/secrets.toml has no [auth] section. Configure "
            "Streamlit's OpenID Connect sign-in there (docs/cluster.md), or serve on 127.0.0.1 "
            "behind a reverse proxy that signs people in."
        )
        st.stop()
    if st.user.get("is_logged_in"):  # absent (not False) before any sign-in
        with st.sidebar:
            st.caption(f"Signed in as {st.user.get('email') or st.user.get('name') or 'user'}")
            st.button("Sign out", on_click=st.logout, icon=":material/logout:")
        return
    st.title("Sign in")
    st.write("This advisor is shared by a team: sign in to see results and start benchmarks.")
    st.button("Sign in", on_click=st.login, type="primary", icon=":material/login:")
    st.stop()
