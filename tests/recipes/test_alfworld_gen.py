"""Generated ALFWorld games: deterministic by seed, inside the shipped domain, train and held-out games
disjoint by fingerprint, both experts winning every game, the environment and rows, and the
demonstrations replayed through a real gateway."""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from pathlib import Path

import pytest
from examples.alfworld.data import DATA_DIR, load_index
from examples.alfworld.env import AlfworldEnv
from examples.alfworld.game import INVALID, AlfredGame
from examples.alfworld.generated.data import ENV, MAX_STEPS, make_tasks
from examples.alfworld.generated.domain import ABILITIES, load_domain
from examples.alfworld.generated.env import GeneratedAlfworldEnv
from examples.alfworld.generated.expert import EXPERTS, ExpertError, expert_commands
from examples.alfworld.generated.generator import (
    TASK_TYPES,
    fingerprint,
    generate_game,
    split_of,
)
from examples.alfworld.pddl import Problem, parse_problem
from split_checks import assert_splits_disjoint, config_splits

VAL_SEED = 1_000_003  # the seed agentr1's task loader gives the "val" split (data.seed 0)
TEST_SEED = 2_000_006  # and the "test" split


def _games(n: int, size: str = "small", start: int = 0):
    return [generate_game(start + s, TASK_TYPES[s % len(TASK_TYPES)], size) for s in range(n)]


def test_the_domain_is_read_from_the_shipped_games():
    domain = load_domain()
    assert sorted(domain.rooms) == ["bathroom", "bedroom", "kitchen", "livingroom"]
    assert domain.has("appletype", "heatable") and domain.has("desklamptype", "toggleable")
    assert not domain.has("desklamptype", "pickupable") and domain.openable >= {"fridgetype", "microwavetype"}
    assert ("fridgetype", "appletype") in domain.can_contain and domain.rooms["kitchen"].receptacles["cabinettype"] == 6


def test_games_are_deterministic_by_seed_and_differ_across_seeds():
    a, b = generate_game(11, "pick_heat_then_place_in_recep"), generate_game(11, "pick_heat_then_place_in_recep")
    assert a.problem_text == b.problem_text and a.task == b.task and a.fingerprint == b.fingerprint
    prints = [g.fingerprint for g in _games(120)]
    assert len(set(prints)) == 120  # 120 seeds, 120 different games
    with pytest.raises(ValueError, match="unknown task type"):
        generate_game(1, "juggle")
    with pytest.raises(ValueError, match="unknown size"):
        generate_game(1, size="huge")
    with pytest.raises(TypeError, match="seed must be an int"):
        generate_game("1")  # type: ignore[arg-type]


@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_each_task_type_makes_games_of_the_shipped_domain_whose_goal_is_open_at_start(task_type):
    domain = load_domain()
    rooms = set()
    for seed in range(25):
        generated = generate_game(seed, task_type)
        game, problem = generated.game(), generated.problem
        rooms.add(generated.room)
        assert not game.won(), generated.task
        assert generated.goal.otype.removesuffix("type") in generated.task
        room = domain.rooms[generated.room]
        otype = {f[1]: f[2] for f in problem.init if f[0] == "objecttype"}
        rtype = {f[1]: f[2] for f in problem.init if f[0] == "receptacletype"}
        for fact in problem.init:  # every fact is one the shipped games state about these types
            if fact[0] == "inreceptacle":
                assert (otype[fact[1]], rtype[fact[2]]) in room.placements
            elif fact[0] == "cancontain":
                assert (fact[1], fact[2]) in domain.can_contain
            elif fact[0] == "openable":
                assert rtype[fact[1]] in domain.openable
        for o, kind in otype.items():
            assert {a for a in ABILITIES if (a, o) in problem.init} == set(domain.abilities.get(kind, ()))
        assert Counter(rtype.values()) <= Counter(room.receptacles)  # no more of a type than the room has
    if task_type in ("pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep"):
        assert rooms == {"kitchen"}
    if task_type == "look_at_obj_in_light":
        assert rooms == {"bedroom"}
    if task_type in ("pick_and_place_simple", "pick_two_obj_and_place"):
        assert len(rooms) >= 3


def _renamed(problem: Problem, seed: int) -> Problem:
    """The same game with other identifiers for its objects and its facts in another order."""
    objects = sorted(n for n, t in problem.objects.items() if t == "object")
    new = {n: f"thing{random.Random(seed).randint(0, 10**6)}_{i}" for i, n in enumerate(objects)}
    facts = [tuple(new.get(a, a) for a in f) for f in problem.init]
    random.Random(seed).shuffle(facts)
    return Problem(objects={new.get(n, n): t for n, t in problem.objects.items()}, init=set(facts), goal=problem.goal)


def test_the_fingerprint_is_the_game_not_its_identifiers():
    generated = generate_game(3, "pick_and_place_simple")
    problem = generated.problem
    assert fingerprint(_renamed(problem, 1)) == generated.fingerprint
    # moving one object to another receptacle, or another goal, is another game
    (o, r) = next((f[1], f[2]) for f in problem.init if f[0] == "inreceptacle")
    other_r = next(f[1] for f in problem.init if f[0] == "receptacletype" and f[1] != r)
    moved = {f for f in problem.init if f != ("inreceptacle", o, r)} | {("inreceptacle", o, other_r)}
    assert fingerprint(Problem(problem.objects, moved, problem.goal)) != generated.fingerprint
    goal = parse_problem(generate_game(3, "pick_two_obj_and_place").problem_text).goal
    assert fingerprint(Problem(problem.objects, problem.init, goal)) != generated.fingerprint


def _recomputed_fingerprint(row: dict) -> list[str]:
    """The game's fingerprint recomputed from its seed: the rows' recorded ids and fingerprints are not trusted."""
    return [generate_game(row["env_kwargs"]["game_seed"], row["task_type"], row["env_kwargs"]["size"]).fingerprint]


def test_train_val_and_test_games_share_no_game():
    splits = {"train": make_tasks("train", 1200, 0),
              "val": make_tasks("val", 200, VAL_SEED) + make_tasks("val", 100, 5),
              "test": make_tasks("test", 200, TEST_SEED) + make_tasks("test", 100, 5)}
    assert_splits_disjoint(splits, _recomputed_fingerprint)
    prints = {split: [_recomputed_fingerprint(r)[0] for r in rows] for split, rows in splits.items()}
    assert len(set(prints["train"])) == 1200 and len(set(prints["test"][:200])) == 200  # no repeats within a split
    assert all(split_of(p) == split for split, found in prints.items() for p in found)
    assert [r["env_kwargs"]["fingerprint"] for r in splits["train"]] == prints["train"]
    # another training seed gives other training games, still none held out
    more = [_recomputed_fingerprint(r)[0] for r in make_tasks("train", 300, 1)]
    assert not set(more) & set(prints["val"] + prints["test"]) and len(set(more) - set(prints["train"])) > 250
    # nor is any of the 36 shipped games
    shipped = {fingerprint(AlfredGame.load(DATA_DIR / g["gamefile"]).problem) for g in load_index()}
    assert len(shipped) == 36 and not shipped & {p for found in prints.values() for p in found}


def test_the_configs_load_train_val_and_test_games_that_share_no_game():
    for config in ("examples/alfworld/generated/train.yaml", "examples/alfworld/generated/train_gpu.yaml"):
        splits = config_splits(config, ["data.train_size=600"])
        assert_splits_disjoint(splits, _recomputed_fingerprint)


@pytest.mark.parametrize("kind", EXPERTS)
def test_the_expert_wins_every_one_of_200_generated_games(kind):
    lengths = []
    for generated in _games(200, start=5000):
        commands = expert_commands(generated, kind)
        game = generated.game()
        outcomes = [game.step(c) for c in commands]  # replayed on a fresh game, independently of the expert
        assert all(o.valid for o in outcomes), (generated.seed, commands)
        assert [o.won for o in outcomes] == [False] * (len(commands) - 1) + [True], (generated.seed, commands)
        lengths.append(len(commands))
    assert max(lengths) < MAX_STEPS  # the rows' step budget fits every expert episode
    assert 4 <= sum(lengths) / len(lengths) <= 12


def test_the_experts_win_larger_rooms_too():
    for generated in _games(36, size="medium", start=900) + _games(18, size="large", start=77):
        for kind in EXPERTS:
            commands = expert_commands(generated, kind)
            game = generated.game()
            assert [game.step(c).won for c in commands][-1], (generated.seed, kind)


def test_the_search_expert_looks_before_it_takes():
    for generated in _games(60):
        search, oracle = expert_commands(generated, "search"), expert_commands(generated, "oracle")
        game = generated.game()
        first = next(r for r in game.receptacles if game.type_of[r] != generated.goal.rtype)  # not where it goes
        assert search[0] == f"go to {game.names[first]}"  # nothing seen yet: the first receptacle the room lists
        assert len(search) >= len(oracle)
    with pytest.raises(ValueError, match="unknown expert"):
        expert_commands(generated, "psychic")
    with pytest.raises(ExpertError, match="already holds"):
        from examples.alfworld.generated.expert import _Player

        player = _Player(generated.game())
        for command in oracle:
            player.do(command)
        player.do("look")


def test_a_generated_game_is_a_game_file_the_shipped_engine_plays(tmp_path):
    generated = generate_game(21, "pick_cool_then_place_in_recep")
    generated.walkthrough = expert_commands(generated)
    path = generated.write(tmp_path / "g" / "game.tw-pddl")
    data = json.loads(path.read_text())
    assert "(define (domain alfred)" in data["pddl_domain"] and data["walkthrough"] == generated.walkthrough
    assert data["grammar"].count("Your task is to: ") == 1 and "GotoLocation.feedback" in data["grammar"]
    game = AlfredGame.load(path)
    assert game.task == generated.task and game.intro() == generated.game().intro()
    assert [game.step(c).won for c in generated.walkthrough][-1]

    async def play() -> bool:
        env = AlfworldEnv({"id": "file"}, gamefile=str(path))
        await env.reset()
        for command in generated.walkthrough:
            result = await env.step({"role": "assistant", "content": command})
        return result.done

    assert asyncio.run(play())


def test_the_environment_on_a_generated_row():
    row = make_tasks("val", 1, VAL_SEED)[0]
    kwargs = {k: v for k, v in row["env_kwargs"].items() if k not in ("max_steps", "sampling")}
    generated = generate_game(kwargs["game_seed"], kwargs["task_type"], kwargs["size"])

    async def play() -> None:
        env = GeneratedAlfworldEnv(row, **kwargs, keep_last_turns=2)
        first = await env.reset()
        assert first[1]["content"].endswith("help, inventory, look") and f"Your task is to: {generated.task}" in first[1]["content"]
        bad = await env.step({"role": "assistant", "content": "fly to the moon"})
        assert (bad.reward, bad.done, bad.info["feedback"]) == (-0.1, False, INVALID)
        commands = expert_commands(generated, "search")
        for command in commands:
            result = await env.step({"role": "assistant", "content": f"Action: {command}"})
        assert (result.reward, result.done, result.info["won"]) == (0.0, True, True)

    asyncio.run(play())
    with pytest.raises(ValueError, match="make the rows again"):
        GeneratedAlfworldEnv(row, **{**kwargs, "fingerprint": "0" * 64})
    with pytest.raises(ValueError, match="unknown task type"):
        GeneratedAlfworldEnv(row, **{**kwargs, "task_type": "dance"})


def test_rows_registry_and_bad_arguments():
    from agentr1.envs import resolve

    rows = make_tasks("val", 12, VAL_SEED)
    assert [r["task_type"] for r in rows[:6]] == list(TASK_TYPES) and [r["task_type"] for r in rows[6:]] == list(TASK_TYPES)
    assert all(r["agent_name"] == ENV and r["env_kwargs"]["max_steps"] == MAX_STEPS for r in rows)
    assert resolve(ENV) is GeneratedAlfworldEnv and resolve("alfworld_generated") is GeneratedAlfworldEnv
    assert make_tasks("val", 12, VAL_SEED) == rows  # the held-out set is fixed by its seed
    with pytest.raises(ValueError, match="split must be"):
        make_tasks("dev", 3, 0)
    with pytest.raises(ValueError, match="non-negative"):
        make_tasks("train", -1, 0)


def test_demonstrations_replay_through_a_real_gateway(tmp_path, tiny_model_path):
    from examples.alfworld.generated.sft_demos import demonstrations

    from agentr1.store import TraceStore
    from agentr1.trainer.sft import SFTData, select_demonstrations
    from agentr1.trainer.sft.data import build_sft_rows
    from agentr1.trainer.sft.replay import replay_demonstrations

    demos = demonstrations(4)
    held_out = {r["id"] for r in make_tasks("val", 64, VAL_SEED)}
    assert not {d.task_id for d in demos} & held_out
    db = str(tmp_path / "traces.db")
    report = replay_demonstrations(demos, model=tiny_model_path, db=db, run_id="alfgen-demos")
    assert (report.finished, report.failed) == (4, 0), report.errors
    with TraceStore.open(db) as store:
        sessions = [store.get_session(s.id) for s in store.list_sessions("alfgen-demos")]
        assert sorted(len(s.steps) for s in sessions) == sorted(len(d.actions) for d in demos)
        data = SFTData(db=db, run_ids=["alfgen-demos"], min_reward=1.0)
        selection = select_demonstrations(store, data)
        assert len(selection.sessions) == 4  # every demonstration won its game
        # the SFT rows train on exactly the expert's commands: every action token, nothing else
        rows = build_sft_rows(selection, data).rows
        assert sum(sum(r.response_mask) for r in rows) == sum(len(st.action_ids) for s in sessions for st in s.steps)
        assert {s.steps[0].action["content"] for s in sessions} <= {d.actions[0]["content"] for d in demos}


def test_the_demonstrations_of_the_h200_runs_share_no_game_with_their_held_out_games():
    """The 2026-12-03 ALFWorld run (docs/results.md, row 5): SFT on the first 120 demonstrations, evaluation on 128 held-out games."""
    from examples.alfworld.generated.sft_demos import demonstrations

    demos = demonstrations(120)
    held_out = make_tasks("val", 128, VAL_SEED)
    # the games the demonstrations play, fingerprinted from the games themselves (not the rows' ids)
    demo_prints = {d.env.generated.fingerprint for d in demos}
    held_prints = {generate_game(r["env_kwargs"]["game_seed"], r["task_type"], r["env_kwargs"]["size"]).fingerprint
                   for r in held_out}
    assert len(demo_prints) == 120 and len(held_prints) == 128
    assert not demo_prints & held_prints and not {d.task_id for d in demos} & {r["id"] for r in held_out}


def test_the_outcome_alone_through_data_generator_kwargs():
    """``data.generator_kwargs={invalid_penalty: 0}`` on the command line reaches the environment: an
    inadmissible reply then earns 0 instead of -0.1, and the game is the same game."""
    from examples.alfworld.generated.data import __file__ as data_file

    from agentr1.envs import resolve
    from agentr1.trainer.config import JobConfig
    from agentr1.trainer.tasks import load_tasks

    path = Path(data_file).parent / "train.yaml"  # the CPU config keeps the environment's default penalty
    default = load_tasks(JobConfig.from_yaml(path, ["data.val_size=2"]).data, "val")
    job = JobConfig.from_yaml(path, ["data.val_size=2", "data.generator_kwargs={invalid_penalty: 0}"])
    rows = load_tasks(job.data, "val")
    # the GPU config holds the outcome alone (the 2026-12-03 ALFWorld gain)
    gpu = load_tasks(JobConfig.from_yaml(path.with_name("train_gpu.yaml"), ["data.val_size=2"]).data, "val")
    assert [r["env_kwargs"]["invalid_penalty"] for r in gpu] == [0.0, 0.0]
    assert [r["id"] for r in rows] == [r["id"] for r in default]
    assert rows[0]["env_kwargs"]["invalid_penalty"] == 0.0 and "invalid_penalty" not in default[0]["env_kwargs"]

    async def invalid_reply(row) -> float:
        kwargs = {k: v for k, v in row["env_kwargs"].items() if k not in ("max_steps", "sampling")}
        env = resolve(row["agent_name"])(row, **kwargs)
        await env.reset()
        return (await env.step({"role": "assistant", "content": "fly to the moon"})).reward

    assert (asyncio.run(invalid_reply(rows[0])), asyncio.run(invalid_reply(default[0]))) == (0.0, -0.1)
    with pytest.raises(ValueError, match="a number >= 0"):
        make_tasks("val", 1, VAL_SEED, invalid_penalty=-1)
    bad = JobConfig.from_yaml(path, ["data.generator_kwargs={penalty: 0}"])
    with pytest.raises(ValueError, match=r"cannot be called as .*unexpected keyword argument 'penalty'"):
        load_tasks(bad.data, "val")


@pytest.mark.parametrize(("config", "held_out"), [("train.yaml", 16), ("train_gpu.yaml", 64)])
def test_the_configs_load_and_evaluate_on_held_out_games(config, held_out):
    from examples.alfworld.generated.data import __file__ as data_file

    from agentr1.trainer.config import JobConfig
    from agentr1.trainer.sft.config import SFTConfig
    from agentr1.trainer.tasks import load_tasks

    folder = Path(data_file).parent
    job = JobConfig.from_yaml(folder / config)
    val, train = load_tasks(job.data, "val"), load_tasks(job.data, "train")
    assert len(val) == held_out and all(r["split"] == "val" for r in val)
    assert not {r["id"] for r in val} & {r["id"] for r in train} and len({r["id"] for r in train}) == len(train)
    sft = SFTConfig.from_yaml(folder / "sft.yaml")
    assert sft.data.run_ids == ["alfgen-demos"] and sft.data.min_reward == 1.0
