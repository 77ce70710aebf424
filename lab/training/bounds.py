"""Every count a user gives is bounded before any arithmetic that could overflow, hang or allocate.

    unit_bytes(count) >= 8  for every count option   (each epoch, step, sample, token, vocabulary entry,
                                                      embedding width, pair, prompt or run costs at least
                                                      one 8-byte number somewhere)
    count > memory / 8  =>  refused, naming its option, before it enters a product or a power

So the estimates that follow (`lab.training.limits`) multiply numbers of at most about 10**10 each and never
overflow a float. `capped_power` stands in for `base ** exponent` wherever the exponent is user input: it
multiplies only until the cap is passed, so `--prompt-length 99999999999` costs a few dozen steps, not
5**99999999999.
"""

from __future__ import annotations

from lab.training.config import ConfigError

UNIT_BYTES = 8
"""The least memory one unit of any count option takes (one float64 or int64)."""


def capped_power(base: int, exponent: int, cap: int) -> int:
    """min(base ** exponent, cap + 1), in at most about log2(cap) multiplications."""
    if base <= 1 or exponent <= 0:
        return base ** max(exponent, 0) if base >= 0 else 0
    value = 1
    for _ in range(exponent):
        value *= base
        if value > cap:
            return cap + 1
    return value


def check_counts(counts: dict[str, int], available: int, what: str) -> None:
    """Refuse (ConfigError naming the option) a count whose units alone could not fit in `available` bytes."""
    most = max(1, available // UNIT_BYTES)
    for option, value in counts.items():
        if value is not None and value > most:
            raise ConfigError(f"{what} needs about {_gb(value * UNIT_BYTES)} or more for {option} {shown(value)} alone "
                              f"({UNIT_BYTES} bytes a unit at least), more than the {_gb(available)} available; "
                              f"{option} can be at most {most} here")


def shown(count: int) -> str:
    """A count as a message shows it: whole up to 20 digits, else its first digits and its length."""
    text = str(count)
    return text if len(text) <= 20 else f"{text[:8]}... ({len(text)} digits)"


def _gb(n: int) -> str:
    """Bytes as GB, for any integer (no float conversion of a huge one)."""
    if n < 10**20:
        return f"{n / 1e9:,.3g} GB"
    return f"1e{len(str(n)) - 10} GB"
