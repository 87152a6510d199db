"""A LangGraph ReAct agent (model node <-> tool node) with a calculator tool, recorded by agentr1.

The graph is built once, before any session, with ``agentr1.adapters.langchain.chat_model()``:
a ``ChatOpenAI`` on the gateway that follows whichever session is active when it is called. Each
``@rollout`` call is one session; a tool call -> tool result -> answer is two exact steps.

    agentr1 gateway --model smollm2 --port 8000
    python examples/agents/langgraph_react_agent.py http://127.0.0.1:8000
"""

from __future__ import annotations

import argparse
import re
from typing import Any

import httpx
from langchain_core.messages import SystemMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from agentr1.adapters.langchain import chat_model
from agentr1.sdk import configure, rollout

SYSTEM = "You are a careful math assistant. Use the calculator tool, then give the final number."
TASKS = [{"id": "mul-12-7", "question": "What is 12*7?", "answer": 84},
         {"id": "add-35-48", "question": "What is 35+48?", "answer": 83},
         {"id": "sub-90-17", "question": "What is 90-17?", "answer": 73}]


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression with + - * / and parentheses."""
    if not re.fullmatch(r"[\d\s+\-*/().]+", expression or ""):
        return "error: only numbers and + - * / ( ) are allowed"
    try:
        return str(eval(expression, {"__builtins__": {}}, {}))  # arithmetic only, checked above
    except Exception as exc:
        return f"error: {exc}"


def build_agent(model: str) -> Any:
    """The classic ReAct graph: the model answers or calls tools; tool results go back to the model."""
    llm = chat_model(model, max_tokens=128).bind_tools([calculator])

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [llm.invoke([SystemMessage(SYSTEM), *state["messages"]])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([calculator]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)  # tool calls -> "tools", else the end
    graph.add_edge("tools", "agent")
    return graph.compile()


def score(answer: str, task: dict[str, Any]) -> float:
    numbers = re.findall(r"-?\d+", (answer or "").replace(",", ""))
    return float(bool(numbers) and int(numbers[-1]) == task["answer"])


@rollout(task_id=lambda task, **_: task["id"], group_id=lambda task, **_: task["id"],
         run_id=lambda task, **kw: kw.get("run_id"))
def solve(task: dict[str, Any], *, agent: Any, run_id: str | None = None) -> float:
    state = agent.invoke({"messages": [("user", task["question"])]}, {"recursion_limit": 10})
    return score(str(state["messages"][-1].content), task)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("gateway", help="the gateway's URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("--model", help="model name (default: the one the gateway serves)")
    parser.add_argument("--limit", type=int, default=len(TASKS), help="how many tasks to run")
    parser.add_argument("--run-id", help="run the sessions belong to (default: the gateway's default run)")
    args = parser.parse_args(argv)
    configure(args.gateway)
    agent = build_agent(args.model or str(httpx.get(f"{args.gateway}/v1/models", timeout=30).json()["data"][0]["id"]))
    rewards = {task["id"]: solve(task, agent=agent, run_id=args.run_id) for task in TASKS[: args.limit]}
    for name, value in rewards.items():
        print(f"{name}: reward {value}")
    return rewards


if __name__ == "__main__":
    main()
