"""`agentfsm approve|reject`: the person sees the exact call, and can pin it by digest.

Before appending, the command shows the call on stderr (tool, arguments, digest); after, it
echoes it on stdout with the run's new status. `--digest` refuses a call other than the
one reviewed; an approval past its `expires_at` is refused.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentfsm import SQLiteEventStore
from agentfsm.record import call_digest
from tests._cli_helpers import CALL, run_main, waiting_store

DIGEST = call_digest(CALL["tool"], CALL["arguments"])
OTHER = call_digest(CALL["tool"], {"order_id": 124})
SHOWN = f'cancel_order {{"order_id": 123}}, digest {DIGEST}'


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """Run `r1` waiting for approval of `a1` (no expiry)."""
    return waiting_store(tmp_path / "runs.db")


def _version(store: Path) -> int:
    with SQLiteEventStore(store) as opened:
        return opened.load("r1").version


class TestApprove:
    def test_shows_the_call_before_and_after(
        self, capsys: pytest.CaptureFixture[str], store: Path
    ) -> None:
        """stderr says what is about to be approved; stdout what was, and the run's status."""
        assert run_main(capsys, "approve", "r1", "a1", "--store", str(store)) == (
            0,
            f"approved call 'a1' of run 'r1': {SHOWN}\nrun r1: running (version 5)\n",
            f"approving call 'a1' of run 'r1': {SHOWN}\n",
        )

    def test_the_reviewed_digest_approves(
        self, capsys: pytest.CaptureFixture[str], store: Path
    ) -> None:
        """`--digest` equal to the call's digest: approved, as without it."""
        code, _, _ = run_main(
            capsys, "approve", "r1", "a1", "--digest", DIGEST, "--store", str(store)
        )
        assert (code, _version(store)) == (0, 5)

    def test_the_approvers_reason_is_kept(
        self, capsys: pytest.CaptureFixture[str], store: Path
    ) -> None:
        """`--reason` is recorded on `approval.accepted` and on the approved action."""
        code, _, _ = run_main(
            capsys, "approve", "r1", "a1", "--approver", "ann", "--reason", "refund checked",
            "--store", str(store),
        )  # fmt: skip
        with SQLiteEventStore(store) as opened:
            accepted = next(iter(opened.events("r1", after=4)))
            action = opened.load("r1").actions["a1"]
        assert (code, accepted.type, accepted.reason) == (0, "approval.accepted", "refund checked")
        assert (action.status, action.approver, action.reason) == ("approved", "ann", "refund checked")

    def test_another_digest_is_refused(
        self, capsys: pytest.CaptureFixture[str], store: Path
    ) -> None:
        """The call is not the one reviewed: exit 1 naming both digests; nothing appended."""
        assert run_main(capsys, "approve", "r1", "a1", "--digest", OTHER, "--store", str(store)) == (
            1, "", f"agentfsm approve: refused: call 'a1' of run 'r1' has digest {DIGEST}, not "
            f"the reviewed {OTHER}\n",
        )  # fmt: skip
        assert _version(store) == 4

    def test_an_expired_approval_is_refused(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """A decision after `expires_at` would be asked for again anyway: refused, exit 1."""
        store = waiting_store(tmp_path / "runs.db", expires_at="2000-01-01T00:00:00+00:00")
        assert run_main(capsys, "approve", "r1", "a1", "--store", str(store)) == (
            1, "", "agentfsm approve: refused: approval of call 'a1' expired at "
            "2000-01-01T00:00:00+00:00\n",
        )  # fmt: skip
        assert _version(store) == 4

    def test_an_approval_not_yet_expired(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """Before `expires_at` the approval goes through."""
        store = waiting_store(tmp_path / "runs.db", expires_at="2999-01-01T00:00:00Z")
        assert run_main(capsys, "approve", "r1", "a1", "--store", str(store))[0] == 0

    def test_an_unknown_call_is_the_librarys_refusal(
        self, capsys: pytest.CaptureFixture[str], store: Path
    ) -> None:
        """With no call to show, the lifecycle's own refusal speaks (exit 1)."""
        code, out, err = run_main(capsys, "approve", "r1", "zz", "--store", str(store))
        assert (code, out) == (1, "")
        assert err.startswith("agentfsm approve: refused: run 'r1' is 'waiting_approval': ")


class TestReject:
    def test_shows_the_call_before_and_after(
        self, capsys: pytest.CaptureFixture[str], store: Path
    ) -> None:
        """A refusal is shown like an approval."""
        assert run_main(capsys, "reject", "r1", "a1", "--reason", "no", "--store", str(store)) == (
            0,
            f"rejected call 'a1' of run 'r1': {SHOWN}\nrun r1: running (version 5)\n",
            f"rejecting call 'a1' of run 'r1': {SHOWN}\n",
        )

    def test_another_digest_is_refused(
        self, capsys: pytest.CaptureFixture[str], store: Path
    ) -> None:
        """`--digest` pins the rejected call too."""
        assert run_main(capsys, "reject", "r1", "a1", "--digest", OTHER, "--store", str(store)) == (
            1, "", f"agentfsm reject: refused: call 'a1' of run 'r1' has digest {DIGEST}, not "
            f"the reviewed {OTHER}\n",
        )  # fmt: skip

    def test_an_expired_approval_may_still_be_rejected(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """Saying no is never too late."""
        store = waiting_store(tmp_path / "runs.db", expires_at="2000-01-01T00:00:00+00:00")
        assert run_main(capsys, "reject", "r1", "a1", "--store", str(store))[0] == 0
