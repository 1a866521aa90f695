"""What a model call costs: the SDKs report tokens, a `Pricing` turns them into money."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from agentfsm.errors import UnknownModelError

__all__ = ["Pricing", "per_million_tokens", "price_table"]

#: The cost of one model call: `pricing(model, input_tokens, output_tokens)`; `model` is the
#: model's name when the SDK reports one, else None.
Pricing = Callable[[str | None, int, int], float]


def per_million_tokens(input: float, output: float) -> Pricing:
    """`Pricing` at `input` and `output` currency units per million tokens, for any model."""
    if input < 0 or output < 0:
        raise ValueError(f"prices must not be negative, got input={input!r}, output={output!r}")

    def price(model: str | None, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * input + output_tokens * output) / 1_000_000

    return price


def price_table(prices: Mapping[str, tuple[float, float]]) -> Pricing:
    """`Pricing` from a table: model name -> (input, output) per million tokens.

    A dated snapshot reads its model's price (`gpt-4.1-2025-04-14` -> `gpt-4.1`: the longest
    name the reported one starts with, followed by `-`). A model the table does not have,
    or a call that names no model, raises `UnknownModelError` naming it and the table.
    """
    for name, (cin, cout) in prices.items():
        if cin < 0 or cout < 0:
            raise ValueError(f"prices of {name!r} must not be negative, got {(cin, cout)!r}")
    table = dict(prices)
    names = tuple(sorted(table, key=len, reverse=True))

    def price(model: str | None, input_tokens: int, output_tokens: int) -> float:
        found = table.get(model) if model is not None else None
        if found is None and model is not None:
            found = next((table[n] for n in names if model.startswith(n + "-")), None)
        if found is None:
            raise UnknownModelError(model, tuple(sorted(table)))
        return (input_tokens * found[0] + output_tokens * found[1]) / 1_000_000

    return price
