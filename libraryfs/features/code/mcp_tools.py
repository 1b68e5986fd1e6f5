"""The code index's MCP tools (registered through ``Feature.mcp_tools``; ``libraryfs mcp``):
``code_outline`` (a source file's SYMBOLS.md from the code index) and ``budget_verify``
(VERIFYCONSERVATION of a delegation plan, :func:`libraryfs.features.code.budget.verify_plan`)."""

from __future__ import annotations

import json
from typing import Any


def register(reg: Any) -> None:
    """Add ``code_outline`` and ``budget_verify`` to ``reg`` (a :class:`libraryfs.daemon.mcp_registry.ToolRegistry`)."""

    def code_outline(repo: str, file: str) -> Any:
        """Outline of one source file of an indexed repository (`libraryfs code add`): its symbols with
        kind, lines, signature and summary, its imports and importers (code/<repo>/<file>/SYMBOLS.md)."""
        from libraryfs.errors import NotFound
        from libraryfs.features.code.render import file_dir

        rel = reg.path(f"{file_dir(repo, file)}/SYMBOLS.md")  # confined like every path
        try:
            data = reg.ops.read(rel)
        except NotFound:
            raise ValueError(f"no outline for {file!r} in repository {repo!r}") from None
        text, cut = reg.budget.fit(data.decode("utf-8", "replace"))
        if cut:
            text += f"\n[libraryfs: truncated; call read_text_file path={rel.decode()} offset={len(text.encode())}]"
        return reg.result(text, repo=repo, file=file, path=rel.decode(), truncated=cut)

    def budget_verify(plan: dict[str, Any] | None = None, path: str | None = None) -> Any:
        """Check that a delegation plan conserves its budget (VERIFYCONSERVATION): give the plan as an
        object ({"budget"?, "nodes": [{"id", "budget", "cost", "children"}]}) or a library path to a
        .json/.yaml plan. Returns ok and every violation (node, dimension, need, have)."""
        from libraryfs.features.code.budget import verify_plan

        if (plan is None) == (path is None):
            raise ValueError("give exactly one of plan and path")
        if path is not None:
            from libraryfs.errors import LibraryError

            rel = reg.path(path)
            try:
                raw = reg.ops.read(rel).decode("utf-8")
            except LibraryError as e:  # ENOENT: /etc/passwd: … — the path is the library's, not this host's
                raise reg.at_path(e, rel) from None
            if path.endswith((".yaml", ".yml")):
                import yaml

                plan = yaml.safe_load(raw) or {}
            else:
                plan = json.loads(raw)
        r = verify_plan(plan)
        doc = r.to_json()
        if r.ok:
            text = f"plan conserves its budget: {r.n_nodes} nodes, {r.n_edges} edges, roots: {', '.join(r.roots)}"
        else:
            text = "plan rejected:\n" + "\n".join(v["message"] for v in doc["violations"])
        return reg.result(text, **doc)

    reg.add(code_outline, "code_outline", "Outline of a source file (code index)", reg.READ)
    reg.add(budget_verify, "budget_verify", "Verify a delegation plan's budget", reg.READ)
