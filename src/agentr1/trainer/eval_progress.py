"""What ``agentr1 eval`` shows while it runs, as ``agentr1 train`` shows its steps: episodes done of all, success so
far, elapsed and time left, on stderr, updated as episodes end.

:class:`EvalProgress` is the display: a live line on a terminal; elsewhere (a log file, a pipe) a plain line at each
tenth of the episodes. :class:`ScoredAsTheyEnd` feeds it: the reward stage (:class:`~agentr1.trainer.scoring.Scorer`)
runs on the sessions that ended while the others still run, a batch at a time, so "success so far" is the outcome the
evaluation reports, not a guess; it gives the same sessions and rewards as scoring them all at the end.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from agentr1.store import SessionRecord
from agentr1.trainer.rewards import SessionRewards
from agentr1.trainer.scoring import Scorer, answerable

__all__ = ["EvalProgress", "ScoredAsTheyEnd"]


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


class EvalProgress:
    """Progress of an evaluation of ``total`` episodes (every pass of every task), titled ``title``."""

    def __init__(self, total: int, *, title: str, quiet: bool = False, console: Console | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.total, self.title, self.clock = total, title, clock
        self.console = console or Console(stderr=True, quiet=quiet)
        self.done = self.judged = self.successes = 0
        self.phase = ""
        self.started = clock()
        self._printed_tenths, self._printed = 0, ""
        self._live: Progress | None = None
        if self.console.is_terminal:
            self._live = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TextColumn("{task.fields[success]}"), TimeElapsedColumn(), TextColumn("left"),
                                  TimeRemainingColumn(), console=self.console, transient=False)
            self._task = self._live.add_task(title, total=total, success="")
            self._live.start()

    def begin(self, phase: str) -> None:
        """The pass now running (``greedy``, ``sampled``)."""
        self.phase = phase
        self._show()

    def episode_ended(self) -> None:
        self.done += 1
        self._show()

    def scored(self, successes: int, judged: int) -> None:
        """``judged`` more episodes scored (those the policy is answerable for), ``successes`` of them a success."""
        self.successes += successes
        self.judged += judged
        self._show()

    def success_text(self) -> str:
        share = f" ({self.successes / self.judged:.0%})" if self.judged else ""
        return f"success {self.successes}/{self.judged}{share}"

    def line(self) -> str:
        """The plain progress line: episodes, success so far, elapsed and estimated time left."""
        elapsed = self.clock() - self.started
        left = elapsed / self.done * (self.total - self.done) if self.done else None
        return (f"{self.title} {self.phase}: {self.done}/{self.total} episodes, {self.success_text()}, "
                f"{_clock(elapsed)} elapsed, {'?' if left is None else _clock(left)} left")

    def _show(self) -> None:
        if self._live is not None:
            description = f"{self.title} {self.phase}".strip()
            self._live.update(self._task, completed=self.done, description=description, success=self.success_text())
            return
        tenths = self.done * 10 // max(1, self.total)
        if tenths > self._printed_tenths:
            self._printed_tenths = tenths
            self._print_line()

    def _print_line(self) -> None:
        self._printed = self.line()
        self.console.print(self._printed, highlight=False, soft_wrap=True)

    def close(self) -> None:
        """End the display; a plain one ends with the final tally (scored after its last line, if it was)."""
        if self._live is not None:
            self._live.stop()
        elif self.done and self._printed != self.line():
            self._print_line()


class ScoredAsTheyEnd:
    """The reward stage over an evaluation pass's sessions as they end (:meth:`ended` is ``collect``'s ``on_done``),
    a batch at a time in a worker thread, each result counted into ``progress``. :meth:`finish` scores what is left
    and returns every session (in ``order``) and its rewards."""

    def __init__(self, scorer: Scorer, tasks: dict[str, dict[str, Any]], progress: EvalProgress) -> None:
        self.scorer, self.tasks, self.progress = scorer, tasks, progress
        self.sessions: list[SessionRecord] = []
        self.rewards: dict[str, SessionRewards] = {}
        self._pending: list[str] = []
        self._wake = asyncio.Event()
        self._ending = False
        self._worker = asyncio.create_task(self._score_batches())

    def ended(self, session_id: str | None) -> None:
        self.progress.episode_ended()
        if session_id is not None:  # None: never opened, nothing to score
            self._pending.append(session_id)
            self._wake.set()

    async def _score_batches(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                batch, self._pending = self._pending, []
                sessions, rewards = await asyncio.to_thread(self.scorer.score, batch, self.tasks)
                self.sessions += sessions
                self.rewards.update(rewards)
                judged = [s for s in sessions if answerable(s)]
                self.progress.scored(sum(s.status == "finished" and rewards[s.id].outcome > 0 for s in judged),
                                     len(judged))
            if self._ending:
                return

    async def finish(self, order: list[str]) -> tuple[list[SessionRecord], dict[str, SessionRewards]]:
        self._ending = True
        self._wake.set()
        await self._worker
        rank = {sid: i for i, sid in enumerate(order)}
        return sorted(self.sessions, key=lambda s: rank.get(s.id, len(rank))), self.rewards

    def cancel(self) -> None:
        """Stop scoring (the pass failed)."""
        self._worker.cancel()
