"""The review file, `agentfsm report` / `diagram --format html`, `agentfsm ui --log`, and the
server's start-up (bind address, warning, token line)."""

from __future__ import annotations

import html as html_text
import json
import re
import string
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.testclient import TestClient

from agentfsm.cli import main
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.ui import LogSource, UIConfig, create_app, render_report
from agentfsm.ui._security import make_token, token_problem
from agentfsm.ui._server import allowed_hosts, is_loopback
from agentfsm.ui.report import MAX_RUNS, _embedded, _recorded

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ROOT = EXAMPLES.parent


def _broken_log(tmp_path: Path) -> Path:
    """The cancel-order log with a `model.started` while the call waits for approval."""
    lines = (EXAMPLES / "cancel_order_approval.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    bad = {"run_id": first["run_id"], "sequence": 5, "type": "model.started",
           "occurred_at": "2026-09-01T10:00:05Z"}  # fmt: skip
    path = tmp_path / "broken.jsonl"
    path.write_text("\n".join([*lines[:4], json.dumps(bad)]) + "\n")
    return path


class TestReport:
    def test_the_file_is_self_contained(self) -> None:
        """No URL to fetch: no src=, no href= outside the page, a CSP that allows none."""
        html = render_report()
        assert re.findall(r'\s(?:src|href)="(?!#)[^"]*"', html) == []
        csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html)
        assert csp is not None
        assert html_text.unescape(csp.group(1)).startswith("default-src 'none'; img-src data:;")
        assert "<svg" in html
        assert 'data-state="waiting_approval"' in html

    def test_the_csp_hashes_match_the_inline_style_and_script(self) -> None:
        """The browser runs the inline script only because its hash is in the policy."""
        import base64
        import hashlib

        html = render_report()
        for tag in ("style", "script"):
            body = re.search(rf"<{tag}>(.*?)</{tag}>", html, re.DOTALL)
            assert body is not None
            digest = base64.b64encode(hashlib.sha256(body.group(1).encode()).digest()).decode()
            assert f"'sha256-{digest}'" in html_text.unescape(html)

    def test_recorded_runs_and_a_refusal_with_what_was_allowed(self, tmp_path: Path) -> None:
        """A log's run is there to step through; the refused event is named with the
        events its state allowed."""
        html = render_report(log=_broken_log(tmp_path).read_text().splitlines())
        assert "The log broke the lifecycle at sequence 5" in " ".join(html.split())
        assert "Allowed in <code>waiting_approval</code>: <code>approval.accepted</code>" in html
        assert 'class="run-data"' in html

    def test_embedded_json_cannot_close_its_block(self) -> None:
        """`</script>` in a log's text stays inside the JSON block."""
        text = str(_embedded({"x": "</script><script>alert(1)</script>&"}))
        assert not {"<", ">", "&"} & set(text)
        assert json.loads(text) == {"x": "</script><script>alert(1)</script>&"}

    def test_report_command_writes_the_file(self, tmp_path: Path) -> None:
        """`agentfsm report LOG -o FILE` writes one HTML file."""
        out = tmp_path / "review.html"
        log = EXAMPLES / "cancel_order_approval.jsonl"
        assert main(["report", str(log), "-o", str(out)]) == 0
        assert out.read_text().startswith("<!doctype html>")

    def test_diagram_format_html_is_the_report(self, tmp_path: Path) -> None:
        """`agentfsm diagram --format html` writes the same kind of file."""
        out = tmp_path / "table.html"
        assert main(["diagram", "--format", "html", "-o", str(out)]) == 0
        assert 'http-equiv="Content-Security-Policy"' in out.read_text()

    def test_run_id_needs_a_log(self, capsys: pytest.CaptureFixture[str]) -> None:
        """--run-id without a log is a usage error, one line, exit 2."""
        assert main(["report", "--run-id", "r1"]) == 2
        assert capsys.readouterr().err == "agentfsm report: --run-id needs a log\n"


class TestALargeLog:
    def test_only_the_runs_shown_are_held(self) -> None:
        """A log of 5,000 runs: the first `MAX_RUNS` are folded for the page and the rest
        named; their events are never all held (memory goes with the runs shown)."""
        log = (
            f'{{"run_id":"run_{i:05d}","sequence":1,"type":"run.started",'
            '"occurred_at":"2026-09-01T10:00:00+00:00"}'
            for i in range(5000)
        )
        tracemalloc.start()
        try:
            runs, left_out, problems = _recorded(log, DEFAULT_TABLE, set())
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert [r.run_id for r in runs] == [f"run_{i:05d}" for i in range(MAX_RUNS)]
        assert (left_out.names[0], left_out.count) == ("run_00020", 5000 - MAX_RUNS)
        assert (problems.names, problems.count) == ([], 0)
        assert peak < 2 * 2**20, f"{peak:,} bytes"


class TestLogSource:
    def test_a_refused_event_is_shown_where_it_broke(self, tmp_path: Path) -> None:
        """`agentfsm ui --log`: the run is its log up to the refusal; the page says where
        it broke and what was allowed."""
        source = LogSource(_broken_log(tmp_path))
        c = TestClient(create_app(source, UIConfig(token="t" * 20, read_only=True,
                                                   allowed_hosts=("testserver",))))  # fmt: skip
        run_id = next(iter(source.refusals))
        page = c.get(f"/run?id={run_id}").text
        assert "The log broke the lifecycle at sequence 5" in page
        assert "<code>model.started</code> was refused" in page
        assert "<code>approval.accepted</code>, <code>approval.rejected</code>" in page


class TestServe:
    def test_loopback_names(self) -> None:
        """127.0.0.0/8, ::1 and localhost are this machine; others are not."""
        assert [is_loopback(h) for h in ("127.0.0.1", "::1", "localhost", "0.0.0.0", "10.0.0.1")] == [
            True, True, True, False, False,
        ]  # fmt: skip
        assert allowed_hosts("0.0.0.0") == ("*",)

    def test_ui_serves_on_127_0_0_1_and_prints_the_sign_in_url(self, tmp_path: Path) -> None:
        """Started on a free port, the server says where, with the token's URL, and answers."""
        from tests.ui.conftest import make_runs

        make_runs(tmp_path / "runs.db")
        with subprocess.Popen(
            [sys.executable, "-m", "agentfsm", "ui", "--store", str(tmp_path / "runs.db"),
             "--port", "0", "--token", "secret-token-for-this-test"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        ) as proc:  # fmt: skip
            try:
                assert proc.stdout is not None
                first = proc.stdout.readline()
                second = proc.stdout.readline()
                match = re.match(r"agentfsm ui: serving .* at (http://127\.0\.0\.1:\d+/)\n", first)
                assert match is not None, first
                assert second == f"agentfsm ui: open {match.group(1)}login?token=secret-token-for-this-test to sign in (changes need it)\n"
                import urllib.request

                deadline = time.monotonic() + 10
                while True:
                    try:
                        with urllib.request.urlopen(match.group(1)) as answer:
                            assert answer.status == 200
                            break
                    except OSError:
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.05)
            finally:
                proc.terminate()
                proc.wait(10)

    def test_another_address_warns(self, tmp_path: Path) -> None:
        """Listening beyond this machine is said on stderr before anything is served."""
        from tests.ui.conftest import make_runs

        make_runs(tmp_path / "runs.db")
        with subprocess.Popen(
            [sys.executable, "-m", "agentfsm", "ui", "--store", str(tmp_path / "runs.db"),
             "--port", "0", "--host", "0.0.0.0", "--read-only"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        ) as proc:  # fmt: skip
            try:
                assert proc.stderr is not None
                assert proc.stdout is not None
                assert proc.stderr.readline().startswith(
                    "agentfsm ui: warning: listening on 0.0.0.0, not only on this machine"
                )
                assert "(read-only)" in proc.stdout.readline()
            finally:
                proc.terminate()
                proc.wait(10)

    def test_a_missing_store_is_a_usage_error(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """No SQLite file there: one line, exit 2, nothing served."""
        assert main(["ui", "--store", str(tmp_path / "none.db")]) == 2
        assert "no SQLite store at" in capsys.readouterr().err


class TestProcesses:
    """`agentfsm ui --processes N`: N processes forked after the bind answer on one port, a
    change signed in at one is accepted by another, and none outlives the command."""

    TOKEN = "secret-token-for-this-test"

    @staticmethod
    def _children(pid: int) -> list[int]:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
        return [int(child) for child in text.split()]

    @staticmethod
    def _gone(pid: int) -> bool:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        return state == "Z"

    def test_two_processes_answer_and_none_is_left_behind(self, tmp_path: Path) -> None:
        import httpx

        from tests.ui.conftest import make_runs

        make_runs(tmp_path / "runs.db")
        with subprocess.Popen(
            [sys.executable, "-m", "agentfsm", "ui", "--store", str(tmp_path / "runs.db"),
             "--port", "0", "--token", self.TOKEN, "--processes", "2"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        ) as proc:  # fmt: skip
            try:
                assert proc.stdout is not None
                match = re.match(r"agentfsm ui: serving .* at (http://127\.0\.0\.1:\d+/)\n",
                                 proc.stdout.readline())  # fmt: skip
                assert match is not None
                base = match.group(1)
                deadline = time.monotonic() + 20
                while len(self._children(proc.pid)) < 2 and time.monotonic() < deadline:
                    time.sleep(0.05)
                children = self._children(proc.pid)
                assert len(children) == 2
                for _ in range(20):  # fresh connections, taken by whichever process accepts
                    with httpx.Client(base_url=base, timeout=10) as client:
                        assert client.get("/tables").status_code == 200
                assert all(not self._gone(child) for child in children)
                # Signed in through one connection, changing through others: the token, and
                # so the CSRF token a form carries, are the same in every process.
                for _ in range(6):
                    with httpx.Client(base_url=base, timeout=10) as client:
                        login = client.get(f"/login?token={self.TOKEN}", follow_redirects=False)
                        assert login.status_code in (302, 303, 307), login.text
                        assert client.cookies.get("agentfsm_ui_token") == self.TOKEN
            finally:
                proc.terminate()
                code = proc.wait(20)
            assert code == 0
            deadline = time.monotonic() + 10
            while not all(self._gone(child) for child in children):
                assert time.monotonic() < deadline, "a server process outlived the command"
                time.sleep(0.05)

    @pytest.mark.parametrize("value", ["0", "65", "two", "-1"])
    def test_a_count_out_of_range_is_a_usage_error(
        self, tmp_path: Path, value: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        from tests.ui.conftest import make_runs

        make_runs(tmp_path / "runs.db")
        assert main(["ui", "--store", str(tmp_path / "runs.db"), "--processes", value]) == 2
        err = capsys.readouterr().err
        assert f"argument --processes: '{value}' is not a whole number from 1 to 64" in err
        assert "Traceback" not in err


class TestTheToken:
    """A token given to `agentfsm ui` must be as strong as the one it makes: 16 random bytes
    written URL-safe (22 characters) or more, so that it can be neither guessed nor mangled
    in the printed sign-in URL."""

    RULE = (
        "a token must be 22 to 256 characters of A-Z, a-z, 0-9, '-' and '_' (16 random bytes "
        "or more, as `secrets.token_urlsafe(16)` writes them), or leave it out for a fresh one"
    )

    @pytest.mark.parametrize(
        ("token", "problem"),
        [
            ("s3cre", "is 5 characters"),
            ("", "is 0 characters"),
            ("secret-token-for-test", "is 21 characters"),
            ("x" * 257, "is 257 characters"),
            ("correct horse battery staple", "holds other characters"),
            ("a&b=c" + "d" * 20, "holds other characters"),
        ],
    )
    def test_a_weak_token_is_refused_before_anything_is_opened(
        self, token: str, problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """One line, exit 2, naming the flag, what is wrong and what is required, without
        echoing the secret; no store is opened (a missing one would be another message)."""
        code = main(["ui", "--store", str(tmp_path / "none.db"), "--token", token])
        assert (code, capsys.readouterr()) == (2, ("", f"agentfsm ui: --token {problem}; {self.RULE}\n"))

    def test_the_environment_token_is_held_to_the_same_rule(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`$AGENTFSM_UI_TOKEN` is named as where the weak token came from."""
        monkeypatch.setenv("AGENTFSM_UI_TOKEN", "hunter2")
        assert main(["ui", "--store", str(tmp_path / "none.db")]) == 2
        assert capsys.readouterr().err == f"agentfsm ui: $AGENTFSM_UI_TOKEN is 7 characters; {self.RULE}\n"

    def test_an_empty_environment_token_is_unset(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`AGENTFSM_UI_TOKEN=` is no token (a fresh one is made), as an empty AGENTFSM_STORE
        is no store: here the next problem is the missing store."""
        monkeypatch.setenv("AGENTFSM_UI_TOKEN", "")
        assert main(["ui", "--store", str(tmp_path / "none.db")]) == 2
        assert "no SQLite store at" in capsys.readouterr().err

    @given(st.text(alphabet=string.ascii_letters + string.digits + "-_", min_size=22, max_size=256))
    def test_every_url_safe_token_of_the_length_passes(self, token: str) -> None:
        """The rule is exactly length and alphabet."""
        assert token_problem(token) is None

    @given(st.text(max_size=300))
    def test_whatever_passes_is_url_safe_and_long_enough(self, token: str) -> None:
        """A token that passes stands in a URL as it is, and has room for 128 bits."""
        if token_problem(token) is None:
            assert 22 <= len(token) <= 256
            assert quote(token, safe="") == token

    def test_the_token_it_makes_passes_its_own_rule(self) -> None:
        """`make_token` writes 32 random bytes: 43 characters of the alphabet."""
        token = make_token()
        assert (len(token), token_problem(token)) == (43, None)
