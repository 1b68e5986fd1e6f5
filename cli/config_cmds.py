"""``libraryfs config show``: the effective LLM settings, where each came from, the API key masked.

Also exports :func:`llm_options` / :func:`llm_overrides`, the ``--llm-*`` flags that other commands
(``mount``, ``indexer``, ``index``) can add so flags take precedence over environment and file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import click

from libraryfs.llm.config import CONFIG_FILE, ENV_VARS, ConfigError, load_config

#: flag name -> LLMConfig field
_FLAGS: dict[str, tuple[str, type]] = {
    "llm_base_url": ("base_url", str),
    "llm_model": ("model", str),
    "llm_timeout_s": ("timeout_s", float),
    "llm_max_concurrency": ("max_concurrency", int),
    "llm_max_requests_per_hour": ("max_requests_per_hour", int),
    "llm_max_tokens_per_hour": ("max_tokens_per_hour", int),
    "llm_batch_size": ("batch_size", int),
}


def llm_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--llm-base-url``, ``--llm-model``, ``--llm-timeout-s``, ``--llm-max-concurrency``,
    ``--llm-max-requests-per-hour``, ``--llm-max-tokens-per-hour`` and ``--llm-batch-size`` to a command;
    turn the values into overrides with :func:`llm_overrides`. (The API key has no flag: it would show
    in the process list; use ``LIBRARYFS_LLM_API_KEY``.)"""
    for flag, (field, typ) in reversed(list(_FLAGS.items())):
        f = click.option(
            "--" + flag.replace("_", "-"),
            flag,
            type=typ,
            default=None,
            help=f"LLM {field} (overrides {ENV_VARS.get(field, 'config.toml')}).",
        )(f)
    return f


def llm_overrides(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``{LLMConfig field: value}`` for the ``--llm-*`` flags given in a command's ``kwargs`` (pops them)."""
    out = {}
    for flag, (field, _typ) in _FLAGS.items():
        v = kwargs.pop(flag, None)
        if v is not None:
            out[field] = v
    return out


@click.group("config")
def config_group() -> None:
    """Show settings (the LLM endpoint used by the indexer)."""


@config_group.command("show")
@click.option(
    "--library",
    "libdir",
    type=click.Path(file_okay=False),
    default=None,
    envvar="LIBRARYFS_LIBRARY",
    help=f"Library directory whose {CONFIG_FILE} [llm] is read.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@llm_options
def show(libdir: str | None, as_json: bool, **kwargs: Any) -> None:
    """Show the effective LLM settings and where each came from (flag > env > config.toml > default)."""
    try:
        cfg = load_config(libdir, llm_overrides(kwargs))
    except ConfigError as e:
        raise click.ClickException(str(e)) from None
    values = cfg.to_dict(mask=True)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "enabled": cfg.enabled,
                    "library": os.path.abspath(libdir) if libdir else None,
                    "settings": values,
                    "sources": cfg.sources,
                },
                indent=2,
            )
        )
        return
    state = "enabled" if cfg.enabled else "disabled (deterministic builder): set base_url and model"
    click.echo(f"LLM builder: {state}")
    width = max(len(k) for k in values)
    for k, v in values.items():
        shown = "-" if v is None else v
        click.echo(f"  {k:<{width}}  {shown!s:<40}  {cfg.sources.get(k, 'default')}")
    if cfg.sources.get("ignored"):
        click.echo(f"  ignored keys in {CONFIG_FILE}: {cfg.sources['ignored']}")


commands: list = [config_group]
