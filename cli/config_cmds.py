"""``libraryfs config show``: the effective settings and where each came from, the API key masked."""

from __future__ import annotations

import json
import os
from typing import Any

import click

from libraryfs.cli.common import handle_errors
from libraryfs.cli.options import library_option, llm_field_overrides, llm_options, setting_overrides
from libraryfs.llm.config import CONFIG_FILE, load_config
from libraryfs.settings import load_settings, rows


@click.group("config")
def config_group() -> None:
    """Show settings (mount server, indexer, logging, the LLM endpoint, the MCP server)."""


@config_group.command("show")
@library_option(help_text=f"Library directory whose {CONFIG_FILE} is read (env LIBRARYFS_LIBRARY).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@llm_options
@handle_errors
def show(libdir: str | None, as_json: bool, **kwargs: Any) -> None:
    """Show the effective settings and where each came from (flag > env > config.toml > default). A
    ``--library`` that is neither a library (or its mountpoint) nor a directory holding a config.toml is a
    one-line error (exit 1), not a silent list of defaults."""
    if libdir is not None and not os.path.isfile(os.path.join(libdir, CONFIG_FILE)):
        from libraryfs.cli.common import resolve_libdir

        libdir = resolve_libdir(libdir)  # LibraryMissing (one line) unless it is a library or a mountpoint
    overrides = setting_overrides(kwargs)
    cfg = load_config(libdir, llm_field_overrides(overrides))
    process = load_settings(libdir)
    mcp = load_settings(libdir, tables=("mcp",))
    values = cfg.to_dict(mask=True)
    if as_json:
        doc = {
            "enabled": cfg.enabled,
            "library": os.path.abspath(libdir) if libdir else None,
            "settings": values,
            "sources": cfg.sources,
            "process": {k: {"value": v, "source": src} for k, v, src in rows(process)},
            "mcp": {k: {"value": v, "source": src} for k, v, src in rows(mcp)},
        }
        click.echo(json.dumps(doc, indent=2))
        return
    state = "enabled" if cfg.enabled else "disabled (deterministic builder): set base_url and model"
    click.echo(f"LLM builder: {state}")
    width = max(len(k) for k in values)
    for k, v in values.items():
        shown = "-" if v is None else v
        click.echo(f"  {k:<{width}}  {shown!s:<40}  {cfg.sources.get(k, 'default')}")
    if cfg.sources.get("ignored"):
        click.echo(f"  ignored keys in {CONFIG_FILE}: {cfg.sources['ignored']}")
    for title, loaded in (("mount server, indexer, logging:", process), ("MCP server (libraryfs mcp):", mcp)):
        click.echo(title)
        table = rows(loaded)
        width = max(len(k) for k, _v, _s in table)
        for k, v, src in table:
            click.echo(f"  {k:<{width}}  {'-' if v is None else v!s:<40}  {src}")


commands: list = [config_group]
