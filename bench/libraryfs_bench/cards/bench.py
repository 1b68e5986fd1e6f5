"""With an LLM: tiered self-consistency vs Best-of-N on a problem set (accuracy, mean calls, exit-tier
histogram, tokens). Problems are JSONL lines ``{"id": ..., "problem": ..., "answer": ..., "domain": ...?}``.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from libraryfs.features.cards import answers
from libraryfs.features.cards.controller import majority_vote
from libraryfs.features.cards.solver import build_messages, solve
from libraryfs.fs.tree import Tree
from libraryfs.llm.client import ChatClient, LLMError


def load_problems(path: str) -> list[dict[str, Any]]:
    """Read a problems JSONL file. Raises ``ValueError`` on a line that is not an object with
    ``problem`` and ``answer``."""
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not JSON: {e}") from None
            if not isinstance(obj, dict) or "problem" not in obj or "answer" not in obj:
                raise ValueError(f"{path}:{n}: need an object with 'problem' and 'answer'")
            obj.setdefault("id", f"p{n}")
            out.append(obj)
    return out


def best_of_n(problem: str, llm: ChatClient, n: int) -> tuple[str | None, int, int]:
    """Plain self-consistency: ``n`` calls without cards, plurality answer. Returns (answer, calls, tokens)."""
    msgs = build_messages(problem, "", "easy", "")
    got, tokens = [], 0
    for _ in range(n):
        try:
            r = llm.chat(msgs)
            got.append(answers.extract_answer(r.text))
            tokens += r.prompt_tokens + r.completion_tokens
        except LLMError:
            got.append(None)
    return majority_vote(got, answers.equivalent), n, tokens


def run_bench(
    problems: list[dict[str, Any]],
    tree: Tree | None,
    llm: ChatClient,
    best_of: int = 5,
    trace_out: str | None = None,
) -> dict[str, Any]:
    """Solve every problem both ways; JSON-able result (accuracy in [0, 1], calls and tokens per problem)."""
    acc: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    tokens: Counter[str] = Counter()
    hist: Counter[str] = Counter()
    bon = f"best-of-{best_of}"
    for p in problems:
        t = solve(p["problem"], tree, llm, domain=p.get("domain"), problem_id=p["id"], gold=str(p["answer"]))
        if trace_out:
            with open(trace_out, "a", encoding="utf-8") as f:
                f.write(json.dumps(t, ensure_ascii=False) + "\n")
        acc["tiered"] += bool(t["correct"])
        calls["tiered"] += t["calls"]
        tokens["tiered"] += t["prompt_tokens"] + t["completion_tokens"]
        hist[t["exit_tier"]] += 1
        ans, n, tok = best_of_n(p["problem"], llm, best_of)
        acc[bon] += answers.equivalent(str(p["answer"]), ans)
        calls[bon] += n
        tokens[bon] += tok
    k = max(1, len(problems))
    return {
        "problems": len(problems),
        "methods": {
            m: {"accuracy": acc[m] / k, "mean_calls": calls[m] / k, "mean_tokens": tokens[m] / k}
            for m in ("tiered", bon)
        },
        "exit_histogram": {t: hist[t] for t in ("easy", "medium", "hard", "fallback")},
    }


def format_table(result: dict[str, Any]) -> str:
    """The bench result as a fixed-width text table."""
    lines = [f"{'method':<14}{'accuracy':>10}{'mean calls':>12}{'mean tokens':>13}"]
    for name, m in result["methods"].items():
        lines.append(f"{name:<14}{m['accuracy']:>10.3f}{m['mean_calls']:>12.2f}{m['mean_tokens']:>13.0f}")
    lines.append("exit tiers: " + "  ".join(f"{t} {v}" for t, v in result["exit_histogram"].items()))
    return "\n".join(lines)
