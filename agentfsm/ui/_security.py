"""Who may change a run from the UI: the token, the CSRF check, the headers every page gets.

The model, in one place:

- **The token** is a secret made at start (or given with `--token` / `AGENTFSM_UI_TOKEN`, at
  least as strong: `token_problem`) and printed once, in the URL that opens the UI. Opening
  that URL (or posting the token to `/login`) sets it as a cookie: `HttpOnly` (no script
  reads it), `SameSite=Strict` (no other site's page sends it), path `/`. A request that
  changes a run must carry it, as that cookie or as `Authorization: Bearer TOKEN`; compared
  in constant time.
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
import re
import secrets

__all__ = [
    "COOKIE",
    "CSP",
    "SECURITY_HEADERS",
    "TOKEN_ENV",
    "TOKEN_RULE",
    "csrf_token",
    "make_token",
    "same_secret",
    "token_problem",
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


#: What a token given to the UI must be. 22 URL-safe characters carry the 16 random bytes
#: (128 bits) that put guessing out of reach; the alphabet keeps the token whole in the
#: printed sign-in URL; 256 keeps it well inside what a browser keeps as a cookie.
TOKEN_RULE = (
    "a token must be 22 to 256 characters of A-Z, a-z, 0-9, '-' and '_' (16 random bytes "  # noqa: S105 - the rule's words, not a secret
    "or more, as `secrets.token_urlsafe(16)` writes them)"
)
_TOKEN_CHARS = re.compile(r"[A-Za-z0-9_-]*\Z")
_TOKEN_LENGTHS = range(22, 257)


def make_token() -> str:
    """A fresh random token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def token_problem(token: str) -> str | None:
    """What keeps `token` from meeting `TOKEN_RULE` (`is 5 characters`), or None.

    The rule is length and alphabet: a string cannot show how it was made, so 22 characters
    of the alphabet are taken for the 16 random bytes they can carry. The problem never
    quotes the token: it is a secret, and this goes to a terminal.
    """
    if len(token) not in _TOKEN_LENGTHS:
        return f"is {len(token)} characters"
    if not _TOKEN_CHARS.match(token):
        return "holds other characters"
    return None


def csrf_token(secret: str) -> str:
    """The CSRF token forms carry: derived from the secret, useless without it."""
    return hmac.new(secret.encode(), b"agentfsm-ui csrf", hashlib.sha256).hexdigest()


def same_secret(given: str | None, expected: str) -> bool:
    """Whether `given` is `expected`, compared in constant time."""
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())
