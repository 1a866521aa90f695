"""The hot path's slot-filling copies behave exactly like the attrs classes they copy."""

from __future__ import annotations

import attrs
import pytest

from agentfsm import RunRecord
from agentfsm.reducers import Action, UsageTotals
from agentfsm.reducers._evolve import evolver, evolves, maker, makes


def test_a_copy_equals_one_built_by_init() -> None:
    """Same class, same fields, equal, and still frozen."""
    record = RunRecord("r", status="running", version=3, facts={"a": 1})
    copy = evolver(RunRecord, "status", "version")(record, status="paused", version=4)
    assert type(copy) is RunRecord
    assert copy == attrs.evolve(record, status="paused", version=4)
    assert repr(copy) == repr(attrs.evolve(record, status="paused", version=4))
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        copy.status = "running"  # type: ignore[misc]


def test_the_original_is_untouched() -> None:
    """Copying never writes to the source instance."""
    action = Action("a", "t", {}, "requested")
    evolver(Action, "status")(action, status="started")
    assert action.status == "requested"


def test_unknown_or_repeated_fields_are_refused() -> None:
    """A typo in a field name fails at import time, not on the hot path."""
    with pytest.raises(ValueError, match="has no fields"):
        evolver(RunRecord, "stauts")
    with pytest.raises(ValueError, match="repeated"):
        evolver(RunRecord, "status", "status")


def test_a_made_instance_is_hashable_like_one_built_by_init() -> None:
    """The frozen class's own hash applies to records the reducer builds."""
    made = maker(UsageTotals)(input_tokens=1, output_tokens=2, cost=0.5)
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


class TestKeywordsOnly:
    """Fields are passed by name, so two values can never be swapped silently."""

    def test_positional_values_are_refused(self) -> None:
        """An evolver takes the record by position and nothing else."""
        set_status = evolver(Action, "status", "reason")
        with pytest.raises(TypeError) as info:
            set_status(Action("a", "t", {}, "started"), "unknown", "lost")
        assert str(info.value) == "evolve() takes 1 positional argument but 3 were given"

    def test_a_misspelt_field_is_refused(self) -> None:
        """A wrong name fails at the call, not as a silently wrong record."""
        with pytest.raises(TypeError) as info:
            maker(UsageTotals)(input_tokens=1, output_tokens=2, costs=0.5)
        assert str(info.value) == "make() got an unexpected keyword argument 'costs'"

    def test_a_stub_declares_the_fields_it_sets(self) -> None:
        """`evolves` reads the keyword-only fields of a typed stub and keeps its name."""

        @evolves(Action)
        def failed(a: Action, /, *, status: str, reason: str | None) -> Action:
            raise AssertionError("never run")

        action = failed(Action("a", "t", {}, "started"), reason="lost", status="unknown")
        assert (action.status, action.reason, failed.__name__) == ("unknown", "lost", "failed")

    def test_a_stub_must_type_each_field_as_the_class_does(self) -> None:
        """A stub that declares another type than the field's is refused at import."""
        with pytest.raises(TypeError) as info:

            @evolves(Action)
            def wrong(a: Action, /, *, attempts: str) -> Action:
                raise AssertionError("never run")

        assert str(info.value) == "wrong: field 'attempts' is 'int', declared 'str'"

    def test_a_stub_must_take_fields_by_keyword(self) -> None:
        """A stub with positional fields is refused: its callers could swap them."""
        with pytest.raises(TypeError) as info:

            @evolves(Action)
            def positional(a: Action, status: str) -> Action:
                raise AssertionError("never run")

        assert str(info.value) == (
            "positional must be declared as (record, /, *, field: type, ...)"
        )

    def test_a_maker_stub_must_name_every_field(self) -> None:
        """A maker fills every slot, so its stub lists every field."""
        with pytest.raises(ValueError, match="a maker takes every field") as info:

            @makes(UsageTotals)
            def partial(*, input_tokens: int) -> UsageTotals:
                raise AssertionError("never run")

        assert str(info.value) == (
            "partial: a maker takes every field; missing ['output_tokens', 'cost']"
        )
