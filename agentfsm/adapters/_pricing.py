"""What a model call costs: the SDKs report tokens, a `Pricing` turns them into money."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Pricing", "per_million_tokens"]

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
