"""The trace store: the one API through which every part of agentr1 reads and writes traces."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, and_, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session

from agentr1.store import errors, records
from agentr1.store import migrate as migrations
from agentr1.store.blobs import ImageStore, externalize_images
from agentr1.store.database import create_store_engine
from agentr1.store.history import HistoryCache, restore_histories
from agentr1.store.schema import REWARD_SOURCES, SESSION_STATUSES, RewardRow, RunRow, SessionRow, StepRow
from agentr1.store.session_writes import (
    SESSIONS_FOUND,
    check_ends,
    discard_session,
    end_sessions,
    insert_sessions,
    new_id,
    session_rows,
)
from agentr1.store.step_writes import attach_feedback, insert_steps
from agentr1.store.writes import Writes


class TraceStore:
    """Runs, sessions, steps and rewards in SQLite or PostgreSQL.

    Open with :meth:`open`; every method is safe to call from many threads, and several
    processes (or gateways) may write to the same database at once.
    """

    def __init__(self, engine: Engine, images: ImageStore | None = None) -> None:
        self.engine = engine
        self._writes = Writes(engine)  # every write transaction (store/writes.py)
        # image bytes by content hash, beside the database; steps keep references (see blobs.py)
        self.images = images or ImageStore.for_database(str(engine.url))
        self._histories = HistoryCache()  # the messages of steps written lately: later steps store only their tail
        self._known_runs: set[str] = set()  # runs this store saw exist (runs are never deleted)

    # -- lifecycle ---------------------------------------------------------------------------

    @classmethod
    def open(cls, url: str | os.PathLike[str], *, migrate: bool = True,
             image_dir: str | os.PathLike[str] | None = None) -> TraceStore:
        """Connect to ``url`` and check the schema; with ``migrate`` bring it to the newest version.
        ``image_dir``: where image bytes go (default: beside a SQLite file, see :mod:`agentr1.store.blobs`)."""
        engine = create_store_engine(url)
        try:
            current = migrations.current_revision(engine)
            head = migrations.head_revision()
            if current != head:
                if not migrate:
                    raise errors.StoreNotMigrated(
                        f"database {engine.url.render_as_string(hide_password=True)} is at schema "
                        f"{current or 'empty'}, this agentr1 needs {head}; "
                        f"run `agentr1 traces migrate --db URL`"
                    )
                migrations.upgrade(engine)
        except OperationalError as exc:
            engine.dispose()
            shown = engine.url.render_as_string(hide_password=True)  # never echo a password into logs
            raise errors.StoreConnectionError(f"cannot connect to {shown!r}: {exc.orig}") from exc
        except BaseException:
            engine.dispose()
            raise
        return cls(engine, ImageStore.for_database(str(engine.url), image_dir))

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> TraceStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextmanager
    def _read(self) -> Iterator[Session]:
        with Session(self.engine, expire_on_commit=False) as db:
            yield db

    # -- runs --------------------------------------------------------------------------------

    def create_run(self, name: str = "", config: dict[str, Any] | None = None, *, run_id: str | None = None) -> str:
        run_id = run_id or new_id()
        with self._writes.orm() as db:
            db.add(RunRow(id=run_id, name=name, config=config or {}))
        return run_id

    def ensure_run(self, run_id: str, name: str = "") -> str:
        """Create the run if it does not exist yet (idempotent, safe under concurrency)."""
        with self._read() as db:
            if db.get(RunRow, run_id) is not None:
                return run_id
        try:
            return self.create_run(name or run_id, run_id=run_id)
        except IntegrityError:
            return run_id

    def get_run(self, run_id: str) -> records.RunRecord:
        runs = self._runs(RunRow.id == run_id)
        if not runs:
            raise errors.UnknownRun(run_id)
        return runs[0]

    def list_runs(self, limit: int = 100) -> list[records.RunRecord]:
        return self._runs(None, limit=limit)

    def _runs(self, where: Any, limit: int = 1) -> list[records.RunRecord]:
        n_steps = (
            select(func.count(StepRow.id))
            .join(SessionRow, SessionRow.id == StepRow.session_id)
            .where(SessionRow.run_id == RunRow.id)
            .scalar_subquery()
        )
        n_sessions = select(func.count(SessionRow.id)).where(SessionRow.run_id == RunRow.id).scalar_subquery()
        # Mean over the run's rewarded sessions of each session's summed outcome rewards. (A derived
        # table here would not correlate with the outer `runs` row and would average every run.)
        mean_reward = (
            select(func.sum(RewardRow.value) / func.count(func.distinct(RewardRow.session_id)))
            .join(SessionRow, SessionRow.id == RewardRow.session_id)
            .where(SessionRow.run_id == RunRow.id, RewardRow.step_index.is_(None))
            .scalar_subquery()
        )
        query = select(RunRow, n_sessions, n_steps, mean_reward).order_by(RunRow.created_at.desc()).limit(limit)
        if where is not None:
            query = query.where(where)
        with self._read() as db:
            return [
                records.RunRecord(id=r.id, name=r.name, config=r.config, created_at=r.created_at,
                                  n_sessions=ns or 0, n_steps=nt or 0, mean_reward=mr)
                for r, ns, nt, mr in db.execute(query)
            ]

    # -- sessions ----------------------------------------------------------------------------

    def create_session(
        self,
        *,
        run_id: str | None = None,
        task_id: str | None = None,
        group_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        policy_version: int = 0,
        session_id: str | None = None,
        key_hash: str | None = None,
    ) -> str:
        return self.create_sessions([records.NewSession(run_id, task_id, group_id, metadata, policy_version,
                                                        session_id, key_hash)])[0]

    def create_sessions(self, sessions: Sequence[records.NewSession]) -> list[str]:
        """Create ``sessions`` in one transaction, all or none (``SessionExists`` if an id is taken or given twice);
        their ids, in order."""
        ids = self._create_sessions(sessions, wait=True)
        assert ids is not None
        return ids

    def try_create_sessions(self, sessions: Sequence[records.NewSession]) -> list[str] | None:
        """:meth:`create_sessions` if it need not wait (see :mod:`agentr1.store.writes`; also not for a run this store
        has not seen yet); None, with nothing written, if it would."""
        if any(s.run_id is not None and s.run_id not in self._known_runs for s in sessions):
            return None
        return self._create_sessions(sessions, wait=False)

    def _create_sessions(self, sessions: Sequence[records.NewSession], *, wait: bool) -> list[str] | None:
        rows = session_rows(sessions)
        ids = [row["id"] for row in rows]
        if not rows:
            return ids
        for run in {s.run_id for s in sessions} - {None} - self._known_runs:
            self.ensure_run(run)  # type: ignore[arg-type]
        try:
            done, _ = self._writes.transaction(lambda conn: insert_sessions(conn, rows), wait=wait)
        except IntegrityError as exc:
            if (taken := self._existing_session(ids)) is not None:
                raise errors.SessionExists(f"session {taken!r} already exists") from exc
            raise
        if not done:
            return None
        self._known_runs.update(s.run_id for s in sessions if s.run_id is not None)
        return ids

    def _existing_session(self, session_ids: list[str]) -> str | None:
        """The first of ``session_ids`` that is stored, if any."""
        with self.engine.connect() as conn:
            found = set(conn.execute(SESSIONS_FOUND, {"ids": session_ids}).scalars())
        return next((sid for sid in session_ids if sid in found), None)

    def session_for_key(self, key_hash: str) -> str | None:
        with self._read() as db:
            return db.scalar(select(SessionRow.id).where(SessionRow.key_hash == key_hash))

    def get_session(self, session_id: str, *, steps: bool = True) -> records.SessionRecord:
        return self.get_sessions([session_id], steps=steps)[0]

    def get_sessions(self, session_ids: Sequence[str], *, steps: bool = True) -> list[records.SessionRecord]:
        """Many sessions in one read, in the order asked; :class:`UnknownSession` for the first one not stored."""
        if not session_ids:
            return []
        with self._read() as db:
            rows = {r.id: r for r in db.scalars(select(SessionRow).where(SessionRow.id.in_(set(session_ids))))}
            missing = next((sid for sid in session_ids if sid not in rows), None)
            if missing is not None:
                raise errors.UnknownSession(missing)
            by_id = {s.id: s for s in self._load_sessions(db, list(rows.values()), steps=steps)}
        return [by_id[sid] for sid in session_ids]

    def list_sessions(
        self,
        run_id: str | None = None,
        *,
        status: str | Sequence[str] | None = None,
        group_id: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[records.SessionRecord]:
        query = select(SessionRow).order_by(SessionRow.created_at, SessionRow.id).limit(limit).offset(offset)
        if run_id is not None:
            query = query.where(SessionRow.run_id == run_id)
        if status is not None:
            query = query.where(SessionRow.status.in_([status] if isinstance(status, str) else status))
        if group_id is not None:
            query = query.where(SessionRow.group_id == group_id)
        with self._read() as db:
            return self._load_sessions(db, list(db.scalars(query)), steps=False)

    def finish_session(
        self, session_id: str, *, status: str = "finished", reward: float | None = None, error: str | None = None
    ) -> None:
        """End a running session; ``reward`` is recorded as its outcome reward. ``UnknownSession``, or
        ``SessionNotRunning`` if it already ended."""
        (failure,) = self.finish_sessions([records.SessionEnd(session_id, status, reward, error)])
        if failure is not None:
            raise failure

    def finish_sessions(self, ends: Sequence[records.SessionEnd]) -> list[errors.StoreError | None]:
        """End running sessions in one transaction; for each, None if it ended here, else why not
        (``UnknownSession``, or ``SessionNotRunning``: it had ended already): those are left as they were and the
        others end all the same."""
        failures = self._finish_sessions(ends, wait=True)
        assert failures is not None
        return failures

    def try_finish_sessions(self, ends: Sequence[records.SessionEnd]) -> list[errors.StoreError | None] | None:
        """:meth:`finish_sessions` if it need not wait (see :mod:`agentr1.store.writes`); None, with nothing written,
        if it would."""
        return self._finish_sessions(ends, wait=False)

    def _finish_sessions(self, ends: Sequence[records.SessionEnd], *,
                         wait: bool) -> list[errors.StoreError | None] | None:
        check_ends(ends)
        if not ends:
            return []
        done, failures = self._writes.transaction(lambda conn: end_sessions(conn, ends), wait=wait)
        return failures if done else None

    def discard_session(self, session_id: str) -> bool:
        """Delete a running session that holds no step and no reward (a gateway's session that its only calls
        left empty: they were refused); whether it did."""
        done, discarded = self._writes.transaction(lambda conn: discard_session(conn, session_id), wait=True)
        return bool(done and discarded)

    def try_discard_session(self, session_id: str) -> bool | None:
        """:meth:`discard_session` if it need not wait (see :mod:`agentr1.store.writes`); None, with nothing written,
        if it would."""
        done, discarded = self._writes.transaction(lambda conn: discard_session(conn, session_id), wait=False)
        return bool(discarded) if done else None

    def abandon_stale(self, older_than: dt.datetime, *, run_id: str | None = None) -> int:
        """Mark running sessions with no activity since ``older_than`` (created before it, no step stored
        at or after it) as abandoned; only those of ``run_id`` if given. Returns how many.

        An agent that died (or whose gateway was killed) leaves its session running forever; marking it
        says the trajectory is incomplete, so nothing that selects finished sessions trains on it."""
        recent_step = select(StepRow.id).where(StepRow.session_id == SessionRow.id, StepRow.created_at >= older_than)
        query = update(SessionRow).where(SessionRow.status == "running", SessionRow.created_at < older_than,
                                         ~recent_step.exists())
        if run_id is not None:
            query = query.where(SessionRow.run_id == run_id)
        with self._writes.orm() as db:
            result = db.execute(query.values(status="abandoned", finished_at=dt.datetime.now(dt.UTC)))
            return int(result.rowcount or 0)  # type: ignore[attr-defined]

    # -- steps -------------------------------------------------------------------------------

    def append_steps(self, steps: Sequence[records.StepRecord],
                     feedback: Sequence[records.FeedbackRecord] = ()) -> None:
        """Insert steps, then attach feedback, in one transaction: all of it or none."""
        self._append(steps, feedback, wait=True)

    def try_append_steps(self, steps: Sequence[records.StepRecord],
                         feedback: Sequence[records.FeedbackRecord] = ()) -> bool:
        """:meth:`append_steps` if it need not wait: on SQLite, when no other connection holds the write lock at
        this moment (``busy_timeout`` 0 for this one transaction); False, with nothing written, if one does, and
        always on PostgreSQL (a network round trip). For a caller on an event loop: commit in place when that
        costs only CPU, hand the batch to a thread when it would wait."""
        if self.dialect != "sqlite":  # (before the rows are built: the waiting write builds them again)
            return False
        return self._append(steps, feedback, wait=False)

    def _append(self, steps: Sequence[records.StepRecord], feedback: Sequence[records.FeedbackRecord], *,
                wait: bool) -> bool:
        if not steps and not feedback:
            return True
        session_ids = {s.session_id for s in steps}
        rows = [self._step_row(s) for s in steps]
        feedback = [records.FeedbackRecord(fb.session_id, fb.index, externalize_images(fb.messages, self.images),
                                           fb.ids) for fb in feedback]

        def write(conn: Connection) -> None:
            insert_steps(conn, rows)
            attach_feedback(conn, feedback)

        try:
            done, _ = self._writes.transaction(write, wait=wait)
            if not done:
                return False
            self._histories.committed(steps)
            return True
        except IntegrityError as exc:
            # The foreign key refused an unknown session, or (session, index) is taken: tell which, after the
            # rollback (checking the sessions first would cost every commit a query).
            with self.engine.connect() as conn:
                found = set(conn.scalars(SESSIONS_FOUND, {"ids": list(session_ids)}))
            for sid in sorted(session_ids - found):
                raise errors.UnknownSession(sid) from exc
            raise errors.StepConflict(f"a step with the same (session, index) is already stored: {exc.orig}") from exc

    def _step_row(self, step: records.StepRecord) -> dict[str, Any]:
        """The ``steps`` row of ``step``: the messages it shares with an earlier step left out (store/history.py),
        inline images stored apart (store/blobs.py)."""
        shared, sent, seen = self._histories.split(step)
        values = step.row_values()
        values["messages_sent"] = externalize_images(sent, self.images)
        values["messages_seen"] = values["messages_sent"] if seen == sent else externalize_images(seen, self.images)
        if step.feedback_messages:
            values["feedback_messages"] = externalize_images(step.feedback_messages, self.images)
        values["shared_history"] = shared
        return values

    def last_step(self, session_id: str) -> records.StepRecord | None:
        with self._read() as db:
            row = db.scalar(select(StepRow).where(StepRow.session_id == session_id).order_by(StepRow.index.desc()).limit(1))
            if row is None or row.shared_history is None:
                return None if row is None else records.StepRecord.from_row(row)
            rows = list(db.scalars(select(StepRow).where(StepRow.session_id == session_id, StepRow.index <= row.index)
                                   .order_by(StepRow.index)))  # its history: the steps it shares messages with
            history = [records.StepRecord.from_row(r) for r in rows]
            restore_histories(history, [r.shared_history for r in rows])
            return history[-1]

    def attach_feedback(self, session_id: str, index: int, messages: list[Any], ids: Sequence[int] | None) -> None:
        """Record e_t of step ``index``: the new messages (and their token ids) that followed it."""
        messages = externalize_images(messages, self.images)
        record = records.FeedbackRecord(session_id, index, messages, list(ids) if ids is not None else None)
        self._writes.transaction(lambda conn: attach_feedback(conn, [record]), wait=True)

    # -- rewards -----------------------------------------------------------------------------

    def add_reward(
        self, session_id: str, value: float, *, name: str = "reward", step: int | None = None, source: str = "agent"
    ) -> None:
        self.add_rewards([records.RewardRecord(session_id=session_id, value=value, name=name, step_index=step,
                                               source=source)])

    def add_rewards(self, rewards: Sequence[records.RewardRecord]) -> None:
        """Store ``rewards`` in one transaction: all of them, or none if one names an unknown session or
        step. Checked and inserted by id with Core statements, not ORM objects: the gateway adds a reward
        (and its anchor) per environment step, and loading each session row was most of that cost."""
        for r in rewards:
            if r.source not in REWARD_SOURCES:
                raise ValueError(f"reward source must be one of {REWARD_SOURCES}, got {r.source!r}")
        if not rewards:
            return
        with self._writes.orm() as db:
            for session_id in dict.fromkeys(r.session_id for r in rewards):
                if db.scalar(select(SessionRow.id).where(SessionRow.id == session_id)) is None:
                    raise errors.UnknownSession(session_id)
            for session_id, index in dict.fromkeys((r.session_id, r.step_index) for r in rewards
                                                   if r.step_index is not None):
                if db.scalar(select(StepRow.id).where(StepRow.session_id == session_id,
                                                      StepRow.index == index)) is None:
                    raise errors.UnknownStep(session_id, index)
            db.execute(insert(RewardRow), [{"session_id": r.session_id, "value": float(r.value), "name": r.name,
                                            "step_index": r.step_index, "source": r.source} for r in rewards])

    # -- trainer reads -----------------------------------------------------------------------

    def iter_sessions(
        self,
        run_id: str | None,
        *,
        statuses: Iterable[str] = ("finished",),
        min_policy_version: int | None = None,
        max_policy_version: int | None = None,
        steps: bool = True,
        chunk_size: int = 64,
    ) -> Iterator[records.SessionRecord]:
        """Stream sessions ordered by task group, ``chunk_size`` sessions in memory at a time."""
        statuses = list(statuses)
        for s in statuses:
            if s not in SESSION_STATUSES:
                raise ValueError(f"unknown status {s!r}; valid: {SESSION_STATUSES}")
        group_key = func.coalesce(SessionRow.group_id, SessionRow.id)
        base = select(SessionRow, group_key.label("gk")).where(SessionRow.status.in_(statuses))
        if run_id is not None:
            base = base.where(SessionRow.run_id == run_id)
        if min_policy_version is not None:
            base = base.where(SessionRow.policy_version >= min_policy_version)
        if max_policy_version is not None:
            base = base.where(SessionRow.policy_version <= max_policy_version)
        after: tuple[str, str] | None = None
        while True:
            query = base.order_by(group_key, SessionRow.id).limit(chunk_size)
            if after is not None:  # keyset pagination: stable under concurrent inserts, no OFFSET scans
                query = query.where(or_(group_key > after[0], and_(group_key == after[0], SessionRow.id > after[1])))
            with self._read() as db:
                rows = db.execute(query).all()
                if not rows:
                    return
                chunk = self._load_sessions(db, [r[0] for r in rows], steps=steps)
            after = (rows[-1][1], rows[-1][0].id)
            yield from chunk

    def iter_groups(self, run_id: str | None, **filters: Any) -> Iterator[list[records.SessionRecord]]:
        """Stream the sessions of a run as task groups (sessions without a group are their own)."""
        group: list[records.SessionRecord] = []
        key: str | None = None
        for record in self.iter_sessions(run_id, **filters):
            record_key = record.group_id or record.id
            if group and record_key != key:
                yield group
                group = []
            key = record_key
            group.append(record)
        if group:
            yield group

    # -- loading -----------------------------------------------------------------------------

    def _load_sessions(self, db: Session, rows: list[SessionRow], *, steps: bool) -> list[records.SessionRecord]:
        ids = [r.id for r in rows]
        if not ids:
            return []
        rewards: dict[str, list[records.RewardRecord]] = {i: [] for i in ids}
        for rw in db.scalars(select(RewardRow).where(RewardRow.session_id.in_(ids)).order_by(RewardRow.id)):
            rewards[rw.session_id].append(
                records.RewardRecord(session_id=rw.session_id, value=rw.value, name=rw.name,
                                     step_index=rw.step_index, source=rw.source, created_at=rw.created_at)
            )
        step_rows: dict[str, list[StepRow]] = {i: [] for i in ids}
        counts: dict[str, int] = {}
        if steps:
            for st in db.scalars(select(StepRow).where(StepRow.session_id.in_(ids)).order_by(StepRow.session_id, StepRow.index)):
                step_rows[st.session_id].append(st)
        else:
            counts = dict(db.execute(
                select(StepRow.session_id, func.count(StepRow.id)).where(StepRow.session_id.in_(ids)).group_by(StepRow.session_id)
            ).all())
        out = []
        for r in rows:
            loaded = [records.StepRecord.from_row(s) for s in step_rows[r.id]]
            restore_histories(loaded, [s.shared_history for s in step_rows[r.id]])
            superseded = records.superseded_steps(loaded)
            for record in loaded:
                record.superseded_by = superseded.get(record.index)
            session = records.SessionRecord(
                id=r.id, run_id=r.run_id, task_id=r.task_id, group_id=r.group_id, status=r.status,
                policy_version=r.policy_version, metadata=r.meta, error=r.error, created_at=r.created_at,
                finished_at=r.finished_at, steps=loaded,
                n_steps=len(step_rows[r.id]) if steps else counts.get(r.id, 0),
            )
            session.apply_rewards(rewards[r.id])
            out.append(session)
        return out
