"""Coordination cost of the execution layer: routed plans and forced pipelines against one monolithic agent,
on the same tasks, each agent inside its own budgeted mount (PAPERS.md §3; issue 17).

Indexes this repository's own source and git history (``libraryfs code add``, in place, read-only) into a
new temporary library. For each task: route it and run its plan (**routed**); run it as a MULTIAGENT
pipeline over the same footprint (**pipeline**: planner → editors → integrator); run it as one agent that
reads everything the pipeline's agents read (**monolithic**). Every agent gets a mount session with its read
budget (EDQUOT past it); tokens are what the server reports; messages are delegations + artifacts handed
between agents + the result (``libraryfs.features.code.supervisor``).

Tasks: the three hand cases of issue 17, one question, and the subjects of the last ``--history`` commits of
this repository up to commit :data:`TASKS_REV` (real tasks, not written for this script).

Model: by default a **scripted** OpenAI-compatible server on loopback (tests/helpers: canned answers of the
right shape, usage = characters / 4 of the messages) — it measures the plumbing, not answer quality;
``--local`` runs the real SmolLM2-135M-Instruct (``libraryfs.llm.local``); ``--base-url/--model`` any endpoint.

Usage: ``python bench/code_exec.py [--local] [--history 8] [--context-tokens 1500] [--artifact-tokens 800]
[--output-tokens 300] [--out FILE]``;
JSON in ``bench/results/code_exec.json`` (``code_exec_local.json`` with ``--local``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
HAND = [
    "who calls verify_plan",
    "Fix the typo in the docstring of verify_plan",
    "Add a --limit option to the libraryfs recall command",
    "why does the indexer rebuild every INDEX.md after a rename?",
]


#: Tasks from history are read at this commit (on main), so that the task list does not move with new commits.
TASKS_REV = "2d0c835"


def tasks_from_history(n: int, rev: str = TASKS_REV) -> list[str]:
    """Subjects of the last ``n`` non-merge commits of this repository up to ``rev``."""
    out = subprocess.run(["git", "-C", ROOT, "log", "--no-merges", f"-{n}", "--format=%s", rev], capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    return [s for s in out.splitlines() if s.strip()]


@contextlib.contextmanager
def endpoint(args):
    """``(base_url, model, label)`` of the model to run against, for the duration of the block."""
    if args.base_url:
        yield args.base_url, args.model, f"endpoint {args.model}"
    elif args.local:
        from libraryfs.llm import local

        with local.running() as m:
            yield m.base_url, m.model, f"local {m.model} (llama.cpp, n_ctx {m.n_ctx})"
    else:
        sys.path.insert(0, os.path.join(ROOT, "tests"))
        from helpers.code_agent_model import CodeAgentModel
        from helpers.llm_server import LLMServer

        with LLMServer(default=CodeAgentModel()) as srv:
            yield srv.base_url, "scripted", "scripted loopback server (canned answers)"


def make_client(base_url: str, model: str, local: bool):
    from libraryfs.llm.client import ChatClient
    from libraryfs.llm.config import LLMConfig
    from libraryfs.llm.spend import SpendLimiter

    cfg = LLMConfig(base_url=base_url, model=model, timeout_s=300.0 if local else 30.0)
    if local:
        from libraryfs.llm.local import RECOMMENDED

        cfg.structured_output = RECOMMENDED["structured_output"]
    return ChatClient(cfg, SpendLimiter(0, 0))


def run_one(sup, plan, run_id: str) -> dict:
    """Run a plan; its totals, status and time (a refused plan is recorded as such)."""
    from libraryfs.features.code.plan import PlanRefused

    t0 = time.perf_counter()
    try:
        r = sup.run(plan, run_id=run_id)
    except PlanRefused as e:
        return {"refused": str(e)}
    return {**r.totals(), "ok": r.ok, "topology": plan.topology, "shape": plan.shape,
            "failed": [f"{n.id}: {n.error}" for n in r.nodes if n.status != "done"],
            "elapsed_s": round(time.perf_counter() - t0, 2)}  # fmt: skip


def measure(tasks: list[str], lib: str, client, sizes) -> list[dict]:
    from libraryfs.daemon.session import mount_session
    from libraryfs.features.code.history import CoChange
    from libraryfs.features.code.plan import build_plan
    from libraryfs.features.code.render import load_index
    from libraryfs.features.code.retrieve import Retriever
    from libraryfs.features.code.router import route
    from libraryfs.features.code.supervisor import Supervisor, monolithic_plan
    from libraryfs.fs.tree import open_tree

    tree = open_tree(lib)
    index = load_index(tree, "libraryfs")
    getattr(tree, "close", lambda: None)()
    retriever = Retriever(index)
    history = CoChange(index.history) if index.history else None
    sup = Supervisor(client, lambda spec: mount_session(lib, spec), sizes)
    rows = []
    for i, task in enumerate(tasks):
        d = route(retriever, task, history=history)
        files = d.files or [h.node.partition("::")[0] for h in d.hits[:3]]
        routed = build_plan(task, "libraryfs", d.topology, d.files, intent=d.intent, shape=d.shape,
                            hits=[h.path for h in d.hits], sizes=sizes)  # fmt: skip
        pipeline = build_plan(
            task, "libraryfs", "MULTIAGENT", list(dict.fromkeys(files)), shape="pipeline", sizes=sizes
        )
        row = {"task": task, "topology": d.topology, "intent": d.intent, "files": d.files}
        row["routed"] = run_one(sup, routed, f"b{i}-routed")
        row["pipeline"] = run_one(sup, pipeline, f"b{i}-pipeline")
        row["monolithic_of_routed"] = run_one(sup, monolithic_plan(routed), f"b{i}-mono-routed")
        row["monolithic_of_pipeline"] = run_one(sup, monolithic_plan(pipeline), f"b{i}-mono-pipeline")
        rows.append(row)
        print(f"[{i + 1}/{len(tasks)}] {d.topology:12s} {task[:70]}", flush=True)
    return rows


def summarize(rows: list[dict]) -> dict:
    out = {}
    for mode in ("routed", "monolithic_of_routed", "pipeline", "monolithic_of_pipeline"):
        ok = [r[mode] for r in rows if "refused" not in r[mode]]
        out[mode] = {k: sum(x[k] for x in ok) for k in ("agents", "calls", "messages", "prompt_tokens",
                                                        "completion_tokens", "tokens", "read_tokens", "refused_reads")}  # fmt: skip
        out[mode].update(
            runs=len(ok), ok=sum(x["ok"] for x in ok), elapsed_s=round(sum(x["elapsed_s"] for x in ok), 1)
        )
    return out


def print_table(s: dict, label: str) -> None:
    print(f"\nmodel: {label}")
    cols = ("runs", "ok", "agents", "calls", "messages", "prompt_tokens", "completion_tokens", "tokens", "read_tokens",
            "refused_reads", "elapsed_s")  # fmt: skip
    print(f"{'mode':24s}" + "".join(f"{c:>18s}" for c in cols))
    for mode, v in s.items():
        print(f"{mode:24s}" + "".join(f"{v[c]:>18}" for c in cols))
    for a, b in (("routed", "monolithic_of_routed"), ("pipeline", "monolithic_of_pipeline")):
        if s[b]["tokens"] and s[b]["messages"]:
            print(f"{a} / {b}: tokens ×{s[a]['tokens'] / s[b]['tokens']:.2f}, messages ×{s[a]['messages'] / s[b]['messages']:.2f}, "
                  f"calls ×{s[a]['calls'] / max(1, s[b]['calls']):.2f}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--local", action="store_true", help="the real local model (libraryfs[llm-local])")
    ap.add_argument("--base-url")
    ap.add_argument("--model", default="model")
    ap.add_argument("--history", type=int, default=8, help="tasks from this repository's last N commits")
    ap.add_argument("--context-tokens", type=int, default=1500, help="code each agent may read (tokens)")
    ap.add_argument(
        "--artifact-tokens", type=int, default=800, help="each input artifact an agent reads (tokens)"
    )
    ap.add_argument("--output-tokens", type=int, default=300, help="longest answer (tokens)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from libraryfs.features.code.plan import PlanSizes
    from libraryfs.fs.store import Store

    sizes = PlanSizes(context_tokens=args.context_tokens, artifact_tokens=args.artifact_tokens,
                      output_tokens=args.output_tokens, seconds=600.0 if args.local else 120.0)  # fmt: skip
    tasks = HAND + tasks_from_history(args.history)
    tmp = tempfile.mkdtemp(prefix="libraryfs-code-exec-")
    try:
        lib = os.path.join(tmp, "lib")
        Store.create(lib, {}).close()
        subprocess.run([sys.executable, "-m", "libraryfs.cli.main", "code", "add", ROOT, "--name", "libraryfs",
                        "--library", lib], check=True, capture_output=True)  # fmt: skip
        with endpoint(args) as (base_url, model, label):
            rows = measure(tasks, lib, make_client(base_url, model, args.local), sizes)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    s = summarize(rows)
    print_table(s, label)
    out = args.out or os.path.join(
        HERE, "results", "code_exec_local.json" if args.local else "code_exec.json"
    )
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(
            {"model": label, "sizes": dataclasses.asdict(sizes), "summary": s, "tasks": rows}, f, indent=1
        )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
