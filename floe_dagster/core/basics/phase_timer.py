"""Where a piece of work's time goes: seconds per named phase, lap by lap (the engine splits a
maintenance run's time into the procedure's ``CALL`` and the rest with it). Pure: the clock is the
caller's (``time.monotonic`` in the engine, a fake in tests)."""

from __future__ import annotations

from typing import Callable


class PhaseTimer:
    """``lap(phase)`` adds the time since the previous lap (or the start) to ``phase``; a phase
    lapped twice adds up. ``seconds``: each phase's total, in the order first lapped."""

    def __init__(self, clock: Callable[[], float]):
        self._clock = clock
        self._start = self._last = clock()
        self.seconds: dict[str, float] = {}

    def lap(self, phase: str) -> float:
        now = self._clock()
        spent = now - self._last
        self.seconds[phase] = self.seconds.get(phase, 0.0) + spent
        self._last = now
        return spent

    @property
    def total(self) -> float:
        """Since the start, up to the last lap."""
        return self._last - self._start

    def rounded(self, digits: int = 3) -> dict[str, float]:
        return {phase: round(seconds, digits) for phase, seconds in self.seconds.items()}


__all__ = ["PhaseTimer"]
