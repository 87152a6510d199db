"""Session lifecycle, rewards, and the trainer's reads: iter_sessions, iter_groups, list_runs."""

from __future__ import annotations

import datetime as dt
import math
import time

import pytest
from store_workers import make_step

from agentr1.store import (
    NewSession,
    RewardRecord,
    SessionEnd,
    SessionExists,
    SessionNotRunning,
    TraceStore,
    UnknownRun,
    UnknownSession,
    UnknownStep,
)

# -- rewards ------------------------------------------------------------------------------------


def test_session_and_step_rewards(store: TraceStore) -> None:
    sid = store.create_session()
    store.append_steps([make_step(sid, i) for i in range(3)])
    store.add_reward(sid, 1.0)
    store.add_reward(sid, 0.5, name="format", source="environment")
    store.add_reward(sid, 0.25, step=0, name="process", source="judge")
    store.add_reward(sid, 0.5, step=0, name="tool_ok", source="environment")
    store.add_reward(sid, -1.0, step=2, source="gateway")
    rec = store.get_session(sid)
    assert rec.reward == 1.5
    assert [s.reward for s in rec.steps] == [0.75, None, -1.0]
    assert [(r.name, r.value, r.step_index, r.source) for r in rec.rewards] == [
        ("reward", 1.0, None, "agent"), ("format", 0.5, None, "environment"), ("process", 0.25, 0, "judge"),
        ("tool_ok", 0.5, 0, "environment"), ("reward", -1.0, 2, "gateway"),
    ]
    # a session without any reward has reward None, not 0
    assert store.get_session(store.create_session()).reward is None


def test_reward_errors_are_atomic(store: TraceStore) -> None:
    sid = store.create_session()
    store.append_steps([make_step(sid, 0)])
    with pytest.raises(UnknownStep, match="has no step 4"):
        store.add_reward(sid, 1.0, step=4)
    with pytest.raises(UnknownSession, match="no-such"):
        store.add_reward("no-such", 1.0)
    with pytest.raises(ValueError, match="reward source"):
        store.add_reward(sid, 1.0, source="oracle")
    with pytest.raises(UnknownStep):  # one bad reward rejects the whole batch
        store.add_rewards([RewardRecord(sid, 1.0), RewardRecord(sid, 2.0, step_index=0),
                           RewardRecord(sid, 3.0, step_index=1)])
    rec = store.get_session(sid)
    assert rec.rewards == [] and rec.reward is None
    store.add_rewards([RewardRecord(sid, 1.0), RewardRecord(sid, 2.0, step_index=0)])
    rec = store.get_session(sid)
    assert (rec.reward, rec.steps[0].reward) == (1.0, 2.0)


def test_rewards_of_many_sessions_are_stored_in_one_batch(store: TraceStore) -> None:
    """The trainer's reward stage writes a rollout's rewards in one call: all sessions' or none."""
    sids = [store.create_session() for _ in range(3)]
    for sid in sids:
        store.append_steps([make_step(sid, 0), make_step(sid, 1)])
    with pytest.raises(UnknownStep):  # the last session has no step 5: nothing of the others is stored either
        store.add_rewards([RewardRecord(sids[0], 1.0), RewardRecord(sids[1], 0.5, step_index=1),
                           RewardRecord(sids[2], 2.0, step_index=5)])
    assert all(s.rewards == [] for s in store.get_sessions(sids))
    batch = [RewardRecord(sid, float(k), name="fn", source="environment") for k, sid in enumerate(sids)]
    batch += [RewardRecord(sids[1], 0.5, name="fn", step_index=1, source="environment")]
    store.add_rewards(batch)
    assert [(s.reward, [st.reward for st in s.steps]) for s in store.get_sessions(sids)] == [
        (0.0, [None, None]), (1.0, [None, 0.5]), (2.0, [None, None])]


def test_a_record_given_the_rewards_it_stored_equals_the_record_read_back(store: TraceStore) -> None:
    sid = store.create_session()
    store.append_steps([make_step(sid, i) for i in range(3)])
    store.add_reward(sid, 0.25, step=2, source="agent")
    before = store.get_session(sid)
    added = [RewardRecord(sid, 1.0, name="fn", source="environment"),
             RewardRecord(sid, 0.5, name="fn", step_index=0, source="environment"),
             RewardRecord(sid, -0.25, name="judge", step_index=2, source="judge")]
    store.add_rewards(added)
    before.apply_rewards(added)
    after = store.get_session(sid)
    for record in (before, after):
        for reward in record.rewards:
            reward.created_at = None  # set by the database when stored
    assert before == after
    assert (after.reward, [s.reward for s in after.steps]) == (1.0, [0.5, None, 0.0])


def test_get_sessions_reads_many_in_the_order_asked(store: TraceStore) -> None:
    sids = [store.create_session(task_id=f"t{i}") for i in range(3)]
    store.append_steps([make_step(sids[1], 0)])
    store.add_reward(sids[2], 1.0)
    records = store.get_sessions([sids[2], sids[0], sids[1]])
    assert [(r.id, r.task_id, len(r.steps), r.reward) for r in records] == [
        (sids[2], "t2", 0, 1.0), (sids[0], "t0", 0, None), (sids[1], "t1", 1, None)]
    assert store.get_sessions([]) == []
    with pytest.raises(UnknownSession, match="no-such"):
        store.get_sessions([sids[0], "no-such"])


# -- many sessions at once (the trainer opens and ends a rollout's sessions in batches) ----------


def test_create_sessions_stores_all_or_none(store: TraceStore) -> None:
    ids = store.create_sessions([NewSession(run_id="bulk", task_id=f"t{i}", group_id="g", metadata={"sample": i},
                                            policy_version=3, key_hash=f"h{i}") for i in range(3)]
                                + [NewSession(run_id="bulk-2", session_id="named")])
    assert len(set(ids)) == 4 and ids[3] == "named"
    records = {s.id: s for s in store.list_sessions("bulk")}
    assert [(records[sid].task_id, records[sid].metadata, records[sid].policy_version) for sid in ids[:3]] == [
        (f"t{i}", {"sample": i}, 3) for i in range(3)]
    assert store.session_for_key("h1") == ids[1]
    assert [s.id for s in store.list_sessions("bulk-2")] == ["named"]  # a run created on first use
    with pytest.raises(SessionExists, match="'named' already exists"):  # one taken id: nothing of the list
        store.create_sessions([NewSession(run_id="bulk", session_id="fresh"), NewSession(session_id="named")])
    with pytest.raises(SessionExists, match="'twice' is given twice"):
        store.create_sessions([NewSession(session_id="twice"), NewSession(session_id="twice")])
    assert len(store.list_sessions("bulk")) == 3 and store.create_sessions([]) == []


def test_finish_sessions_ends_each_it_can_and_says_why_not_for_the_others(store: TraceStore) -> None:
    a, b, done = (store.create_session(run_id="ends") for _ in range(3))
    store.finish_session(done)
    failures = store.finish_sessions([SessionEnd(a, reward=1.0), SessionEnd(done, reward=5.0),
                                      SessionEnd("no-such"), SessionEnd(b, "failed", error="agent: boom")])
    assert failures[0] is None and failures[3] is None
    assert isinstance(failures[1], SessionNotRunning) and "already finished" in str(failures[1])
    assert isinstance(failures[2], UnknownSession)
    records = {s.id: s for s in store.list_sessions("ends")}
    assert (records[a].status, records[a].reward) == ("finished", 1.0)
    assert (records[b].status, records[b].error, records[b].reward) == ("failed", "agent: boom", None)
    assert records[done].reward is None  # the refused end added no reward
    with pytest.raises(ValueError, match="status must be one of"):  # checked before anything is written
        store.finish_sessions([SessionEnd(store.create_session(), "paused")])
    assert store.finish_sessions([]) == []


# -- finish and abandon -------------------------------------------------------------------------


def test_finish_session(store: TraceStore) -> None:
    sid = store.create_session()
    assert store.get_session(sid).status == "running" and store.get_session(sid).finished_at is None
    store.finish_session(sid, reward=0.75)
    rec = store.get_session(sid)
    assert rec.status == "finished" and rec.finished_at is not None and rec.reward == 0.75
    assert [(r.name, r.source) for r in rec.rewards] == [("outcome", "agent")]
    with pytest.raises(SessionNotRunning, match="already finished"):
        store.finish_session(sid)
    with pytest.raises(SessionNotRunning, match="already finished"):
        store.finish_session(sid, status="failed", reward=1.0)
    assert store.get_session(sid).reward == 0.75  # the rejected finish added no reward

    failed = store.create_session()
    store.finish_session(failed, status="failed", error="timeout")
    rec = store.get_session(failed)
    assert (rec.status, rec.error, rec.reward) == ("failed", "timeout", None)
    with pytest.raises(ValueError, match="status must be one of"):
        store.finish_session(store.create_session(), status="running")
    with pytest.raises(UnknownSession):
        store.finish_session("no-such")


def test_abandon_stale(store: TraceStore) -> None:
    old_running = store.create_session()
    old_finished = store.create_session()
    store.finish_session(old_finished)
    time.sleep(0.02)
    cutoff = dt.datetime.now(dt.UTC)
    time.sleep(0.02)
    new_running = store.create_session()
    # the cutoff may be given in any time zone
    assert store.abandon_stale(cutoff.astimezone(dt.timezone(dt.timedelta(hours=-5)))) == 1
    assert store.get_session(old_running).status == "abandoned"
    assert store.get_session(old_running).finished_at is not None
    assert store.get_session(old_finished).status == "finished"
    assert store.get_session(new_running).status == "running"
    assert store.abandon_stale(cutoff) == 0
    with pytest.raises(SessionNotRunning, match="already abandoned"):
        store.finish_session(old_running)


def test_session_ids_and_keys(store: TraceStore) -> None:
    sid = store.create_session(session_id="fixed", key_hash="k" * 64)
    assert store.session_for_key("k" * 64) == sid
    assert store.session_for_key("x" * 64) is None
    with pytest.raises(SessionExists, match="fixed"):
        store.create_session(session_id="fixed")
    assert len({store.create_session() for _ in range(20)}) == 20


def test_list_sessions(store: TraceStore) -> None:
    ids = []
    for i in range(6):
        ids.append(store.create_session(run_id="r1", task_id=f"t{i}", group_id=f"g{i % 2}"))
        time.sleep(0.002)  # distinct created_at: listing is in creation order
    other = store.create_session(run_id="r2")
    store.append_steps([make_step(ids[0], 0), make_step(ids[0], 1)])
    store.finish_session(ids[0], reward=1.0)
    store.finish_session(ids[1], status="failed")

    listed = store.list_sessions("r1")
    assert [s.id for s in listed] == ids
    assert listed[0].n_steps == 2 and listed[0].steps == [] and listed[0].reward == 1.0
    assert [s.id for s in store.list_sessions("r1", status="finished")] == [ids[0]]
    assert [s.id for s in store.list_sessions("r1", status=["finished", "failed"])] == ids[:2]
    assert [s.id for s in store.list_sessions("r1", group_id="g1")] == ids[1::2]
    assert [s.id for s in store.list_sessions("r1", limit=2, offset=3)] == ids[3:5]
    assert {s.id for s in store.list_sessions()} == {*ids, other}


# -- trainer reads ------------------------------------------------------------------------------


def _populate(store: TraceStore) -> dict[str, list[str]]:
    """Run r1: 4 groups x 3 samples (policy version = group number), 2 ungrouped sessions, one
    running and one failed session; run r2: one finished session."""
    groups: dict[str, list[str]] = {}
    for g in range(4):
        for k in range(3):
            sid = store.create_session(run_id="r1", task_id=f"task{g}", group_id=f"grp{g}", policy_version=g)
            store.append_steps([make_step(sid, i) for i in range(2)])
            store.finish_session(sid, reward=float(k))
            groups.setdefault(f"grp{g}", []).append(sid)
    for _ in range(2):
        sid = store.create_session(run_id="r1", policy_version=1)
        store.append_steps([make_step(sid, 0)])
        store.finish_session(sid, reward=0.5)
        groups[sid] = [sid]
    store.create_session(run_id="r1", group_id="grp0")  # still running
    failed = store.create_session(run_id="r1", group_id="grp1")
    store.finish_session(failed, status="failed")
    groups["failed"] = [failed]
    r2 = store.create_session(run_id="r2", group_id="grp0")
    store.finish_session(r2, reward=9.0)
    return groups


def test_iter_sessions_filters(store: TraceStore) -> None:
    groups = _populate(store)
    finished = [s for g, ids in groups.items() if g != "failed" for s in ids]
    got = list(store.iter_sessions("r1"))  # default: finished only
    assert sorted(s.id for s in got) == sorted(finished)
    assert all(s.status == "finished" and len(s.steps) == s.n_steps > 0 for s in got)
    assert all(s.steps[0].index == 0 for s in got)

    assert {s.id for s in store.iter_sessions("r1", statuses=["failed"])} == set(groups["failed"])
    assert len(list(store.iter_sessions("r1", statuses=["finished", "failed", "running"]))) == len(finished) + 2
    assert len(list(store.iter_sessions(None))) == len(finished) + 1  # every run

    v12 = list(store.iter_sessions("r1", min_policy_version=1, max_policy_version=2))
    assert {s.policy_version for s in v12} == {1, 2}
    assert len(v12) == 3 + 3 + 2  # grp1, grp2 and the two ungrouped sessions at version 1
    assert {s.group_id for s in store.iter_sessions("r1", min_policy_version=3)} == {"grp3"}

    light = list(store.iter_sessions("r1", steps=False))
    assert all(s.steps == [] and s.n_steps > 0 for s in light)
    with pytest.raises(ValueError, match="unknown status"):
        list(store.iter_sessions("r1", statuses=["done"]))


def test_iter_groups_with_small_chunks(store: TraceStore) -> None:
    groups = _populate(store)
    expected = {g: sorted(ids) for g, ids in groups.items() if g != "failed"}
    got = list(store.iter_groups("r1", chunk_size=2))  # groups of 3 straddle chunks of 2
    assert len(got) == len(expected)
    keyed = {(grp[0].group_id or grp[0].id): sorted(s.id for s in grp) for grp in got}
    assert keyed == expected
    for grp in got:
        if grp[0].group_id:
            assert sorted(s.reward for s in grp) == [0.0, 1.0, 2.0]
            assert len({s.task_id for s in grp}) == 1
    versions = list(store.iter_groups("r1", chunk_size=1, min_policy_version=2))
    assert sorted(grp[0].group_id for grp in versions) == ["grp2", "grp3"]


def test_iter_sessions_streams_in_bounded_chunks(store: TraceStore, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(23):
        sid = store.create_session(run_id="stream", group_id=f"g{i // 4}")
        store.append_steps([make_step(sid, 0)])
        store.finish_session(sid)
    loads: list[int] = []
    original = store._load_sessions

    def counting(db, rows, *, steps):  # type: ignore[no-untyped-def]
        loads.append(len(rows))
        return original(db, rows, steps=steps)

    monkeypatch.setattr(store, "_load_sessions", counting)

    it = store.iter_sessions("stream", chunk_size=5)
    first = next(it)
    assert loads == [5]  # lazy: one chunk read, not the whole run
    late = store.create_session(run_id="stream", group_id="zzz-late")  # arrives mid-iteration
    store.finish_session(late)
    rest = [first, *it]
    assert loads[:-1] == [5, 5, 5, 5] and loads[-1] <= 5
    assert max(loads) <= 5 and len(loads) == math.ceil(len(rest) / 5)
    ids = [s.id for s in rest]
    assert len(ids) == len(set(ids)) == 24  # keyset pagination: no duplicates, the late one too
    keys = [(s.group_id or s.id, s.id) for s in rest]
    assert keys == sorted(keys)


def test_list_runs(store: TraceStore) -> None:
    store.create_run("first", run_id="ra")
    time.sleep(0.005)
    store.create_run("second", run_id="rb")
    time.sleep(0.005)
    store.create_run("empty", run_id="rc")
    # ra: rewards 1.0 and (0.5 + 0.25); a per-step reward and an unrewarded session do not count
    a1 = store.create_session(run_id="ra")
    store.append_steps([make_step(a1, i) for i in range(3)])
    store.finish_session(a1, reward=1.0)
    store.add_reward(a1, 5.0, step=0)
    a2 = store.create_session(run_id="ra")
    store.append_steps([make_step(a2, 0)])
    store.add_reward(a2, 0.5)
    store.add_reward(a2, 0.25, name="format")
    store.create_session(run_id="ra")
    # rb: one session rewarded 0.0
    b1 = store.create_session(run_id="rb")
    store.finish_session(b1, reward=0.0)

    runs = store.list_runs()
    assert [r.id for r in runs] == ["rc", "rb", "ra"]  # newest first
    by_id = {r.id: r for r in runs}
    assert (by_id["ra"].n_sessions, by_id["ra"].n_steps) == (3, 4)
    assert by_id["ra"].mean_reward == pytest.approx(0.875)  # mean of 1.0 and 0.75, per run
    assert (by_id["rb"].n_sessions, by_id["rb"].n_steps, by_id["rb"].mean_reward) == (1, 0, 0.0)
    assert (by_id["rc"].n_sessions, by_id["rc"].n_steps, by_id["rc"].mean_reward) == (0, 0, None)
    assert by_id["ra"].name == "first"
    assert [r.id for r in store.list_runs(limit=2)] == ["rc", "rb"]
    assert store.get_run("ra") == by_id["ra"]
    with pytest.raises(UnknownRun, match="nope"):
        store.get_run("nope")
