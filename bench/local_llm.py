"""Characterise the real local model (SmolLM2-135M-Instruct on llama_cpp.server) for the index jobs.

    python bench/local_llm.py [--docs 12] [--batches 2] [--threads 2] [--out bench/results/local_llm.json]

Starts the server with :mod:`libraryfs.llm.local` (``verbose`` so llama.cpp logs its own timings), then sends,
one request at a time, over the first 2,048 bytes of real python3-doc sources (every k-th ``library/*.rst.txt``):

* ``summarize`` job of :mod:`libraryfs.llm.prompts` (our system prompt + schema, one entry per request) in
  four answer modes (``--modes``): ``prompt`` (no ``response_format``), ``json_object`` (what ``ChatClient`` sends with
  ``structured_output = "json_object"``: llama.cpp's generic JSON grammar) and ``json_object_schema``
  (``{"type": "json_object", "schema": …}``, llama-cpp-python's extension: a grammar built from the job's
  schema; what ``ChatClient`` sends with ``structured_output = "json_object_schema"``, the local model's
  recommended setting); ``json_object_schema_bounded``: the same with the bounds a grammar can enforce
  (exactly n summaries, each ≤ 160 characters; OpenAI's strict mode refuses these keywords);
* the same job with 8 entries per request (``--batches`` requests per mode);
* a plain-text request, no JSON: the document, then "Summarize the document above in one sentence of at most
  20 words." (what a plain-text builder would send).

Each answer is validated with the project's own validators (``valid_summaries``: "valid" items) and
classified (ok, empty, truncated, not JSON, schema echoed, wrong shape / items missing, file name as summary,
document copied, summary of another entry, about the task, repetition; plain text also: not one line, over
20 words). For plain text, "useful" judges the answer's first sentence cut to 20 words (what a plain-text
builder keeping the first sentence would store). For JSON, "useful" items are valid ones that are not the file name, not ≥ 6 words copied verbatim from their
document or from another entry of the batch, hold no schema fragment and do not talk about the task
("document", "summary", "20 words"). The classes are heuristics: read the examples in the JSON.
Latency is wall time per request measured here; prompt and generation speed (tokens/s) come from llama.cpp's log. Prints tables and
writes JSON. Everything is real (no scripted server); the machine's load average is recorded beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from libraryfs.daemon import corpus
from libraryfs.index.jobs import clean_line
from libraryfs.llm import local
from libraryfs.llm import prompts as P
from libraryfs.llm.client import BadAnswer, ChatClient, parse_json_object
from libraryfs.llm.config import LLMConfig

DOC_BYTES = 2048
MAX_TOKENS_ONE = 60  #: what the builder allows per summarize item (LLMIndexBuilder: out_tokens_per_item)
PLAIN_PROMPT = "Summarize the document above in one sentence of at most 20 words."
_PERF = re.compile(r"(prompt eval|\s eval) time =\s*([\d.]+) ms /\s*(\d+) (?:tokens|runs)")


def documents(n: int) -> list[tuple[str, str]]:
    """``n`` (relative path, first DOC_BYTES characters) pairs, every k-th python3-doc ``library/`` source."""
    paths = [p for p in corpus.iter_python_docs() if "/library/" in p]
    if not paths:
        sys.exit(
            f"python3-doc sources not found under {corpus.PYTHON_DOC_SOURCES} (apt-get install python3-doc)"
        )
    step = max(1, len(paths) // n)
    rels = [os.path.relpath(p, corpus.PYTHON_DOC_SOURCES) for p in paths[::step][:n]]
    return [(rel, _read(rel)) for rel in rels]


def _read(rel: str) -> str:
    with open(os.path.join(corpus.PYTHON_DOC_SOURCES, rel), encoding="utf-8", errors="replace") as f:
        return f.read(DOC_BYTES)


def _entry(i: int, rel: str, text: str) -> dict[str, Any]:
    return {
        "id": i,
        "name": os.path.basename(rel),
        "path": rel,
        "size_bytes": len(text.encode()),
        "text": P.excerpt(text),
    }


def _repeats(text: str) -> bool:
    words = text.lower().split()
    grams = [" ".join(words[i : i + 3]) for i in range(len(words) - 2)]
    return any(grams.count(g) >= 3 for g in set(grams))


def _copied(line: str, doc: str) -> bool:
    """The line is the document's own text (≥ 6 words verbatim in order, or the whole line when shorter)."""
    norm = " ".join(re.sub(r"[^\w]+", " ", doc.lower()).split())
    words = re.sub(r"[^\w]+", " ", line.lower()).split()
    if not words:
        return False
    k = min(6, len(words))
    return any(" ".join(words[i : i + k]) in norm for i in range(len(words) - k + 1))


def _is_name(line: str, name: str) -> bool:
    """The line is only the entry's file name (with or without its extensions)."""
    if re.fullmatch(r"[\w-]+(?:\.[\w-]+)+", line.strip()):  # one dotted token: a file or module name
        return True
    norm = " ".join(re.sub(r"[^\w]+", " ", line.lower()).split())
    stem = name.lower().split(".")[0]
    return norm in (" ".join(re.sub(r"[^\w]+", " ", name.lower()).split()), stem) or norm.startswith(
        stem + " rst"
    )


_SCHEMA_WORDS = re.compile(r"""['"]?\b(?:type|items|properties|summaries)\b['"]?\s*:|[{}]""")
_ABOUT_TASK = re.compile(r"\b(?:document|summar\w*|20 words|one sentence|one-line)\b", re.I)
_SCHEMA_ECHO = re.compile(r'"(?:properties|additionalProperties|required)"\s*:|"type"\s*:\s*"object"')


def classify(
    content: str,
    finish: str,
    docs: dict[int, str],
    valid: dict[int, str] | None,
    names: dict[int, str] | None = None,
) -> str:
    """One failure class for an answer (``ok`` when every asked item has a valid line that is neither the
    file name nor copied from the document). ``valid`` is ``None`` for a plain-text answer."""
    if not content.strip():
        return "empty"
    if valid is None:  # plain-text answer
        line = content.strip()
        if finish == "length":
            return "truncated"
        if _repeats(line):
            return "repetition"
        if "\n" in line:
            return "not one line"
        if len([w for w in line.split() if w != "…"]) > P.SUMMARY_MAX_WORDS:
            return "over 20 words"
        if _ABOUT_TASK.search(line):
            return "about the task"
        return "document copied" if _copied(line, next(iter(docs.values()))) else "ok"
    if _SCHEMA_ECHO.search(content):
        return "schema echoed"
    try:
        parse_json_object(content)
    except BadAnswer:
        return "truncated" if finish == "length" else "not JSON"
    if len(valid) < len(docs):
        return "repetition" if _repeats(content) else "wrong shape / items missing"
    if any(_SCHEMA_WORDS.search(v) for v in valid.values()):
        return "schema echoed"
    if names and any(_is_name(valid[i], names[i]) for i in valid):
        return "file name as summary"
    if any(_copied(valid[i], docs[i]) for i in valid):
        return "document copied"
    if any(_ABOUT_TASK.search(v) for v in valid.values()):
        return "about the task"
    return "ok"


def first_sentence(text: str) -> str:
    """The answer's first sentence, cut to 20 words the way the TOC cuts lines (what a plain-text builder
    that keeps the first sentence would store)."""
    line = " ".join(text.strip().split("\n\n")[0].split())
    m = re.search(r"(?<=[a-z0-9)\]`'])[.!?](?:\s|$)", line)
    return clean_line(line[: m.end()] if m else line, P.SUMMARY_MAX_WORDS).strip()


def evaluate(row: dict[str, Any]) -> None:
    """Validate and classify one recorded request in place (``valid_items``, ``useful_items``, ``outcome``).

    Reads the documents again from python3-doc, so ``--from-json`` can re-evaluate a stored run."""
    rels = row["docs"]
    texts = {i + 1: _read(rel) for i, rel in enumerate(rels)}
    names = {i + 1: os.path.basename(rel) for i, rel in enumerate(rels)}
    content, finish = row["content"], row["finish_reason"] or ""
    if row.get("kind", "plain" if row["condition"].startswith("plain") else "json") == "plain":
        row["outcome"] = classify(content, finish, texts, None)
        first = first_sentence(content)
        ok_first = bool(first) and classify(first, "stop", texts, None) == "ok"
        row.update(
            items=1, valid_items=int(row["outcome"] == "ok"), useful_items=int(ok_first), first_sentence=first
        )
        return
    try:
        answer = parse_json_object(content)
        valid = P.valid_summaries(answer, set(texts))
        listed = answer.get("summaries")
        extra = (
            len([x for x in listed if isinstance(x, dict)]) - len(valid) if isinstance(listed, list) else 0
        )
    except (BadAnswer, P.InvalidAnswer):
        valid, extra = {}, 0
    misattributed = [
        i
        for i in valid
        if not _copied(valid[i], texts[i]) and any(_copied(valid[i], t) for j, t in texts.items() if j != i)
    ]
    useful = [
        i
        for i in valid
        if not _is_name(valid[i], names[i])
        and not _copied(valid[i], texts[i])
        and not _SCHEMA_WORDS.search(valid[i])
        and not _ABOUT_TASK.search(valid[i])
        and i not in misattributed
    ]
    outcome = classify(content, finish, texts, valid, names)
    if outcome == "ok" and misattributed:
        outcome = "summary of another entry"
    row.update(
        items=len(rels),
        valid_items=len(valid),
        useful_items=len(useful),
        summaries=valid,
        extra_items=max(0, extra),
        misattributed_items=len(misattributed),
        outcome=outcome,
    )


def _perf(log_text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for kind, ms, n in _PERF.findall(log_text):
        key = "llama_prompt" if kind.startswith("prompt") else "llama_eval"
        out[key + "_ms"] = out.get(key + "_ms", 0.0) + float(ms)
        out[key + "_tokens"] = out.get(key + "_tokens", 0) + int(n)
    return out


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds used so far by process ``pid`` and its threads (``/proc/<pid>/stat``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Runner:
    """Sends requests to the running server and records one row per request."""

    def __init__(self, server: local.LocalModel) -> None:
        self.server = server
        # the shared client, one try per request: every row is one HTTP request as the server answered it
        self.client = ChatClient(LLMConfig(base_url=server.base_url, timeout_s=600, transport_attempts=1))
        self.rows: list[dict[str, Any]] = []

    def ask(
        self,
        condition: str,
        messages: list[dict[str, str]],
        max_tokens: int,
        response_format: dict[str, Any] | None,
    ) -> tuple[str, str, dict[str, Any]]:
        """One request; returns (content, finish_reason, row)."""
        kw: dict[str, Any] = {"response_format": response_format} if response_format else {}
        offset = os.path.getsize(self.server.log_path)
        cpu0 = _cpu_s(self.server.pid)
        t0 = time.perf_counter()
        r, _usage = self.client.create(
            messages, model=self.server.model, max_tokens=max_tokens, temperature=0.0, **kw
        )
        latency_s = time.perf_counter() - t0
        cpu_s = _cpu_s(self.server.pid) - cpu0
        with open(self.server.log_path, encoding="utf-8", errors="replace") as f:
            f.seek(offset)
            perf = _perf(f.read())
        content = r.choices[0].message.content or ""
        row = {
            "condition": condition,
            "latency_s": round(latency_s, 3),
            "server_cpu_s": round(cpu_s, 3),
            "prompt_tokens": r.usage.prompt_tokens if r.usage else None,
            "completion_tokens": r.usage.completion_tokens if r.usage else None,
            "finish_reason": r.choices[0].finish_reason,
            "content": content,
            **perf,
        }
        self.rows.append(row)
        return content, r.choices[0].finish_reason or "", row


SUMMARY_MAX_CHARS = 160  #: ~20 words; the bound of the "bounded" schema's summary strings


def bounded_schema(n_items: int) -> dict[str, Any]:
    """The summarize schema with the bounds llama.cpp's grammar can enforce: exactly ``n_items`` summaries of
    at most :data:`SUMMARY_MAX_CHARS` characters (OpenAI's strict mode does not accept these keywords)."""
    schema = json.loads(json.dumps(P.SUMMARIZE.schema))
    arr = schema["properties"]["summaries"]
    arr.update(minItems=n_items, maxItems=n_items)
    arr["items"]["properties"]["summary"]["maxLength"] = SUMMARY_MAX_CHARS
    return schema


MODES: dict[str, Any] = {
    "prompt": None,
    "json_object": {"type": "json_object"},
    "json_object_schema": {"type": "json_object", "schema": P.SUMMARIZE.schema},
    "json_object_schema_bounded": lambda n: {"type": "json_object", "schema": bounded_schema(n)},
}


def run_summarize(
    run: Runner, docs: list[tuple[str, str]], batch: int, n_batches: int | None, modes: list[str]
) -> None:
    """The summarize job, ``batch`` entries per request, in each of ``modes`` (keys of :data:`MODES`)."""
    groups = [docs[i : i + batch] for i in range(0, len(docs), batch) if len(docs[i : i + batch]) == batch]
    groups = groups if n_batches is None else groups[:n_batches]
    for mode in modes:
        fmt = MODES[mode](batch) if callable(MODES[mode]) else MODES[mode]
        cond = f"summarize x{batch}, {mode}"
        for g in groups:
            entries = [_entry(i + 1, rel, text) for i, (rel, text) in enumerate(g)]
            messages = [
                {"role": "system", "content": P.SUMMARIZE.system_prompt()},
                {"role": "user", "content": P.user_message("summarize", entries=entries)},
            ]
            content, finish, row = run.ask(cond, messages, MAX_TOKENS_ONE * batch, fmt)
            row.update(kind="json", docs=[rel for rel, _ in g])
            evaluate(row)
            print(
                f"  {cond:<34} {row['latency_s']:7.2f} s  {row['outcome']:<28} {content[:70]!r}", flush=True
            )


def run_plain(run: Runner, docs: list[tuple[str, str]], condition: str = "plain text x1") -> None:
    """A plain-text one-line summary per document (no JSON)."""
    cond = condition
    for rel, text in docs:
        messages = [
            {"role": "system", "content": "You write one-line summaries of documents."},
            {"role": "user", "content": f"{P.excerpt(text)}\n\n{PLAIN_PROMPT}"},
        ]
        content, finish, row = run.ask(cond, messages, MAX_TOKENS_ONE, None)
        row.update(kind="plain", docs=[rel])
        evaluate(row)
        print(f"  {cond:<34} {row['latency_s']:7.2f} s  {row['outcome']:<28} {content[:70]!r}", flush=True)


def run_speed(docs: list[tuple[str, str]], n_docs: int = 3) -> list[dict[str, Any]]:
    """Prompt and generation speed of the plain-text request under three server set-ups: 2 threads with
    OpenMP waiting passively (what :func:`libraryfs.llm.local.start` sets), 2 threads spinning (libgomp's
    default) and 1 thread. One server per set-up, ``n_docs`` documents each."""
    out = []
    for label, threads, policy in (
        ("2 threads, OMP_WAIT_POLICY=PASSIVE", 2, "PASSIVE"),
        ("2 threads, OMP_WAIT_POLICY=ACTIVE", 2, "ACTIVE"),
        ("1 thread", 1, "PASSIVE"),
    ):
        saved = os.environ.get("OMP_WAIT_POLICY")
        os.environ["OMP_WAIT_POLICY"] = policy
        try:
            with local.running(
                threads=threads,
                verbose=True,
                log_path=os.path.join(tempfile.mkdtemp(prefix="local-llm-speed."), "server.log"),
            ) as srv:
                run = Runner(srv)
                run_plain(run, docs[:n_docs], condition=label)
                out.extend(summary(run.rows))
        finally:
            if saved is None:
                os.environ.pop("OMP_WAIT_POLICY", None)
            else:
                os.environ["OMP_WAIT_POLICY"] = saved
    return out


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per condition: requests, latency p50/p95 (s), tokens/s (prompt, generation, end to end), outcomes."""
    out = []
    for cond in dict.fromkeys(r["condition"] for r in rows):
        rs = [r for r in rows if r["condition"] == cond]
        lat = [r["latency_s"] for r in rs]
        cpu = [r["server_cpu_s"] for r in rs if "server_cpu_s" in r]
        p_ms, p_tok = (
            sum(r.get("llama_prompt_ms", 0) for r in rs),
            sum(r.get("llama_prompt_tokens", 0) for r in rs),
        )
        e_ms, e_tok = (
            sum(r.get("llama_eval_ms", 0) for r in rs),
            sum(r.get("llama_eval_tokens", 0) for r in rs),
        )
        sent = sum(r.get("prompt_tokens") or 0 for r in rs)
        c_tok = sum(r.get("completion_tokens") or 0 for r in rs)
        outcomes: dict[str, int] = {}
        for r in rs:
            outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
        items = sum(r.get("items", 1) for r in rs)
        valid = sum(r.get("valid_items", 1 if r["outcome"] == "ok" else 0) for r in rs)
        useful = sum(r.get("useful_items", 1 if r["outcome"] == "ok" else 0) for r in rs)
        out.append(
            {
                "condition": cond,
                "requests": len(rs),
                "latency_p50_s": round(_pct(lat, 0.5), 2),
                "latency_p95_s": round(_pct(lat, 0.95), 2),
                "server_cpu_p50_s": round(_pct(cpu, 0.5), 2) if cpu else None,
                "server_cpu_p95_s": round(_pct(cpu, 0.95), 2) if cpu else None,
                "prompt_tokens_per_request": round(sent / len(rs)),
                "completion_tokens_per_request": round(c_tok / len(rs), 1),
                "prompt_tok_per_s": round(1000 * p_tok / p_ms, 1) if p_ms else None,
                "generation_tok_per_s": round(1000 * e_tok / e_ms, 1) if e_ms else None,
                "end_to_end_completion_tok_per_s": round(c_tok / sum(lat), 2) if lat else None,
                "valid_items": valid,
                "useful_items": useful,
                "items": items,
                "outcomes": outcomes,
            }
        )
    return out


def print_table(result: dict[str, Any]) -> None:
    """The summary table of a result (this run's or a stored one)."""
    lb, la = result["load_average_before"][0], result["load_average_after"][0]
    print(
        f"\n{result['model']}, {result['threads']} threads, n_ctx {result['n_ctx']}, documents of "
        f"{result['doc_bytes']} bytes (python3-doc); load average {lb:.1f} → {la:.1f}\n"
    )
    print(
        f"{'condition':<34} {'req':>4} {'p50 s':>7} {'p95 s':>7} {'cpu p50 s':>9} {'prompt tok':>10} {'out tok':>8} "
        f"{'prompt tok/s':>12} {'gen tok/s':>9} {'valid':>7} {'useful':>7}  outcomes"
    )
    for s in result["summary"] + result["speed"]:
        print(
            f"{s['condition']:<34} {s['requests']:>4} {s['latency_p50_s']:>7.2f} {s['latency_p95_s']:>7.2f} {s.get('server_cpu_p50_s') or 0:>9.2f} "
            f"{s['prompt_tokens_per_request']:>10} {s['completion_tokens_per_request']:>8} "
            f"{s['prompt_tok_per_s'] or 0:>12.1f} {s['generation_tok_per_s'] or 0:>9.1f} "
            f"{s['valid_items']:>3}/{s['items']:<3} {s.get('useful_items', 0):>3}/{s['items']:<3}  "
            + ", ".join(f"{k} {v}" for k, v in sorted(s["outcomes"].items(), key=lambda kv: -kv[1]))
        )


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Run every condition against a freshly started server; the result as written to ``--out`` (also after
    each stage, so an interrupted run keeps what it measured)."""
    docs = documents(max(args.docs, 8 * args.batches))
    result: dict[str, Any] = {
        "model": local.MODEL_NAME,
        "gguf": local.GGUF_FILE,
        "threads": args.threads,
        "n_ctx": local.DEFAULT_N_CTX,
        "doc_bytes": DOC_BYTES,
        "load_average_before": os.getloadavg(),
        "cpu": platform.processor() or platform.machine(),
        "nproc": os.cpu_count(),
        "summary": [],
        "speed": [],
        "requests": [],
    }

    def save() -> None:
        result["load_average_after"] = os.getloadavg()
        result["summary"] = summary(result["requests"])
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1, ensure_ascii=False))

    log_dir = tempfile.mkdtemp(prefix="local-llm-bench.")
    t0 = time.perf_counter()
    with local.running(
        threads=args.threads, verbose=True, log_path=os.path.join(log_dir, "server.log")
    ) as srv:
        result["server_ready_s"] = round(time.perf_counter() - t0, 2)
        print(f"{local.MODEL_NAME} at {srv.base_url}: ready in {result['server_ready_s']} s")
        run = Runner(srv)
        run.rows = result["requests"]
        run_summarize(run, docs[: args.docs], 1, None, args.modes)
        save()
        if args.plain:
            run_plain(run, docs[: args.docs])
            save()
        for mode in args.batch_modes:
            run_summarize(run, docs, 8, args.batches, [mode])
            save()
    if args.speed_docs:
        result["speed"] = run_speed(docs, args.speed_docs)
    save()
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=12, help="documents for the one-per-request conditions")
    ap.add_argument("--batches", type=int, default=2, help="requests of 8 entries per mode")
    ap.add_argument("--threads", type=int, default=local.DEFAULT_THREADS)
    ap.add_argument(
        "--speed-docs",
        type=int,
        default=2,
        help="documents per server set-up in the threads / OpenMP comparison (0: skip it)",
    )
    ap.add_argument(
        "--modes",
        type=lambda v: v.split(","),
        default=list(MODES),
        help=f"answer modes of the summarize job, comma-separated (default: {','.join(MODES)})",
    )
    ap.add_argument(
        "--batch-modes",
        type=lambda v: v.split(",") if v else [],
        default=["json_object_schema", "json_object_schema_bounded"],
        help="answer modes of the batches of 8 (comma-separated; '' skips batches)",
    )
    ap.add_argument("--no-plain", dest="plain", action="store_false", help="skip the plain-text condition")
    ap.add_argument(
        "--from-json",
        metavar="PATH",
        help="re-evaluate the answers stored in a result file instead of measuring",
    )
    ap.add_argument("--out", default="bench/results/local_llm.json")
    args = ap.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)
    if args.from_json:
        result = json.loads(Path(args.from_json).read_text())
        for row in result["requests"]:
            row["condition"] = row["condition"].replace("json_object+schema", "json_object_schema")
            evaluate(row)
        result["summary"] = summary(result["requests"])
        Path(args.out).write_text(json.dumps(result, indent=1, ensure_ascii=False))
    else:
        result = measure(args)
    print_table(result)
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
