"""A real OpenID provider for the tests: the certified Node.js package ``oidc-provider``, started by the
test itself on a free 127.0.0.1 port, over plain HTTP, issuer ``http://127.0.0.1:<port>``.

The Node side is ``tests/helpers/oidc/provider.mjs`` (its header comment lists everything the provider
does); its npm packages are pinned in ``tests/helpers/oidc/package.json`` and ``package-lock.json`` and
installed on first use with ``npm ci`` into ``tests/helpers/oidc/node_modules`` (git-ignored). The install
runs under an exclusive ``fcntl.flock`` on ``tests/helpers/oidc/package.json`` (a file ``npm ci`` never
writes), so the two pytest-xdist workers starting at the same instant install once, not twice at once.

Use::

    from tests.helpers.oidc_provider import OidcProvider, authorize_until_callback, login_with_requests
    from tests.helpers.oidc_provider import require_oidc_provider

    require_oidc_provider()  # skips without node/npm, fails instead when HAI_TEST_REQUIRE contains "oidc"
    with OidcProvider.start(
        clients=[{"client_id": "hai", "client_secret": "s3cret",
                  "redirect_uris": [f"{dashboard}/auth/callback"], "post_logout_redirect_uris": [f"{dashboard}/"]}],
        users={"alice": {"groups": ["payments-ops"], "email": "alice@example.test", "name": "Alice"}},
    ) as op:
        # point the relying party at op.issuer (discovery: op.discovery_url)
        http = requests.Session()
        start = http.get(f"{dashboard}/login", allow_redirects=False)   # the RP redirects to the provider
        page = login_with_requests(http, start.headers["Location"], "alice")  # the RP's callback, answered

What the provider offers (see provider.mjs for the details): the authorization code flow only, PKCE (S256)
required, ``nonce`` in the ID token, ``client_secret_basic`` or ``client_secret_post``, scopes
``openid profile email groups``, claims ``sub`` (= the user name), ``preferred_username``, ``name``,
``email``, ``email_verified`` and ``groups`` (a list) in the ID token as well as at userinfo, an RS256 key
generated at start, RP-initiated logout at ``end_session_endpoint``. Its login page is a plain
``<form method="post">`` (inputs ``username`` and ``password``, a "Sign in" button; any password is accepted,
an unknown user gets the form again with an element ``#error``); consent is granted without a page.

Test controls, through the provider's test-admin API (``Authorization: Bearer <admin_token>``):

* :meth:`OidcProvider.set_user` / :meth:`OidcProvider.remove_user`: users change at once, for the next token
  (a login with a provider session still alive skips the login form: use a fresh ``requests.Session`` or log
  out at the provider to be asked again);
* :meth:`OidcProvider.mischief`: the next successful token response's ``id_token`` is replaced once:
  ``forged`` (signed by another key under the real ``kid``), ``expired`` (``exp`` an hour ago), ``wrong_audience``,
  ``wrong_issuer`` (``<issuer>/wrong-issuer``), ``wrong_nonce``;
* :meth:`OidcProvider.token_log`: every token-endpoint request, with its outcome (``"success"`` or the
  OAuth error code, plus oidc-provider's reason in ``error_detail``, e.g. ``"authorization code already
  consumed"`` for a replayed code).

Cookies: the provider's cookies (``op_session``, ``op_interaction``, ``op_interaction_resume`` and their
``.sig`` companions) carry no ``Secure`` flag on plain HTTP and are ``SameSite=Lax``, so Chromium and
``requests`` keep them. Cookies ignore ports: on 127.0.0.1 the relying party and the provider share one jar,
hence the ``op_`` prefix.

Logout: oidc-provider always answers ``end_session_endpoint`` with a confirmation form (there is no setting to
skip it); this provider's page auto-submits it with an inline script, so a browser goes straight on to the
``post_logout_redirect_uri``; :func:`end_session_until_redirect` posts that form for ``requests``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from html.parser import HTMLParser
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, NotRequired, TypedDict, cast
from urllib.parse import quote, urljoin, urlsplit

import pytest
import requests

from tests.helpers.served import free_port

PROVIDER_DIR = Path(__file__).resolve().parent / "oidc"
REQUIRE_ENV = "HAI_TEST_REQUIRE"
READY_TIMEOUT_S = 30.0
NPM_CI_TIMEOUT_S = 600.0
_INSTALLED_MARKER = ".hai-installed"  # in node_modules: the sha256 of the package-lock.json npm ci installed
_MAX_HOPS = 20

MischiefKind = Literal["forged", "expired", "wrong_audience", "wrong_issuer", "wrong_nonce"]
MISCHIEF_KINDS: tuple[MischiefKind, ...] = ("forged", "expired", "wrong_audience", "wrong_issuer", "wrong_nonce")


class OidcClient(TypedDict):
    """A registered client (relying party). ``token_endpoint_auth_method`` defaults to
    ``client_secret_basic``; the provider accepts ``client_secret_post`` from such a client too."""

    client_id: str
    client_secret: str
    redirect_uris: list[str]
    post_logout_redirect_uris: NotRequired[list[str]]
    token_endpoint_auth_method: NotRequired[str]


class OidcUser(TypedDict, total=False):
    """A user's claims; ``email`` defaults to ``<name>@example.test``, ``name`` to the user name."""

    groups: list[str]
    email: str
    name: str


class TokenLogEntry(TypedDict):
    """One request the token endpoint saw (``GET /test-admin/log``)."""

    at: str  # ISO 8601, the provider's clock
    grant_type: str | None
    client_id: str | None
    code_verifier_sent: bool
    status: int  # the HTTP status answered
    outcome: str  # "success" or the OAuth error code ("invalid_grant", "invalid_client", ...)
    error_description: str | None
    error_detail: str | None  # oidc-provider's internal reason, e.g. "authorization code already consumed"
    mischief: MischiefKind | None  # the replacement applied to this response's id_token, if any


class OidcProviderError(RuntimeError):
    """The provider could not be installed, started or driven."""


class OidcLoginError(AssertionError):
    """The provider's pages did not lead back to the relying party: the login was refused (the form came
    back, with an ``#error``), or the provider showed an error page. ``response`` is the last page."""

    def __init__(self, message: str, response: requests.Response) -> None:
        super().__init__(f"{message} (HTTP {response.status_code} at {response.url}): {_excerpt(response.text)}")
        self.response = response


# ------------------------------------------------------------------------------------------ availability


def require_oidc_provider() -> None:
    """Skip the calling test when Node.js or npm is missing; fail it instead when ``HAI_TEST_REQUIRE``
    (comma separated) contains ``oidc``."""
    problem = _missing_tools()
    if problem is None:
        return
    required = {name.strip() for name in os.environ.get(REQUIRE_ENV, "").split(",")}
    if "oidc" in required:
        pytest.fail(f"{problem} (required by {REQUIRE_ENV})")
    pytest.skip(problem)


def _missing_tools() -> str | None:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        missing = " and ".join(name for name, path in (("node", node), ("npm", npm)) if path is None)
        return f"the OpenID provider needs Node.js: no {missing} on PATH"
    try:
        version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"the OpenID provider needs Node.js: `node --version` failed: {exc}"
    major = re.match(r"v(\d+)\.", version.strip())
    if major is None or int(major.group(1)) < 20:
        return f"the OpenID provider needs Node.js 20 or later, found {version.strip()!r}"
    return None


def ensure_node_modules() -> None:
    """Install the pinned npm packages (``npm ci``) unless ``node_modules`` already holds exactly the
    ``package-lock.json``. Exclusive ``flock`` on package.json: concurrent callers wait, then find it done."""
    lock_path = PROVIDER_DIR / "package-lock.json"
    with open(PROVIDER_DIR / "package.json", "rb") as guard:
        fcntl.flock(guard.fileno(), fcntl.LOCK_EX)
        try:
            wanted = hashlib.sha256(lock_path.read_bytes()).hexdigest()
            marker = PROVIDER_DIR / "node_modules" / _INSTALLED_MARKER
            if marker.is_file() and marker.read_text().strip() == wanted:
                return
            npm = shutil.which("npm")
            if npm is None:
                raise OidcProviderError("npm is not on PATH (call require_oidc_provider() first)")
            try:
                done = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=PROVIDER_DIR, capture_output=True,
                                      text=True, timeout=NPM_CI_TIMEOUT_S, check=False)
            except subprocess.TimeoutExpired as exc:
                raise OidcProviderError(f"npm ci in {PROVIDER_DIR} took more than {NPM_CI_TIMEOUT_S:.0f} s") from exc
            if done.returncode != 0:
                raise OidcProviderError(f"npm ci in {PROVIDER_DIR} failed ({done.returncode}):\n"
                                        f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
            marker.write_text(wanted + "\n")
        finally:
            fcntl.flock(guard.fileno(), fcntl.LOCK_UN)


# ------------------------------------------------------------------------------------------ the provider


class OidcProvider:
    """A running ``provider.mjs`` process; a context manager that stops it (the whole process group) on exit.

    Start it with :meth:`start`; it is ready to answer when that returns."""

    def __init__(self, process: subprocess.Popen[bytes], issuer: str, admin_token: str, workdir: Path) -> None:
        self._process = process
        self._issuer = issuer
        self._admin_token = admin_token
        self._workdir = workdir
        self._admin = requests.Session()
        self._admin.headers["Authorization"] = f"Bearer {admin_token}"

    @classmethod
    def start(cls, clients: Sequence[OidcClient], users: Mapping[str, OidcUser] | None = None,
              id_token_ttl: int = 600) -> OidcProvider:
        """Install the npm packages if needed, start the provider on a free port and wait (up to 30 s) for it
        to print ``READY <issuer>``. Raises :class:`OidcProviderError`, with the provider's stderr, on failure."""
        ensure_node_modules()
        node = shutil.which("node")
        if node is None:
            raise OidcProviderError("node is not on PATH (call require_oidc_provider() first)")
        admin_token = os.urandom(24).hex()
        workdir = Path(tempfile.mkdtemp(prefix="hai-oidc-"))
        try:
            for attempt in range(3):  # another process may take the free port before node binds it
                port = free_port()
                config = {"port": port, "clients": list(clients), "users": dict(users or {}),
                          "admin_token": admin_token, "id_token_ttl": id_token_ttl}
                config_path = workdir / "config.json"
                config_path.write_text(json.dumps(config, indent=2))
                stderr_path = workdir / "provider.stderr"
                with open(stderr_path, "wb") as stderr:
                    # stdin: a pipe only this process holds; the provider ends at its EOF, so it cannot
                    # outlive a test process that dies without stopping it (SIGKILL, a pytest-timeout)
                    process = subprocess.Popen([node, str(PROVIDER_DIR / "provider.mjs"), str(config_path),
                                                "--exit-with-stdin"], cwd=PROVIDER_DIR, stdin=subprocess.PIPE,
                                               stdout=subprocess.PIPE, stderr=stderr, start_new_session=True)
                issuer = f"http://127.0.0.1:{port}"
                problem = _wait_ready(process, issuer)
                if problem is None:
                    return cls(process, issuer, admin_token, workdir)
                _stop_group(process)
                log = stderr_path.read_text(errors="replace")
                if "EADDRINUSE" in log and attempt < 2:
                    continue
                raise OidcProviderError(f"the OpenID provider did not start: {problem}\n--- its stderr ---\n"
                                        f"{log[-5000:]}")
            raise AssertionError("unreachable")
        except BaseException:
            shutil.rmtree(workdir, ignore_errors=True)
            raise

    # --- properties -------------------------------------------------------------------------------

    @property
    def issuer(self) -> str:
        """``http://127.0.0.1:<port>``, exactly as in the discovery document and the ``iss`` claim."""
        return self._issuer

    @property
    def admin_token(self) -> str:
        return self._admin_token

    @property
    def discovery_url(self) -> str:
        return f"{self._issuer}/.well-known/openid-configuration"

    def stderr_text(self) -> str:
        """What the provider wrote to stderr so far (its request log and errors)."""
        try:
            return (self._workdir / "provider.stderr").read_text(errors="replace")
        except OSError:
            return ""

    # --- test-admin API ---------------------------------------------------------------------------

    def set_user(self, username: str, /, *, groups: Sequence[str] = (), email: str | None = None,
                 name: str | None = None) -> None:
        """Create or replace user ``username`` (also its ``sub``); effective for the next token issued."""
        body: dict[str, Any] = {"groups": list(groups)}
        if email is not None:
            body["email"] = email
        if name is not None:
            body["name"] = name
        self._call("PUT", f"/test-admin/users/{quote(username, safe='')}", body)

    def remove_user(self, username: str) -> None:
        """Delete the user (no error when there is none): its next login is refused."""
        self._call("DELETE", f"/test-admin/users/{quote(username, safe='')}", ok=(200, 404))

    def mischief(self, kind: MischiefKind | None) -> None:
        """Replace the ``id_token`` of the next successful token response (once); ``None`` disarms."""
        if kind is not None and kind not in MISCHIEF_KINDS:
            raise ValueError(f"unknown mischief {kind!r}; one of {', '.join(MISCHIEF_KINDS)}")
        self._call("POST", "/test-admin/mischief", {"next_id_token": kind})

    def token_log(self) -> list[TokenLogEntry]:
        """Every token-endpoint request seen since start (or :meth:`clear_token_log`), oldest first."""
        return cast(list[TokenLogEntry], self._call("GET", "/test-admin/log"))

    def clear_token_log(self) -> None:
        self._call("DELETE", "/test-admin/log")

    def _call(self, method: str, path: str, body: Any = None, ok: tuple[int, ...] = (200,)) -> Any:
        response = self._admin.request(method, f"{self._issuer}{path}", json=body, timeout=10)
        if response.status_code not in ok:
            raise OidcProviderError(f"{method} {path}: HTTP {response.status_code} {response.text[:500]}")
        return response.json()

    # --- lifetime ---------------------------------------------------------------------------------

    def stop(self) -> None:
        """SIGTERM to the provider's process group, SIGKILL after 5 s; idempotent."""
        self._admin.close()
        _stop_group(self._process)
        shutil.rmtree(self._workdir, ignore_errors=True)

    def __enter__(self) -> OidcProvider:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()


def _wait_ready(process: subprocess.Popen[bytes], issuer: str) -> str | None:
    """None once the process printed ``READY <issuer>``, else what went wrong."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    seen = b""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while b"\n" not in seen:
        left = deadline - time.monotonic()
        if left <= 0:
            return f"no READY line within {READY_TIMEOUT_S:.0f} s"
        readable, _, _ = select.select([fd], [], [], min(left, 0.5))
        if readable:
            chunk = os.read(fd, 4096)
            if not chunk:
                process.wait(timeout=5)
                return f"it exited with status {process.returncode} before READY"
            seen += chunk
    line = seen.split(b"\n", 1)[0].decode(errors="replace").strip()
    if line != f"READY {issuer}":
        return f"unexpected first line on stdout: {line!r}"
    return None


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)
    else:  # the leader is gone; anything it left in its group goes too
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
    for pipe in (process.stdin, process.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()


# ------------------------------------------------------------------------------------------ a browser's walk


def authorize_until_callback(http: requests.Session, authorize_url: str, username: str,
                             password: str = "any password") -> str:
    """Walk the provider's pages as a browser would, starting at ``authorize_url`` (the provider's
    authorization URL the relying party redirected to): follow the provider's redirects, fill in and post its
    login form with ``username`` / ``password`` when it shows one (a live provider session in ``http`` skips
    it) and the hidden forms its pages' scripts post, until a redirect leaves the provider's origin. Return
    that URL, the relying party's callback with ``code`` and ``state`` (or ``error`` when the provider refused
    the request), WITHOUT requesting it: replay tests can then send it twice. Cookies land in ``http``.

    Raises :class:`OidcLoginError` when the login form comes back (unknown user) or on a provider error page."""
    submitted = False

    def on_page(url: str, response: requests.Response) -> tuple[str, requests.Response] | str:
        nonlocal submitted
        forms = _forms(response.text) if response.status_code == 200 else []
        form = next((f for f in forms if "username" in f.inputs), None)
        if form is not None:
            if submitted:
                raise OidcLoginError(f"the provider refused the login of {username!r}", response)
            submitted = True
            target = urljoin(url, form.action)
            fields = {**form.hidden, "username": username, "password": password}
            return target, http.post(target, data=fields, allow_redirects=False, timeout=10)
        if forms and forms[0].inputs == set(forms[0].hidden):  # a form a browser's script submits (the provider
            target = urljoin(url, forms[0].action)  # ending another user's session first): post it as it is
            return target, http.post(target, data=forms[0].hidden, allow_redirects=False, timeout=10)
        raise OidcLoginError("the provider answered with a page that is neither its login form nor a redirect",
                             response)

    return _walk_provider(http, authorize_url, on_page)


def login_with_requests(http: requests.Session, authorize_response_url: str, username: str,
                        password: str = "any password", *, follow_redirects: bool = True) -> requests.Response:
    """:func:`authorize_until_callback`, then request the callback through ``http`` as the browser would, and
    return the answer: the relying party's final page when ``follow_redirects`` (the callback's own response is
    then in ``.history``), else the callback's response itself."""
    callback = authorize_until_callback(http, authorize_response_url, username, password)
    return http.get(callback, allow_redirects=follow_redirects, timeout=30)


def end_session_until_redirect(http: requests.Session, end_session_url: str) -> str:
    """Walk the provider's RP-initiated logout as a browser would, from ``end_session_url`` (the
    ``end_session_endpoint`` with ``id_token_hint`` / ``client_id``, ``post_logout_redirect_uri``, ``state``
    that the relying party redirected to): post its confirmation form (a browser's script does it without a
    click), follow its redirects, and return the first URL off the provider's origin (the
    ``post_logout_redirect_uri`` with ``state``) without requesting it; or, when the logout has no redirect
    back, the URL of the provider's "Signed out" page. Raises :class:`OidcLoginError` on an error page."""
    posted = False

    def on_page(url: str, response: requests.Response) -> tuple[str, requests.Response] | str:
        nonlocal posted
        forms = _forms(response.text)
        if response.status_code == 200 and forms and not posted:
            posted = True
            target = urljoin(url, forms[0].action)
            return target, http.post(target, data=forms[0].hidden, allow_redirects=False, timeout=10)
        if response.status_code == 200 and not forms:
            return url  # the provider's own "Signed out" page
        raise OidcLoginError("the provider's logout did not end in a redirect", response)

    return _walk_provider(http, end_session_url, on_page)


def _walk_provider(http: requests.Session, start: str,
                   on_page: Callable[[str, requests.Response], tuple[str, requests.Response] | str]) -> str:
    """Follow the provider's redirects from ``start`` until one leaves its origin (that URL is returned,
    not requested); a page that is no redirect goes to ``on_page``, which posts its form (the URL posted
    to and the answer) or ends the walk (a URL to return), or raises."""
    provider_origin = _origin(start)
    url = start
    response = http.get(url, allow_redirects=False, timeout=10)
    for _ in range(_MAX_HOPS):
        if response.is_redirect:
            url = urljoin(url, response.headers["Location"])
            if _origin(url) != provider_origin:
                return url
            response = http.get(url, allow_redirects=False, timeout=10)
            continue
        step = on_page(url, response)
        if isinstance(step, str):
            return step
        url, response = step
    raise OidcLoginError(f"more than {_MAX_HOPS} hops at the provider", response)


def logout_with_requests(http: requests.Session, end_session_url: str) -> requests.Response:
    """:func:`end_session_until_redirect`, then request where it leads (redirects followed) through ``http``."""
    return http.get(end_session_until_redirect(http, end_session_url), timeout=30)


# ------------------------------------------------------------------------------------------ HTML forms


class _Form:
    def __init__(self, action: str, method: str) -> None:
        self.action = action
        self.method = method
        self.hidden: dict[str, str] = {}
        self.inputs: set[str] = set()


class _FormParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.forms: list[_Form] = []
        self._current: _Form | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {name: value or "" for name, value in attrs}
        if tag == "form":
            self._current = _Form(attributes.get("action", ""), attributes.get("method", "get").lower())
            self.forms.append(self._current)
        elif tag == "input" and self._current is not None and attributes.get("name"):
            name = attributes["name"]
            self._current.inputs.add(name)
            if attributes.get("type", "text").lower() == "hidden":
                self._current.hidden[name] = attributes.get("value", "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._current = None


def _forms(html: str) -> list[_Form]:
    parser = _FormParser()
    parser.feed(html)
    parser.close()
    return [form for form in parser.forms if form.method == "post"]


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme, parts.netloc


def _excerpt(text: str, limit: int = 1500) -> str:
    flat = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", text)).strip()
    return flat[:limit]
