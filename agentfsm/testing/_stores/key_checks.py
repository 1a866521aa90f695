"""One key per store: what every backend that keeps meta must refuse, and how it re-keys.

Mixed into `StoreConformance` (and `AsyncStoreConformance`). The attack these come from: a
handle without the key appended to a keyed store, and every keyed handle refused the run
from then on. The checks that edit the key record behind the store need a `tamper` fixture
with `set_meta` (a `RecordTamper`); without one they are skipped, saying so.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

import pytest

from agentfsm.errors import CorruptLogError, IntegrityKeyError
from agentfsm.events.codec import dump_event
from agentfsm.reducers.reduce import replay
from agentfsm.stores._integrity import KEY_ENV, Integrity, key_id
from agentfsm.stores.base import AsyncEventStore, EventStore, StoreOptions
from agentfsm.stores.rekey import rekey
from agentfsm.stores.runs import RunInfo
from agentfsm.testing._stores.scripted import scripted_run, tool_turn
from agentfsm.testing._stores.tamper import KEY, OpenStore, Tamper, chain

__all__ = ["OTHER_KEY", "AsyncKeyChecks", "KeyChecks", "RecordTamper", "record_tamper"]

#: A second integrity key, for the checks that need two.
OTHER_KEY = b"another key, also thirty-two by!"

_GIVE = f"give it the store's key ({KEY_ENV} or StoreOptions(integrity_key=...))"


def _id(key: bytes) -> str:
    return key_id(key)


@runtime_checkable
class RecordTamper(Protocol):
    """A `Tamper` that also edits what a store keeps beside the log, behind its back."""

    def set_meta(self, key: str, value: str | None) -> None:
        """Set `key` of the store's meta to `value` (None: delete it)."""

    def set_run(self, info: RunInfo) -> None:
        """Overwrite the run's runs row with `info` (every column)."""


def record_tamper(tamper: Tamper) -> RecordTamper:
    if not isinstance(tamper, RecordTamper):
        pytest.skip("this backend's `tamper` has no `set_meta`/`set_run`: checks not run")
    return tamper


def _refusal(info: pytest.ExceptionInfo[IntegrityKeyError]) -> tuple[str | None, str, str]:
    """The refusal's records and its sentence, without the backend's own prefix (SQLite
    names its file)."""
    text = str(info.value)
    sentence = text[text.index("the store") :]
    return info.value.store_key, info.value.handle_key, sentence


def _requiring(open_store: OpenStore, hook: str, missing: str) -> OpenStore:
    def open_(**options: Any) -> EventStore:
        store = open_store(**options)
        if getattr(type(store), hook) is getattr(EventStore, hook):
            pytest.skip(f"{type(store).__name__} {missing} not run")
        return store

    return open_


class KeyChecks:
    """The key record part of `StoreConformance` (its fixtures: `open_store`, `tamper`).

    Skipped, saying so, for a backend that keeps no meta (no `_read_meta`): its store
    records no key. The re-key checks need `_rewrite_run` too.
    """

    @pytest.fixture
    def key_store(self, open_store: OpenStore) -> OpenStore:
        """`open_store`, skipping the test for a backend that keeps no key record (checked
        on the handle it opens: a probe handle would record its own key)."""
        return _requiring(open_store, "_read_meta", "keeps no meta: key record checks")

    @pytest.fixture
    def rekey_store(self, key_store: OpenStore) -> OpenStore:
        """`open_store`, skipping the test for a backend that cannot be re-keyed."""
        return _requiring(key_store, "_rewrite_run", "has no `_rewrite_run`: re-key checks")

    def test_a_handle_without_the_key_is_refused_when_it_opens(self, key_store: OpenStore) -> None:
        """A keyed store refuses a keyless handle before it writes: the reported attack."""
        keyed = key_store(integrity_key=KEY)
        keyed.append("r1", scripted_run("r1", 1), 0)
        with pytest.raises(IntegrityKeyError) as info:
            key_store(integrity_key=None)
        assert _refusal(info) == (
            f"hmac-sha256:{_id(KEY)}",
            "unkeyed",
            f"the store is keyed with key id '{_id(KEY)}', but this handle has no key: {_GIVE}",
        )
        assert key_store(integrity_key=KEY).verify("r1").ok

    def test_a_handle_with_another_key_is_refused_naming_both(self, key_store: OpenStore) -> None:
        """A wrong key is refused, naming the store's key id and the handle's."""
        key_store(integrity_key=KEY).append("r1", scripted_run("r1", 1), 0)
        with pytest.raises(IntegrityKeyError) as info:
            key_store(integrity_key=OTHER_KEY)
        assert _refusal(info)[2] == (
            f"the store is keyed with key id '{_id(KEY)}', but this handle's key has id "
            f"'{_id(OTHER_KEY)}': {_GIVE}"
        )

    def test_a_keyed_handle_on_a_keyless_store_is_refused(self, key_store: OpenStore) -> None:
        """A key the store was never under is refused too: its every row would look forged."""
        key_store(integrity_key=None).append("r1", scripted_run("r1", 1), 0)
        with pytest.raises(IntegrityKeyError) as info:
            key_store(integrity_key=KEY)
        assert _refusal(info) == (
            "unkeyed",
            f"hmac-sha256:{_id(KEY)}",
            f"the store is unkeyed, but this handle has a key (key id '{_id(KEY)}'): open it "
            "without one, or add the key with `agentfsm rekey`",
        )

    def test_the_first_handle_records_its_key_in_an_empty_store(self, key_store: OpenStore) -> None:
        """The key is the store's from its first handle on, before any run is written."""
        key_store(integrity_key=KEY).close()
        with pytest.raises(IntegrityKeyError):
            key_store(integrity_key=None)
        assert key_store(integrity_key=KEY).runs() == []

    def test_a_keyed_stream_refuses_a_link_recomputed_without_the_key(
        self, open_store: OpenStore, tamper: Tamper
    ) -> None:
        """`events()` checks every link under a key, as a load does, from any sequence: a
        hash replaced by its plain link fails at its row, and the row after it no longer
        links to it."""
        events = scripted_run("r1", 1)
        open_store(integrity_key=KEY, snapshot_every=None).append("r1", events, 0)
        tamper.set_event_hash("r1", 4, chain(events)[3])
        reader = open_store(integrity_key=KEY, snapshot_every=None)
        for after, bad in ((0, 4), (2, 4), (3, 4), (4, 5)):
            with pytest.raises(CorruptLogError) as info:
                list(reader.events("r1", after=after))
            assert str(info.value) == (
                f"run 'r1', sequence {bad}: the hash does not match: this event or its stored "
                "hash was changed (or the store was written under another integrity key, or "
                "none)"
            )
        assert [e.sequence for e in reader.events("r1", after=5)] == [6]

    # -- a store without a key record (written before key records existed) ------------------

    def test_a_store_without_a_record_is_adopted_only_under_its_key(
        self, key_store: OpenStore, tamper: Tamper
    ) -> None:
        """A keyed store with no key record: a keyless handle is refused (its first run's
        first link is not a plain one), a keyed one records the key."""
        meta = record_tamper(tamper)
        key_store(integrity_key=KEY).append("r1", scripted_run("r1", 1), 0)
        meta.set_meta("integrity", None)
        with pytest.raises(IntegrityKeyError) as info:
            key_store(integrity_key=None)
        assert _refusal(info) == (
            None,
            "unkeyed",
            "the store records no key yet, and its run 'r1' was not written without one (it "
            f"was written under a key, or changed): {_GIVE}",
        )
        with pytest.raises(IntegrityKeyError) as other:
            key_store(integrity_key=OTHER_KEY)
        assert _refusal(other)[2] == (
            "the store records no key yet, and its run 'r1' was not written under this "
            f"handle's key (key id '{_id(OTHER_KEY)}'): {_GIVE}"
        )
        assert key_store(integrity_key=KEY).verify("r1").ok
        with pytest.raises(IntegrityKeyError) as after:
            key_store(integrity_key=None)
        assert _refusal(after)[0] == f"hmac-sha256:{_id(KEY)}"

    def test_a_keyless_store_without_a_record_refuses_a_key(
        self, key_store: OpenStore, tamper: Tamper
    ) -> None:
        """An unkeyed store with no key record is not adopted by a keyed handle."""
        meta = record_tamper(tamper)
        key_store(integrity_key=None).append("r1", scripted_run("r1", 1), 0)
        meta.set_meta("integrity", None)
        with pytest.raises(IntegrityKeyError) as info:
            key_store(integrity_key=KEY)
        assert _refusal(info)[2] == (
            "the store records no key yet, and its run 'r1' was written without a key, but "
            f"this handle has one (key id '{_id(KEY)}'): open it without one, or add the key "
            "with `agentfsm rekey`"
        )
        assert key_store(integrity_key=None).verify("r1").ok

    # -- the record checked by every write -------------------------------------------------

    def test_a_write_after_the_record_moved_is_refused(
        self, key_store: OpenStore, tamper: Tamper
    ) -> None:
        """A handle opened before the store was re-keyed: its append is refused in the
        write's own transaction (naming the new key), and nothing is written."""
        meta = record_tamper(tamper)
        store = key_store(integrity_key=KEY)
        events = scripted_run("r1", 1)
        store.append("r1", events[:1], 0)
        meta.set_meta("integrity", f"hmac-sha256:{_id(OTHER_KEY)}")
        for batch, version in ((events[1:], 1), (scripted_run("r2", 0), 0)):
            with pytest.raises(IntegrityKeyError) as info:
                store.append(batch[0].run_id, batch, version)
            assert _refusal(info)[:2] == (
                f"hmac-sha256:{_id(OTHER_KEY)}",
                f"hmac-sha256:{_id(KEY)}",
            )
        meta.set_meta("integrity", f"hmac-sha256:{_id(KEY)}")
        assert [r.version for r in key_store(integrity_key=KEY).runs()] == [1]

    def test_a_store_being_rekeyed_refuses_every_call(
        self, key_store: OpenStore, tamper: Tamper
    ) -> None:
        """While a re-key is under way, a handle under either key opens but does nothing."""
        meta = record_tamper(tamper)
        key_store(integrity_key=KEY).append("r1", scripted_run("r1", 1), 0)
        meta.set_meta("integrity", f"rekeying hmac-sha256:{_id(KEY)} -> unkeyed")
        for key in (KEY, None):
            store = key_store(integrity_key=key)
            calls: tuple[Callable[[EventStore], object], ...] = (
                lambda s: s.load("r1"),
                lambda s: s.events("r1"),
                lambda s: s.run_info("r1"),
                lambda s: s.runs(),
                lambda s: s.verify("r1"),
                lambda s: s.append("r1", tool_turn("r1", 7, "x"), 6),
            )
            for call in calls:
                with pytest.raises(IntegrityKeyError) as info:
                    call(store)
                assert _refusal(info)[2] == (
                    f"the store is being re-keyed from key id '{_id(KEY)}' to no key: no "
                    "handle may use it until `agentfsm rekey` finishes (run it again with the "
                    "same keys to resume it)"
                )

    # -- re-keying ----------------------------------------------------------------------------

    def test_rekey_moves_every_run_to_the_new_key(self, rekey_store: OpenStore) -> None:
        """No key, a key, another, none again: each run and snapshot verifies under the new
        key, loads as its replay, streams the same lines; the old key is refused."""
        runs = {f"r{i}": scripted_run(f"r{i}", i) for i in range(1, 4)}
        store = rekey_store(integrity_key=None, snapshot_every=4)
        for run_id, events in runs.items():
            store.append(run_id, events, 0)
        keys: list[bytes | None] = [None, KEY, OTHER_KEY, None]
        for old, new in itertools.pairwise(keys):
            report = rekey(rekey_store(integrity_key=old), new)
            assert (report.rewritten, report.done) == (3, 0)
            with pytest.raises(IntegrityKeyError):
                rekey_store(integrity_key=old)
            reader = rekey_store(integrity_key=new, snapshot_every=4)
            for run_id, events in runs.items():
                verified = reader.verify(run_id)
                assert (verified.ok, verified.head_hash) == (
                    True,
                    chain(events, Integrity(new))[-1],
                )
                assert reader.load(run_id).dumps() == replay(events).dumps()
                assert [dump_event(e) for e in reader.events(run_id)] == list(
                    map(dump_event, events)
                )
            turn = tool_turn("r1", len(runs["r1"]) + 1, f"after-{len(runs['r1'])}")
            reader.append("r1", turn, len(runs["r1"]))  # the new chain goes on from the rewrite
            runs["r1"] = [*runs["r1"], *turn]
            assert reader.verify("r1").head_hash == chain(runs["r1"], Integrity(new))[-1]

    def test_rekey_refuses_a_forged_row_and_changes_nothing(
        self, rekey_store: OpenStore, tamper: Tamper
    ) -> None:
        """A row whose link was recomputed without the key is not re-signed: the re-key is
        refused naming it, and the store stays under its key, as it was."""
        rekey_store(integrity_key=KEY).append("r1", scripted_run("r1", 1), 0)
        events = scripted_run("r2", 1)
        rekey_store(integrity_key=KEY, snapshot_every=None).append("r2", events, 0)
        tamper.set_event_hash("r2", 3, chain(events)[2])
        with pytest.raises(CorruptLogError) as info:
            rekey(rekey_store(integrity_key=KEY), OTHER_KEY)
        assert str(info.value) == (
            "run 'r2', sequence 3: the hash does not match: this event or its stored hash was "
            "changed (or the store was written under another integrity key, or none); nothing "
            "was re-keyed: the store is as it was"
        )
        store = rekey_store(integrity_key=KEY)
        assert (store.verify("r1").ok, store.verify("r2").sequence) == (True, 3)

    def test_rekey_to_the_same_key_is_refused(self, rekey_store: OpenStore) -> None:
        """Nothing to do is said, not done."""
        store = rekey_store(integrity_key=KEY)
        with pytest.raises(ValueError, match=r"^the store is under key id '\w+' already"):
            rekey(store, KEY)


MakeAsync = Callable[[StoreOptions], Awaitable[AsyncEventStore]]


async def _opened_and_loaded(make_store: MakeAsync, options: StoreOptions) -> None:
    """Open a handle and load `r1` (a store that refuses at first use is refused here)."""
    store = await make_store(options)
    try:
        await store.load("r1")
    finally:
        await store.close()


class AsyncKeyChecks:
    """The key record part of `AsyncStoreConformance` (its fixture: `make_store`)."""

    def test_a_handle_under_another_key_is_refused(self, make_store: MakeAsync) -> None:
        """An async handle without the store's key, or with another, is refused; the
        keyed one reads what it wrote."""

        async def scenario() -> None:
            async with await make_store(StoreOptions(integrity_key=KEY)) as store:
                await store.append("r1", scripted_run("r1", 1), 0)
            for key in (None, OTHER_KEY):
                with pytest.raises(IntegrityKeyError) as info:
                    await _opened_and_loaded(make_store, StoreOptions(integrity_key=key))
                assert info.value.store_key == f"hmac-sha256:{_id(KEY)}"
            async with await make_store(StoreOptions(integrity_key=KEY)) as store:
                assert (await store.verify("r1")).ok

        asyncio.run(scenario())

    def test_a_keyed_stream_checks_every_link(self, make_store: MakeAsync) -> None:
        """An async keyed stream reads back what was written, from any sequence."""
        events = scripted_run("r1", 2)

        async def scenario() -> None:
            options = StoreOptions(integrity_key=KEY, snapshot_every=None)
            async with await make_store(options) as store:
                await store.append("r1", events, 0)
            async with await make_store(options) as store:
                for after in (0, 4):
                    streamed = [dump_event(e) async for e in store.events("r1", after=after)]
                    assert streamed == [dump_event(e) for e in events[after:]]

        asyncio.run(scenario())
