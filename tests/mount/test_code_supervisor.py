"""The execution layer end to end: gated plans run agent by agent through real budgeted FUSE mounts, against
a real OpenAI-compatible server on loopback (scripted answers; the openai client is not mocked).

Each agent's mount session gets the node's read budget, so the EDQUOT a starved agent meets comes from the
filesystem; artifacts are files under the mount, checked afterwards in the store; a refused plan makes no
model request and mounts nothing.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from helpers.code_agent_model import CodeAgentModel
from helpers.llm_server import LLMServer

from libraryfs.features.code.budget import Budget
from libraryfs.features.code.plan import PlanRefused, PlanSizes, build_plan
from libraryfs.features.code.supervisor import Supervisor, monolithic_plan
from libraryfs.fs.store import Store
from libraryfs.fs.tree import open_tree

pytestmark = pytest.mark.mount

MODULES = {
    "pkg/__init__.py": "",
    "pkg/store.py": '"""Storage."""\n\n\ndef save(rec):\n    """Persist a record."""\n    return dict(rec)\n',
    "pkg/core.py": 'from pkg.store import save\n\n\ndef run(x):\n    """Run one step."""\n    return save({"x": x})\n',
    "pkg/cli.py": 'from pkg.core import run\n\n\ndef main(argv):\n    """Command line."""\n    return run(argv[0])\n',
    "pkg/util.py": '\n\ndef clamp(v, lo, hi):\n    """Clamp v."""\n    return max(lo, min(hi, v))\n' * 40,
    "tests/test_core.py": 'from pkg.core import run\n\n\ndef test_run():\n    assert run(1) == {"x": 1}\n',
}


@pytest.fixture()
def code_library(tmp_path, run_cli):
    """A library (not mounted) holding the code index of a small repository."""
    from helpers.facility import unavailable
    from helpers.mount import fuse_available

    why = fuse_available()
    if why:
        unavailable(why)
    repo = tmp_path / "demo"
    for rel, text in MODULES.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    lib = tmp_path / "lib"
    Store.create(str(lib), {}).close()
    r = run_cli("code", "add", str(repo), "--library", str(lib))
    assert r.returncode == 0, r.stderr
    return lib


@pytest.fixture()
def model():
    scripted = CodeAgentModel()
    with LLMServer(default=scripted) as srv:
        srv.scripted = scripted
        yield srv


def _client(srv):
    from libraryfs.llm.client import ChatClient
    from libraryfs.llm.config import LLMConfig
    from libraryfs.llm.spend import SpendLimiter

    return ChatClient(LLMConfig(base_url=srv.base_url, model="scripted", timeout_s=20), SpendLimiter(0, 0))


def _sessions(lib, log):
    from libraryfs.daemon.session import mount_session

    def open_session(spec):
        log.append(spec)
        return mount_session(str(lib), spec)

    return open_session


def _read_store(lib: Path, rel: str) -> bytes:
    tree = open_tree(str(lib))
    try:
        return tree.read_bytes(rel)
    finally:
        getattr(tree, "close", lambda: None)()


FILES = ["pkg/store.py", "pkg/core.py", "pkg/cli.py", "tests/test_core.py"]


def test_pipeline_runs_end_to_end_through_budgeted_mounts(code_library, model):
    plan = build_plan("Thread a timeout through run and save", "demo", "MULTIAGENT", FILES, shape="pipeline")
    sessions: list = []
    result = Supervisor(_client(model), _sessions(code_library, sessions)).run(plan, run_id="r-pipe")
    assert result.ok, [(n.id, n.error) for n in result.nodes]
    agents = plan.nodes[1:]
    # one session per agent with exactly the node's read budget, plus the supervisor's own (unbudgeted)
    assert [s for s in sessions if s] == [f"reads={n.read_count},tokens={n.read_tokens}" for n in agents]
    assert model.scripted.requests == {"planner": 1, "editor": 3, "integrator": 1}
    by_id = {n.id: n for n in result.nodes}
    for n in agents:
        rec = by_id[n.id]
        assert rec.calls == 1 and rec.prompt_tokens > 0 and rec.completion_tokens > 0
        assert 0 < rec.read_tokens <= n.read_tokens  # the mount counted what the agent read
    # the integrator's patch holds every editor's edits: artifacts flowed through the mount
    final = json.loads(_read_store(code_library, "code/.runs/r-pipe/integrator/patch.json"))
    # (the scripted editors name every file they read: each footprint file's symbol table and source)
    assert sorted(e["file"] for e in final["edits"]) == sorted(
        f"code/demo/{f}/{name}" for f in FILES for name in ("SYMBOLS.md", "SOURCE.py")
    )
    assert final == result.final
    saved = json.loads(_read_store(code_library, "code/.runs/r-pipe/result.json"))
    assert saved["ok"] and saved["totals"]["calls"] == 5
    assert json.loads(_read_store(code_library, "code/.runs/r-pipe/plan.json"))["topology"] == "MULTIAGENT"
    # messages: a delegation per agent, the artifacts agents handed each other, the result
    handoffs = 3 * 1 + 3  # editors read the plan; the integrator reads three patches
    assert result.messages == len(agents) + handoffs + 1


def test_monolithic_run_of_the_same_task_coordinates_less(code_library, model):
    plan = build_plan("Thread a timeout through run and save", "demo", "MULTIAGENT", FILES, shape="pipeline")
    multi = Supervisor(_client(model), _sessions(code_library, [])).run(plan, run_id="r-multi")
    mono = Supervisor(_client(model), _sessions(code_library, [])).run(monolithic_plan(plan), run_id="r-mono")
    # if a run failed: each node's error and what reached the scripted server (a string: shown whole)
    seen = "\n".join(f"{r.method} {r.path} {r.task}" for r in model.requests)
    errors = "\n".join(f"{n.id}: {n.error}" for n in multi.nodes + mono.nodes if n.error)
    assert multi.ok and mono.ok, f"{errors}\n-- requests the server saw:\n{seen}"
    assert mono.totals()["calls"] == 1 and mono.messages == 2  # one delegation, one result
    assert multi.messages > mono.messages and multi.totals()["calls"] == 5
    # the one agent read every file the five did (the planner's symbol tables and the editors' sources)
    assert {e["file"] for e in mono.final["edits"]} >= {e["file"] for e in multi.final["edits"]}


def test_an_infeasible_plan_is_refused_before_any_mount_or_model_call(code_library, model):
    plan = build_plan(
        "Fix save", "demo", "SUBAGENT", FILES[:2], budget=Budget(tokens=500, calls=1, handoffs=1)
    )
    sessions: list = []
    with pytest.raises(PlanRefused) as e:
        Supervisor(_client(model), _sessions(code_library, sessions)).run(plan, run_id="r-refused")
    assert e.value.report.failed() == ["budget"]
    assert model.requests == [] and sessions == []
    with pytest.raises(FileNotFoundError):
        _read_store(code_library, "code/.runs/r-refused/plan.json")


def test_a_starved_agent_reads_within_its_budget_and_the_mount_enforces_it(code_library, model):
    sizes = PlanSizes(context_tokens=60, artifact_tokens=100)  # pkg/util.py alone is ~10x that
    plan = build_plan("Speed up clamp", "demo", "SUBAGENT", ["pkg/util.py", "pkg/store.py"], sizes=sizes)
    node = plan.nodes[1]
    result = Supervisor(_client(model), _sessions(code_library, []), sizes).run(plan, run_id="r-starved")
    (rec,) = result.nodes
    assert rec.status == "done" and rec.truncated and rec.read_tokens <= node.read_tokens
    # it read its task spec and only what fits: pkg/util.py was left out, pkg/store.py's table came in
    (req,) = model.requests
    assert req.payload["truncated"] is True
    read = [c["path"] for c in req.payload["code"]]
    assert read and not any("pkg/util.py" in p for p in read)
    # an agent that reads anyway gets EDQUOT from the mount itself, and nothing is charged for the refusal
    from libraryfs.daemon.session import budget_state, mount_session

    with mount_session(str(code_library), f"reads={node.read_count},tokens={node.read_tokens}") as mnt:
        with (
            pytest.raises(OSError) as e,
            open(os.path.join(mnt, "code/demo/pkg/util.py/SOURCE.py"), "rb") as f,
        ):
            f.read()
        assert e.value.errno == errno.EDQUOT
        state = budget_state(mnt)
    assert state["refused"] >= 1 and state["used"]["tokens"] <= node.read_tokens


def test_code_run_cli_routes_gates_and_runs(code_library, model, run_cli):
    env = {"LIBRARYFS_LLM_BASE_URL": model.base_url, "LIBRARYFS_LLM_MODEL": "scripted"}
    r = run_cli(
        "code", "run", "who calls save", "--repo", "demo", "--library", str(code_library), "--json", env=env
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["ok"] and doc["topology"] == "FASTPATH" and doc["totals"]["calls"] == 1
    assert doc["final_path"].endswith("reader/answer.md")
    r = run_cli(
        "code",
        "run",
        "Fix save",
        "--repo",
        "demo",
        "--library",
        str(code_library),
        "--budget",
        "tokens=10",
        env=env,
    )
    assert r.returncode == 5 and "refused" in r.stderr
    assert len(model.requests) == 1  # the refused run asked nothing


def test_code_run_refuses_a_mounted_library(code_library, run_cli):
    from libraryfs.daemon.session import mount_session

    with mount_session(str(code_library)):
        r = run_cli("code", "run", "x", "--repo", "demo", "--library", str(code_library))
    assert r.returncode == 1 and "is mounted" in r.stderr


def test_an_answer_cut_at_the_token_limit_fails_its_agent_and_is_charged(code_library):
    """An editor's answer cut at the output bound before the Patch's required ``summary``: the agent fails
    saying so (not "summary missing"), its one request and its tokens are counted and charged to the run,
    and the integrator, whose input never came, asks nothing."""
    from helpers.llm_server import Reply

    scripted = CodeAgentModel()

    def answer(req):
        if req.payload.get("task") == "code.editor":
            return Reply(
                '{"summ', finish_reason="length", usage={"prompt_tokens": 90, "completion_tokens": 40}
            )
        return scripted(req)

    plan = build_plan("Make save return a copy of the record", "demo", "MULTIAGENT", FILES[:2], shape="swarm")
    with LLMServer(default=answer) as srv:
        result = Supervisor(_client(srv), _sessions(code_library, [])).run(plan, run_id="r-cut")
    editors, integrator = result.nodes[:2], result.nodes[2]
    for n in editors:
        assert (
            n.status == "failed" and "cut at the token limit" in n.error and "'summary'" in n.error
        ), n.error
        assert (n.calls, n.prompt_tokens, n.completion_tokens) == (1, 90, 40)
    assert integrator.calls == 0 and "producer did not finish" in integrator.error
    assert not result.ok and result.totals()["tokens"] == 2 * 130


def test_only_a_bad_answer_is_charged_not_any_error_carrying_usage(code_library):
    """The model refuses the editors' requests (HTTP 400: the client's ``Rejected``), and the client in front
    of it (the supervisor takes anything with ``complete_json``) tags what it passes on with a ``usage`` of
    its own shape: the agents fail with the model's error, charged nothing (no call, no tokens). Charged from
    any exception with a ``usage``, the dict raised AttributeError in the handler, which replaced the model's
    error in the record, and the request counted as a call."""
    from helpers.llm_server import Status

    from libraryfs.llm.client import Rejected

    scripted = CodeAgentModel()

    def answer(req):
        if req.payload.get("task") == "code.editor":
            return Status(400, "model refuses this job")
        return scripted(req)

    class Tagging:
        """The real client, its errors tagged with a usage dict (as an SDK's error body may hold one)."""

        def __init__(self, inner):
            self.inner = inner

        def complete_json(self, job, user, max_output_tokens):
            try:
                return self.inner.complete_json(job, user, max_output_tokens)
            except Rejected as e:
                e.usage = {"prompt_tokens": 90, "completion_tokens": 0}
                raise

    plan = build_plan("Make save return a copy of the record", "demo", "MULTIAGENT", FILES[:2], shape="swarm")
    with LLMServer(default=answer) as srv:
        result = Supervisor(Tagging(_client(srv)), _sessions(code_library, [])).run(plan, run_id="r-tagged")
    editors = result.nodes[:2]
    for n in editors:
        assert n.status == "failed" and n.error.startswith("Rejected: HTTP 400"), n.error
        assert (n.calls, n.prompt_tokens, n.completion_tokens) == (0, 0, 0)
    assert result.totals()["tokens"] == 0


@pytest.mark.slow
@pytest.mark.llm_local
def test_a_swarm_runs_with_the_real_local_model(code_library, local_llm):
    """The same machinery with SmolLM2-135M answering every agent (its schema as a grammar): each agent makes
    one real request inside its budgeted mount, and what it wrote is a typed artifact."""
    from libraryfs.llm.client import ChatClient
    from libraryfs.llm.config import LLMConfig
    from libraryfs.llm.local import RECOMMENDED
    from libraryfs.llm.spend import SpendLimiter

    cfg = LLMConfig(base_url=local_llm.base_url, model=local_llm.model, timeout_s=300.0)
    cfg.structured_output = RECOMMENDED["structured_output"]
    client = ChatClient(cfg, SpendLimiter(0, 0))
    sizes = PlanSizes(context_tokens=400, artifact_tokens=400, output_tokens=300, seconds=600.0)
    plan = build_plan("Make save return a copy of the record", "demo", "MULTIAGENT", FILES[:2], shape="swarm",
                      sizes=sizes)  # fmt: skip
    result = Supervisor(client, _sessions(code_library, []), sizes).run(plan, run_id="r-local")
    got = [(n.id, n.calls, n.error) for n in result.nodes]
    # the machinery's contract, whatever the 135M model answers: each editor makes its one real request; an
    # answer that is not a Patch (the model rambles past the output bound and the cut answer loses a
    # required key) fails its node with the type's error, and the integrator then asks nothing. The model's
    # output is not reproducible from run to run (llama.cpp reuses the previous request's KV prefix, so the
    # floating-point sums, and so the greedy tokens, depend on which test asked before).
    editors, integrator = result.nodes[:2], result.nodes[2]
    assert [n.calls for n in editors] == [1, 1], got
    assert all(n.prompt_tokens > 0 and n.completion_tokens > 0 for n in editors), got
    assert all(n.status == "done" or n.error.startswith(("Patch: ", "BadAnswer: ")) for n in editors), got
    if all(n.status == "done" for n in editors):
        assert integrator.calls == 1 and integrator.completion_tokens > 0, got
    else:
        assert integrator.calls == 0 and "producer did not finish" in integrator.error, got
    if result.ok:
        patch = json.loads(_read_store(code_library, "code/.runs/r-local/integrator/patch.json"))
        assert isinstance(patch["summary"], str) and isinstance(patch["edits"], list)
    else:
        assert any(
            n.status == "failed" and n.error.startswith(("Patch: ", "BadAnswer: ")) for n in editors
        ), got
    print("local model run:", json.dumps(result.totals()), got)


def test_code_run_exits_6_when_an_agent_fails(code_library, run_cli):
    """An endpoint that refuses every request (HTTP 401, not retried) fails the agent: exit 6, none of every
    command's 1–4 (3 a missing extra, 4 a damaged store); the endpoint comes from the shared ``--llm-*``
    flags."""
    from helpers.llm_server import Status

    with LLMServer(default=Status(401, "bad key")) as srv:
        r = run_cli("code", "run", "who calls save", "--repo", "demo", "--library", str(code_library),
                    "--llm-base-url", srv.base_url, "--llm-model", "scripted")  # fmt: skip
        assert r.returncode == 6, (r.returncode, r.stdout, r.stderr)
        assert len(srv.requests) == 1
    assert "reader" in r.stdout and "failed" in r.stdout
