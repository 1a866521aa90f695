"""The hot path's slot-filling copies behave exactly like the attrs classes they copy."""

from __future__ import annotations

import attrs
import pytest

from agentfsm import RunRecord
from agentfsm.reducers import Action
from agentfsm.reducers._evolve import evolver


def test_a_copy_equals_one_built_by_init() -> None:
    """Same class, same fields, equal, and still frozen."""
    record = RunRecord("r", status="running", version=3, facts={"a": 1})
    copy = evolver(RunRecord, "status", "version")(record, "paused", 4)
    assert type(copy) is RunRecord
    assert copy == attrs.evolve(record, status="paused", version=4)
    assert repr(copy) == repr(attrs.evolve(record, status="paused", version=4))
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        copy.status = "running"  # type: ignore[misc]


def test_the_original_is_untouched() -> None:
    """Copying never writes to the source instance."""
    action = Action("a", "t", {}, "requested")
    evolver(Action, "status")(action, "started")
    assert action.status == "requested"


def test_unknown_or_repeated_fields_are_refused() -> None:
    """A typo in a field name fails at import time, not on the hot path."""
    with pytest.raises(ValueError, match="has no fields"):
        evolver(RunRecord, "stauts")
    with pytest.raises(ValueError, match="repeated"):
        evolver(RunRecord, "status", "status")


def test_a_made_instance_is_hashable_like_one_built_by_init() -> None:
    """The frozen class's own hash applies to records the reducer builds."""
    from agentfsm.reducers import UsageTotals
    from agentfsm.reducers._evolve import maker

    made = maker(UsageTotals)(1, 2, 0.5)
    assert type(made) is UsageTotals
    assert hash(made) == hash(UsageTotals(1, 2, 0.5))
    assert made == UsageTotals(1, 2, 0.5)


def test_classes_without_a_mutable_storage_base_are_refused() -> None:
    """The class switch needs a base that owns every slot; anything else is refused."""

    @attrs.frozen
    class Plain:
        n: int = 0

    with pytest.raises(TypeError, match="must add no fields to a mutable attrs base"):
        evolver(Plain, "n")


def test_classes_that_validate_on_init_are_refused() -> None:
    """Filling slots would skip a validator, so such classes must use attrs.evolve."""

    @attrs.frozen
    class Checked:
        n: int = attrs.field(validator=attrs.validators.gt(0))

    with pytest.raises(TypeError, match="validates or converts on init"):
        evolver(Checked, "n")
