"""The ALFWorld recipe: its game engine (PDDL mechanics, names, texts, goal check), the environment's
rewards and context, and the expert walkthroughs, which must win every one of the 36 games."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from examples.alfworld.data import DATA_DIR, ENV, load_index, make_tasks
from examples.alfworld.env import AlfworldEnv, parse_command, resolve_gamefile
from examples.alfworld.game import INVALID, AlfredGame, alfworld_names
from examples.alfworld.pddl import PddlError, parse_problem, parse_sexp
from examples.alfworld.sft_demos import demonstrations
from examples.alfworld.walkthrough import expert_actions, expert_episode
from split_checks import assert_splits_disjoint, config_splits, question_key

GAMES = load_index()
LAMP = DATA_DIR / GAMES[0]["gamefile"]  # look_at_obj_in_light-AlarmClock-None-DeskLamp-308
HEAT = next(DATA_DIR / g["gamefile"] for g in GAMES if "pick_heat_then_place_in_recep-Apple-None-Fridge" in g["gamefile"])


def test_there_are_six_games_of_each_of_the_six_task_types():
    assert len(GAMES) == 36
    assert sorted({g["task_type"] for g in GAMES}) == [
        "look_at_obj_in_light", "pick_and_place_simple", "pick_clean_then_place_in_recep",
        "pick_cool_then_place_in_recep", "pick_heat_then_place_in_recep", "pick_two_obj_and_place"]
    assert all(sum(g["task_type"] == g2["task_type"] for g2 in GAMES) == 6 for g in GAMES)


@pytest.mark.parametrize("entry", GAMES, ids=[g["gamefile"].split("/")[2] for g in GAMES])
def test_the_expert_walkthrough_wins_exactly_at_its_last_command(entry):
    game = AlfredGame.load(DATA_DIR / entry["gamefile"])
    assert game.task == entry["goal"]
    outcomes = [game.step(command) for command in expert_actions(entry["gamefile"])]
    assert all(o.valid for o in outcomes), [(c, o.feedback) for c, o in zip(entry["walkthrough"], outcomes, strict=True)]
    assert [o.won for o in outcomes] == [False] * (len(outcomes) - 1) + [True]


def test_names_are_numbered_like_alfworlds_demangler():
    ids = {"cabinet_bar_1_bar_2", "cabinet_bar__minus_1_bar_2", "cabinet_bar_0_bar_0", "sink_bar_1_bar_sinkbasin",
           "agent1", "appletype"}
    names = alfworld_names(ids)
    # sorted identifiers: cabinet_bar_0.. < cabinet_bar_1.. < cabinet_bar__minus..; the first gets the highest number
    assert [names[i] for i in ("cabinet_bar_0_bar_0", "cabinet_bar_1_bar_2", "cabinet_bar__minus_1_bar_2")] == [
        "cabinet 3", "cabinet 2", "cabinet 1"]
    assert names["sink_bar_1_bar_sinkbasin"] == "sinkbasin 1" and names["agent1"] == "agent1"


def test_texts_and_mechanics_of_a_heat_game():
    game = AlfredGame.load(HEAT)
    intro = game.intro()
    assert intro.startswith("-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly "
                            "around you, you see a cabinet 1, ")
    assert intro.endswith("\n\nYour task is to: heat some apple and put it in fridge.")
    assert "go to fridge 1" in game.admissible_commands() and "open fridge 1" not in game.admissible_commands()
    assert game.step("open fridge 1") == game.step("fly away") and game.step("fly away").feedback == INVALID
    assert game.step("go to fridge 1").feedback == "You arrive at fridge 1. The fridge 1 is closed."
    assert "take" not in " ".join(game.admissible_commands())  # closed: nothing inside can be reached
    opened = game.step("open fridge 1").feedback
    assert opened.startswith("You open the fridge 1. The fridge 1 is open. In it, you see ")
    assert "close fridge 1" in game.admissible_commands()
    assert game.step("inventory").feedback == "You are not carrying anything."
    assert game.step("go to garbagecan 1").feedback.startswith("You arrive at garbagecan 1. On the garbagecan 1, you see")
    assert game.step("take apple 2 from garbagecan 1").feedback == "You pick up the apple 2 from the garbagecan 1."
    assert game.step("inventory").feedback == "You are carrying: a apple 2."
    assert not any(c.startswith("take ") for c in game.admissible_commands())  # hands are full
    assert game.step("examine apple 2").feedback == "There's nothing special about apple 2."
    assert game.step("heat apple 2 with fridge 1").feedback == INVALID  # not at the fridge, and it is no heater
    game.step("go to microwave 1")
    assert game.step("heat apple 2 with microwave 1").feedback == "You heat the apple 2 using the microwave 1."
    assert game.step("examine apple 2").feedback == "This is a hot apple 2."
    game.step("go to fridge 1")
    outcome = game.step("move apple 2 to fridge 1")  # the fridge stayed open
    assert outcome.feedback == "You move the apple 2 to the fridge 1." and outcome.won
    assert "apple 2" in game.describe_receptacle(game.ids["fridge 1"])


def test_cooling_undoes_heating_and_the_goal_check_follows():
    game = AlfredGame.load(HEAT)
    for command in ["go to garbagecan 1", "take apple 2 from garbagecan 1", "go to microwave 1",
                    "heat apple 2 with microwave 1", "go to fridge 1", "open fridge 1", "cool apple 2 with fridge 1"]:
        assert game.step(command).valid, command
    assert game.step("examine apple 2").feedback == "This is a cold apple 2."
    assert not game.step("move apple 2 to fridge 1").won  # in the fridge, but no longer hot


def test_a_lamp_turns_on_and_the_goal_needs_the_object_in_hand():
    game = AlfredGame.load(LAMP)
    game.step("go to desk 1")
    outcome = game.step("use desklamp 1")
    assert outcome.feedback == "You turn on the desklamp 1." and not outcome.won  # not holding the alarm clock
    assert game.step("examine desklamp 1").feedback == "This desklamp 1 is on."
    assert game.step("look").feedback.startswith("You are facing the desk 1")


def test_pddl_errors_are_clear():
    with pytest.raises(PddlError, match="unbalanced"):
        parse_sexp("(a))")
    with pytest.raises(PddlError, match="balanced"):
        parse_sexp("(a (b)")
    with pytest.raises(PddlError, match="no :goal"):
        parse_problem("(define (problem p) (:objects a - object) (:init (f a)))")
    problem = parse_problem("(define (problem p) (:objects a b - object) (:init (f a) (= (d a b) 3))"
                            "(:goal (exists (?x - object) (and (f ?x) (not (= ?x b))))))")
    assert problem.init == {("f", "a")} and problem.objects == {"a": "object", "b": "object"}


@pytest.mark.parametrize(("reply", "command"), [
    ("go to desk 1", "go to desk 1"),
    ("> Go to desk 1.", "go to desk 1"),
    ("I should look around.\nAction: take mug 1 from desk 2", "take mug 1 from desk 2"),
    ("`open fridge 1`\nthen more", "open fridge 1"),
    ("", ""),
    (None, ""),
])
def test_parse_command(reply, command):
    assert parse_command(reply) == command


def test_env_rewards_context_and_bad_input():
    async def play() -> None:
        env = AlfworldEnv({"id": "t"}, gamefile=GAMES[0]["gamefile"], keep_last_turns=2)
        first = await env.reset()
        assert [m["role"] for m in first] == ["system", "user"] and "Admissible commands: go to bed 1," in first[1]["content"]
        bad = await env.step({"role": "assistant", "content": "dance"})
        assert (bad.reward, bad.done, bad.info["valid"], bad.info["feedback"]) == (-0.1, False, False, INVALID)
        for command in expert_actions(GAMES[0]["gamefile"])[:-1]:
            result = await env.step({"role": "assistant", "content": command})
            assert (result.reward, result.done) == (0.0, False)
        # the window: system, intro, then the last 2 exchanges; only the newest answer lists the commands
        roles = [m["role"] for m in result.observation]
        assert roles == ["system", "user", "assistant", "user", "assistant", "user"]
        assert "Admissible" not in result.observation[3]["content"] and "Admissible" in result.observation[5]["content"]
        assert result.observation[4] == {"role": "assistant", "content": "go to desk 1"}
        won = await env.step({"role": "assistant", "content": "Action: use desklamp 1"})
        assert (won.reward, won.done, won.info["won"]) == (0.0, True, True)  # success is the episode's outcome
        with pytest.raises(TypeError):
            await env.step("use desklamp 1")  # type: ignore[arg-type]

    asyncio.run(play())
    with pytest.raises(FileNotFoundError, match="not found"):
        AlfworldEnv({"id": "x"}, gamefile="nope/game.tw-pddl")
    with pytest.raises(ValueError, match="needs a `gamefile`"):
        AlfworldEnv({"id": "x"})
    with pytest.raises(RuntimeError, match="before reset"):
        asyncio.run(AlfworldEnv({"id": "x"}, gamefile=GAMES[0]["gamefile"]).step({"content": "look"}))


def test_the_anchor_is_the_game_state_not_the_path_to_it():
    """GiGPO's anchor: equal for two episodes in the same state reached by other commands, unchanged by an
    invalid command, different once the state changes."""
    async def anchors(commands: list[str]) -> list[str | None]:
        env = AlfworldEnv({"id": "t"}, gamefile=HEAT)
        seen = [env.anchor()]
        await env.reset()
        seen.append(env.anchor())
        for command in commands:
            await env.step({"role": "assistant", "content": command})
            seen.append(env.anchor())
        return seen

    direct = asyncio.run(anchors(["go to fridge 1", "open fridge 1"]))
    detour = asyncio.run(anchors(["go to garbagecan 1", "dance", "go to fridge 1", "open fridge 1"]))
    assert direct[0] is None and direct[1] == detour[1]  # none before the game; one start state
    assert detour[2] != detour[1] and detour[3] == detour[2]  # moved; an invalid command changes nothing
    assert direct[2] == detour[4] and direct[3] == detour[5]  # at the fridge, then with it open: by either path
    assert len(set(direct)) == 4


def test_rows_and_registry():
    from agentr1.envs import resolve

    held_out = make_tasks("val", 6, 0) + make_tasks("test", 6, 0)
    assert len({r["task_type"] for r in held_out[:6]}) == 6 and len({r["task_type"] for r in held_out[6:]}) == 6
    assert all(r["agent_name"] == ENV for r in held_out)
    assert resolve(ENV) is AlfworldEnv and resolve("alfworld") is AlfworldEnv
    train = make_tasks("train", 80, 3)
    assert len({r["id"] for r in train}) == 80 and len({r["env_kwargs"]["gamefile"] for r in train}) == 24
    assert {r["env_kwargs"]["gamefile"] for r in train + held_out} == {g["gamefile"] for g in GAMES}
    json.dumps(train)  # rows are plain data (JSONL / parquet)
    with pytest.raises(ValueError, match="only 6 test games"):
        make_tasks("test", 7, 0)


def _game(row: dict) -> list[str]:
    """The game a row plays: its task folder (task type, object, receptacle, room)."""
    return [Path(row["env_kwargs"]["gamefile"]).parts[2]]


def test_the_config_loads_train_val_and_test_games_that_share_nothing():
    splits = config_splits("examples/alfworld/train.yaml")
    assert [len(splits[s]) for s in ("train", "val", "test")] == [144, 6, 6]
    assert_splits_disjoint(splits, question_key, _game)
    demos = [d.env.task for d in demonstrations(36)]
    assert len(demos) == 24 and all(_game(d)[0] in {_game(r)[0] for r in splits["train"]} for d in demos)


def test_expert_episode_gives_the_prompts_the_model_would_see():
    episode = expert_episode(GAMES[-1]["gamefile"])  # pick_two_obj_and_place: 9 commands
    assert episode.won and len(episode.steps) == len(GAMES[-1]["walkthrough"])
    observation, action = episode.steps[0]
    assert observation[0]["role"] == "system" and action == {"role": "assistant", "content": GAMES[-1]["walkthrough"][0]}
    assert resolve_gamefile(GAMES[-1]["gamefile"]).is_file()


def test_slicing_needs_a_knife_in_hand_and_the_object_here():
    game = AlfredGame.load(next(DATA_DIR / g["gamefile"] for g in GAMES if "Bread-None-CounterTop" in g["gamefile"]))
    game.step("go to countertop 3")  # holds bread 1, knife 1 and butterknife 1
    assert not any(c.startswith("slice") for c in game.admissible_commands())
    assert game.step("take knife 1 from countertop 3").valid
    assert "slice bread 1 with knife 1" in game.admissible_commands()
    assert game.step("slice bread 1 with knife 1").feedback == "You sliced the bread 1 with the knife 1."
    game.step("move knife 1 to countertop 3")
    game.step("take bread 1 from countertop 3")
    assert game.step("examine bread 1").feedback == "This is a sliced bread 1."
