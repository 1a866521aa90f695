"""Who may change a run from the UI: the token, the CSRF check, the headers every page gets.

The model, in one place:

- **The token** is a secret made at start (or given with `--token` / `AGENTFSM_UI_TOKEN`) and
  printed once, in the URL that opens the UI. Opening that URL (or posting the token to
  `/login`) sets it as a cookie: `HttpOnly` (no script reads it), `SameSite=Strict` (no other
  site's page sends it), path `/`. A request that changes a run must carry it, as that cookie
  or as `Authorization: Bearer TOKEN`; compared in constant time.
- **CSRF**: every form that changes a run carries a CSRF token, an HMAC of the secret, which
  the server checks as well; a page of another site can neither read it nor guess it. The
  `Origin` header, when a browser sends one, must be this server's own.
- **Hosts**: only requests addressed to the host the server was started for (and `localhost`
  names of a loopback bind) are answered, so a rebound DNS name cannot read the pages.
- **Headers**: a Content-Security-Policy that allows scripts and styles from the server only
  (no inline script, nothing from elsewhere), no framing, no content-type sniffing, and no
  referrer sent to other sites (`same-origin`: with `no-referrer` a browser posts forms with
  `Origin: null`, which the origin check could not tell from another site's).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

__all__ = [
    "COOKIE",
    "CSP",
    "SECURITY_HEADERS",
    "TOKEN_ENV",
    "csrf_token",
    "make_token",
    "same_secret",
]

#: The cookie the token is kept in.
COOKIE = "agentfsm_ui_token"
#: The environment variable a token may be given in (so it is not on the command line).
TOKEN_ENV = "AGENTFSM_UI_TOKEN"  # noqa: S105 - the variable's name, not a secret

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


def make_token() -> str:
    """A fresh random token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def csrf_token(secret: str) -> str:
    """The CSRF token forms carry: derived from the secret, useless without it."""
    return hmac.new(secret.encode(), b"agentfsm-ui csrf", hashlib.sha256).hexdigest()


def same_secret(given: str | None, expected: str) -> bool:
    """Whether `given` is `expected`, compared in constant time."""
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())
