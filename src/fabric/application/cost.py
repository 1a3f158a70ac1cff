"""What a run's model calls cost, from a configured price table."""

from __future__ import annotations

from collections.abc import Mapping

from fabric.domain.models import ChatResponse

Prices = Mapping[str, tuple[float | None, float | None]]
"""Model name -> (input, output) price in US dollars per million tokens; None: not known."""


class RunCost:
    """The run's cost so far: each reply's tokens at its model's prices. The model is the one
    the client asked for, unless only the name the server answered with has a price; a price
    not known counts as 0 and the model is listed in ``unknown``."""

    def __init__(self, prices: Prices) -> None:
        self.prices = prices
        self.total = 0.0
        self.unknown: set[str] = set()

    @property
    def usd(self) -> float:
        return round(self.total, 6)

    def add(self, response: ChatResponse, client_model: str) -> None:
        # The name fabric asked for comes first: servers often answer with another spelling
        # (a dated version, or llama.cpp's file path).
        served = response.model
        name = (
            served
            if served and served in self.prices and client_model not in self.prices
            else client_model
        )
        given, output = self.prices.get(name) or (None, None)
        for price, tokens in (
            (given, response.usage.prompt_tokens),
            (output, response.usage.completion_tokens),
        ):
            if price is None:
                if tokens:
                    self.unknown.add(name)
            else:
                self.total += price * tokens / 1_000_000

    def prompt_cost(self, tokens: int, client_model: str) -> float:
        """What ``tokens`` prompt tokens cost at the model's input price (0 when unknown)."""
        given = (self.prices.get(client_model) or (None, None))[0]
        return 0.0 if given is None else given * tokens / 1_000_000
