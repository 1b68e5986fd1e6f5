"""The real local model (SmolLM2-135M-Instruct on llama_cpp.server) through the project's own LLM code.

Nothing is scripted or patched: the ``local_llm`` session fixture (tests/helpers/local_llm.py) serves the real
model on loopback, and the real ``openai`` client inside :class:`~libraryfs.llm.client.ChatClient` talks to it.
What the model writes is not fixed here (it is characterised in docs/llm.md, "The local model"); what is checked
is that real answers pass the project's own validators. Without the ``llm-local`` extra these tests skip
locally and fail in CI.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import urllib.request

import pytest
from helpers.facility import unavailable
from helpers.view import mkfile
from helpers.wait import pid_alive, wait_exit

from libraryfs.daemon import corpus
from libraryfs.daemon.indexer import Indexer
from libraryfs.fs import schema as S
from libraryfs.fs.store import Store
from libraryfs.fs.view import LibraryView
from libraryfs.index.jobs import SUMMARY_MAX_WORDS, EntryDoc
from libraryfs.llm import local
from libraryfs.llm import prompts as P
from libraryfs.llm.builder import LLMIndexBuilder
from libraryfs.llm.client import ChatClient
from libraryfs.llm.config import load_config
from libraryfs.llm.spend import SpendLimiter

pytestmark = [pytest.mark.llm_local, pytest.mark.slow]


def real_doc(rel: str) -> EntryDoc:
    """A python3-doc source as the indexer would hand it to a builder (first 8 KiB decoded)."""
    path = os.path.join(corpus.PYTHON_DOC_SOURCES, rel)
    if not os.path.isfile(path):
        unavailable(f"python3-doc source {path} is missing (apt-get install python3-doc)")
    with open(path, "rb") as f:
        data = f.read()
    return EntryDoc(
        path=rel,
        name=os.path.basename(rel),
        content_hash=hashlib.sha256(data).hexdigest(),
        text=data[:8192].decode("utf-8", "replace"),
        size_bytes=len(data),
    )


def test_builder_summarises_a_real_document_with_the_model(local_llm, libdir):
    """A summary written by the model (not the fallback): one line, ≤ 20 words, not the prompt or schema."""
    doc = real_doc("library/json.rst.txt")
    cfg = load_config(None, local_llm.overrides(), env={})
    store = Store(libdir)
    builder = LLMIndexBuilder(cfg, store)
    try:
        [line] = builder.summarize([doc])
        status = builder.status()
    finally:
        builder.close()
        store.close()
    jobs = status["jobs"]["summarize"]
    assert jobs["answered"] == 1 and jobs["fallbacks"] == 0, status
    assert status["requests"] >= 1 and status["tokens"] > 0
    assert status["index_answers"] == "text"
    assert line and "\n" not in line and len(line.split()) <= SUMMARY_MAX_WORDS + 1  # + the "…" of a cut line
    assert "{" not in line and "schema" not in line.lower()


def test_client_gets_a_json_answer_that_passes_validation(local_llm):
    """The inbox-filing job's JSON answer (the schema as a grammar, ``json_object_schema``) names an existing
    section or a safe new one for the entry."""
    doc = real_doc("library/heapq.rst.txt")
    cfg = load_config(None, local_llm.overrides(), env={})
    client = ChatClient(cfg, SpendLimiter(cfg.max_requests_per_hour, cfg.max_tokens_per_hour))
    sections = ["python/library", "python/tutorial", "dictionary", "recipes"]
    menu = [{"path": s, "description": f"{s.split('/')[-1]} documents"} for s in sections]
    user = P.user_message(
        "file", sections=menu, entries=[{"id": 1, "name": doc.name, "text": P.excerpt(doc.text, 1000)}]
    )
    answer, usage = client.complete_json(P.FILE, user, max_output_tokens=80)
    assert isinstance(answer, dict) and isinstance(answer.get("filings"), list), answer
    filed = P.valid_filings(answer, {1}, sections)
    assert set(filed) == {1}, answer
    assert usage.prompt_tokens > 100 and usage.completion_tokens > 0
    assert client.counters["requests"] == 1 and client.counters["http_errors"] == 0


def test_indexer_end_to_end_with_the_real_model(local_llm, libdir):
    """The indexer with the real model in its recommended plain-text mode: summaries, section descriptions
    and inbox filing, a handful of requests. What the model writes is not fixed; every answer it gave is
    either used (a safe one-line TOC line) or refused per item for the deterministic one, and the inbox is
    filed into an existing section."""
    st = Store(libdir)
    v = LibraryView(st)
    uid, gid = os.getuid(), os.getgid()
    for d in (b"/python", b"/cooking", b"/inbox"):
        v.mkdir(d, 0o755, uid, gid)
    for rel, dest in (
        ("library/json.rst.txt", b"/python/json.rst.txt"),
        ("library/heapq.rst.txt", b"/inbox/heapq.rst.txt"),
    ):
        mkfile(v, dest, real_doc(rel).text.encode()[:3000])
    mkfile(
        v,
        b"/cooking/bread.md",
        b"# Bread\n\nMix flour, water, salt and yeast; knead, let it rise, bake for 40 minutes.\n",
    )
    cfg = load_config(libdir, local_llm.overrides(), env={})
    builder = LLMIndexBuilder(cfg, st)
    try:
        idx = Indexer(str(libdir), builder=builder, store=st, settle_s=0)
        idx.run_once()
        idx.run_once()  # the filed entry is indexed in its new section
        status = builder.status()
        with st.read() as t:
            inbox = t.lookup(S.ROOT_INO, b"inbox")
            assert t.dir_is_empty(inbox)
            pages = {
                p: (t.toc_page(t.lookup(S.ROOT_INO, p.encode()), 0) or b"").decode()
                for p in ("python", "cooking")
            }
            root = (t.toc_page(S.ROOT_INO, 0) or b"").decode()
    finally:
        builder.close()
        st.close()
    print(f"\n{status['requests']} requests, jobs {status['jobs']}, endpoint {status['endpoint']}\n{root}")
    assert status["index_answers"] == "text" and status["http_errors"] == 0
    assert 3 <= status["requests"] <= 12, status["requests"]
    jobs = status["jobs"]
    for job in ("summarize", "describe", "file"):
        assert jobs[job]["items"] > 0 and jobs[job]["answered"] + jobs[job]["fallbacks"] >= 1, (job, jobs)
    assert sum(j["answered"] for j in jobs.values()) >= 1, jobs  # the model's text is used somewhere
    assert "heapq.rst.txt" in pages["python"] + pages["cooking"]
    for page in (*pages.values(), root):
        lines = page.splitlines()
        assert [ln for ln in lines if ln.startswith("# ")] == lines[1:2], page
        assert all(ln.startswith("- [") for ln in lines[4:] if ln.strip()), page


@pytest.mark.mount
def test_demo_mount_with_the_local_model_and_umount_stops_it(tmp_path):
    """``libraryfs demo --llm local``'s mount step: the model is started for the indexer daemon (a new file
    gets its deterministic line at once, then the model's), ``run.json`` records it, ``umount`` stops it."""
    from helpers.files import read_file
    from helpers.mount import require_fuse
    from helpers.wait import wait_until

    from libraryfs.daemon import launcher
    from libraryfs.daemon.demo import _mount
    from libraryfs.layout import read_run

    require_fuse()
    try:
        local.check_installed()
    except local.LocalModelError as e:
        unavailable(str(e))
    lib, mnt = tmp_path / "lib", tmp_path / "mnt"
    Store.create(lib, {"toc_max_tokens": 2000}).close()
    said: list[str] = []
    info = _mount(str(lib), str(mnt), "local", said.append)
    try:
        run = read_run(str(lib))
        assert run["llm_pid"] == info["llm_pid"] and pid_alive(run["llm_pid"])
        with open(mnt / "tides.md", "w") as f:
            f.write("# Tides\n\nHigh water comes twice a day; the moon pulls the sea towards it.\n")
        wait_until(lambda: "[tides.md]" in read_file(str(mnt / "INDEX.md")), 60, "the deterministic line")

        def by_model() -> bool:
            st = Store(str(lib), readonly=True)
            try:
                with st.read() as t:
                    meta = t.entry_meta(t.lookup(S.ROOT_INO, b"tides.md"))
                    return meta is not None and meta.by == "llm:" + local.MODEL_NAME
            finally:
                st.close()

        wait_until(by_model, 300, "the model's summary of tides.md")
    finally:
        launcher.stop(str(mnt))
    assert wait_exit(info["llm_pid"], 30), "umount left the local model running"
    assert any("serving at http://127.0.0.1:" in line for line in said), said


def _serve(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "libraryfs.cli.main", "llm", "serve", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_llm_serve_prints_a_working_endpoint_and_stops_on_sigterm(tmp_path):
    """``libraryfs llm serve``: the printed base URL serves the model; SIGTERM stops server and command (0)."""
    try:
        local.check_installed()
    except local.LocalModelError as e:
        unavailable(str(e))
    proc = _serve("--log", str(tmp_path / "serve.log"), "--n-ctx", "2048")
    try:
        first = proc.stdout.readline()  # blocks until the server answers (or the command fails)
        assert " serving at http://127.0.0.1:" in first, first + proc.stderr.read()
        base_url = first.split(" serving at ")[1].split()[0]
        server_pid = int(first.split("(pid ")[1].split(",")[0])
        rest = []
        for line in proc.stdout:
            rest.append(line)
            if "libraryfs config show" in line:
                break
        text = "".join(rest)
        assert f"export LIBRARYFS_LLM_BASE_URL={base_url}" in text
        assert f"export LIBRARYFS_LLM_MODEL={local.MODEL_NAME}" in text
        assert 'index_answers = "text"' in text and 'structured_output = "json_object_schema"' in text
        with urllib.request.urlopen(base_url + "/models", timeout=30) as r:
            assert [m["id"] for m in json.loads(r.read())["data"]] == [local.MODEL_NAME]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert wait_exit(server_pid, 30), "the model server outlived `libraryfs llm serve`"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_a_killed_caller_leaves_no_server_behind(tmp_path):
    """A process that started the server and died by SIGKILL takes the server with it (PR_SET_PDEATHSIG)."""
    try:
        local.check_installed()
    except local.LocalModelError as e:
        unavailable(str(e))
    code = (
        "import sys, time\nfrom libraryfs.llm import local\n"
        f"m = local.start(n_ctx=2048, log_path={str(tmp_path / 'server.log')!r})\n"
        "print(m.pid, flush=True)\ntime.sleep(600)\n"
    )
    caller = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        server_pid = int(caller.stdout.readline())
        assert pid_alive(server_pid)
        caller.kill()
        caller.wait()
        assert wait_exit(server_pid, 30), "the model server outlived its killed caller"
    finally:
        if caller.poll() is None:
            caller.kill()
            caller.wait()
        caller.stdout.close()


def test_a_temporary_log_is_removed_when_the_server_stops(tmp_path):
    """``local.start()`` without ``log_path`` writes the server's output to a temporary file; it was left in
    /tmp after every run (the benchmark smoke run found two). :meth:`LocalModel.stop` now removes a log it
    made; one the caller named stays."""
    try:
        local.check_installed()
    except local.LocalModelError as e:
        unavailable(str(e))
    m = local.start(n_ctx=2048)
    try:
        assert m.owns_log and os.path.exists(m.log_path)
    finally:
        m.stop()
    assert not os.path.exists(m.log_path)
    named = tmp_path / "server.log"
    m = local.start(n_ctx=2048, log_path=str(named))
    m.stop()
    assert not m.owns_log and named.exists()
