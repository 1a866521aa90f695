"""Event vocabularies: the built-in event types plus a lifecycle's own.

A table declares the event types its edges use. The built-in ones (`run.started`,
`tool.completed`, ...) are `BUILTIN_EVENTS`; a lifecycle adds its own as pydantic models
(subclasses of `CustomEvent`, with a `Literal` type and typed fields) or, for an event that
carries nothing but its envelope, by name::

    class TicketEscalated(CustomEvent):
        type: Literal["ticket.escalated"] = "ticket.escalated"
        escalated_to: str

        def fold(self, custom):
            return {**custom, "escalated_to": self.escalated_to}

    events = BUILTIN_EVENTS.extend(TicketEscalated, "ticket.reopened")

A vocabulary parses, validates and dumps its events exactly like the built-in ones (strict,
closed, frozen, with the same value limits), and exports one JSON Schema for all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Any, Literal, Union

import attrs
from pydantic import Field, TypeAdapter, create_model

from agentfsm.events.models import EVENT_CLASSES, CustomEvent, Envelope

__all__ = ["BUILTIN_EVENTS", "EventTypes"]


def _type_name(cls: type[Envelope]) -> str:
    field = cls.model_fields.get("type")
    default = field.default if field is not None else None
    if not isinstance(default, str) or not default:
        raise TypeError(
            f'event model {cls.__name__} must declare its type as `type: Literal["name"] = "name"`'
        )
    return default


def _payload_free(name: str) -> type[CustomEvent]:
    """A model for an event type that carries only the envelope."""
    tag: Any = Literal[name]  # a Literal built at run time: mypy cannot see its value
    model: type[CustomEvent] = create_model(
        "".join(p.capitalize() for p in name.replace("-", ".").replace("_", ".").split(".")),
        __base__=CustomEvent,
        type=(tag, name),
    )
    model.__doc__ = f"`{name}`: an event of this lifecycle with no fields of its own."
    return model


def _classes(items: Iterable[type[Envelope] | str]) -> dict[str, type[Envelope]]:
    found: dict[str, type[Envelope]] = {}
    for item in items:
        if isinstance(item, str):
            cls: type[Envelope] = _payload_free(item)
        elif isinstance(item, type) and issubclass(item, Envelope):
            cls = item
        else:
            raise TypeError(f"an event type is a CustomEvent subclass or a name, got {item!r}")
        name = _type_name(cls)
        if name in found and found[name] is not cls:
            raise ValueError(f"event type '{name}' is declared twice")
        found[name] = cls
    return found


@attrs.frozen(eq=False)
class EventTypes:
    """A set of event types: their models by name, and a parser for all of them.

    Attributes:
        classes: event type name -> its model class.
    """

    classes: Mapping[str, type[Envelope]] = attrs.field(converter=_classes)
    adapter: TypeAdapter[Any] = attrs.field(init=False, repr=False)

    @adapter.default
    def _adapter(self) -> TypeAdapter[Any]:
        members = tuple(self.classes[name] for name in sorted(self.classes))
        if len(members) == 1:
            return TypeAdapter(members[0])
        union = Annotated[Union[members], Field(discriminator="type")]  # type: ignore[valid-type]  # noqa: UP007
        return TypeAdapter(union)

    #: The adapter's compiled validator, called directly: `TypeAdapter.validate_python`
    #: adds 0.2 µs of Python per event (a tenth of validating one) for options never used.
    validate: Callable[..., Any] = attrs.field(init=False, repr=False)

    @validate.default
    def _validate(self) -> Callable[..., Any]:
        return self.adapter.validator.validate_python

    @property
    def names(self) -> tuple[str, ...]:
        """Every type name, sorted."""
        return tuple(sorted(self.classes))

    @property
    def custom(self) -> tuple[str, ...]:
        """The names of the types that are not built in, sorted."""
        return tuple(n for n in self.names if n not in EVENT_CLASSES)

    def __contains__(self, name: object) -> bool:
        return name in self.classes

    def extend(self, *items: type[CustomEvent] | str) -> EventTypes:
        """This vocabulary plus `items` (models, or names of payload-free event types).

        Raises:
            ValueError: an item redeclares a type this vocabulary has with another model
                (a built-in type cannot be replaced).
            TypeError: an item is neither a `CustomEvent` subclass nor a name.
        """
        # A name already declared is the same payload-free type: declaring it again is a no-op.
        added = _classes(i for i in items if not (isinstance(i, str) and i in self.classes))
        clash = sorted(
            n for n, cls in added.items() if n in self.classes and self.classes[n] is not cls
        )
        if clash:
            raise ValueError(
                f"event type(s) {', '.join(repr(n) for n in clash)} are already declared "
                "with another model"
            )
        return EventTypes({**self.classes, **added}.values())

    def __repr__(self) -> str:
        extra = f" + {', '.join(self.custom)}" if self.custom else ""
        return f"<EventTypes: {len(EVENT_CLASSES)} built in{extra}>"


#: The event types of the wire format, as DESIGN.md defines them.
BUILTIN_EVENTS = EventTypes(EVENT_CLASSES.values())
