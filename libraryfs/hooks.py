"""Feature hooks: how the optional memory kinds (``libraryfs.features.*``) join the core and the daemons
without either importing them.

A feature registers one :class:`Feature` object under the entry point group ``libraryfs.features``
(``pyproject.toml``)::

    [project.entry-points."libraryfs.features"]
    episodes = "libraryfs.features.episodes.feature:FEATURE"

The object names the pip extra that installs the feature's dependencies and the modules that extra
provides (so a command can say which extra is missing, :func:`missing_extra`), and optionally an indexer
hook factory, ``"module:callable"`` — imported only when an indexer starts, called with a
:class:`HookContext`, returning an :class:`IndexerHook` or None (nothing to do in this library). The indexer
daemon calls :meth:`IndexerHook.after_pass` after each of its passes; a hook that writes a derived view
takes that view's writer lock (:func:`libraryfs.layout.view_writer`) so the view has one writer at a time.

Entry points are read once per process, lazily (``libraryfs.cli.main`` does the same for the
``libraryfs.commands`` group). A feature whose extra is missing, or whose hook fails to import, is logged
once and skipped: the filesystem works without it.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from libraryfs.fs.store import Store

log = logging.getLogger("libraryfs.hooks")

GROUP = "libraryfs.features"  #: entry point group of the features


@dataclass(frozen=True)
class Feature:
    """An optional memory kind. ``name``: its command group and package (``episodes``); ``extra``: the pip
    extra installing its dependencies (``libraryfs[episodes]``); ``modules``: top-level modules that extra
    provides; ``indexer_hook``: ``"module:factory"`` of its indexer hook, or None; ``mcp_tools``:
    ``"module:register"`` of its MCP tools, or None (``register(registry)`` is called by ``libraryfs mcp``
    with a :class:`libraryfs.daemon.mcp_registry.ToolRegistry`; the core never imports it)."""

    name: str
    extra: str
    modules: tuple[str, ...] = ()
    indexer_hook: str | None = None
    mcp_tools: str | None = None


@dataclass
class HookContext:
    """What a hook may use: the library directory, the indexer's open store, the mountpoint the library is
    served at (None when the indexer runs without one; hooks that write views write through it so the
    kernel and the journal see them) and ``beat`` — call it during long work (the watchdog's liveness)."""

    libdir: str
    store: Store
    mountpoint: str | None = None
    beat: Callable[[], None] = lambda: None


@dataclass
class HookResult:
    """What one :meth:`IndexerHook.after_pass` did: ``lines`` to log, ``again`` when work is left that it
    could not do now (e.g. its view's writer lock was held by another writer): it is called again after the
    indexer's poll interval, and the indexer does not report ``idle`` until it is done."""

    lines: list[str] = field(default_factory=list)
    again: bool = False


class IndexerHook(Protocol):
    """A feature's work after each indexer pass (derived views built from what the journal brought)."""

    name: str

    def after_pass(self) -> HookResult:
        """Do what the last pass made necessary. Exceptions are logged by the indexer, never fatal."""
        ...

    def close(self) -> None:
        """Release what the hook holds (called once when the indexer stops)."""
        ...


@cache
def features() -> tuple[Feature, ...]:
    """The registered features, by entry point name. A broken registration is logged and left out."""
    from importlib.metadata import entry_points

    out = []
    for ep in sorted(entry_points(group=GROUP), key=lambda e: e.name):
        try:
            obj = ep.load()
        except Exception as e:  # an uninstalled or broken feature must not stop the core
            log.warning("feature %s not loaded: %s", ep.name, e)
            continue
        if isinstance(obj, Feature):
            out.append(obj)
        else:
            log.warning("feature %s: entry point is not a libraryfs.hooks.Feature", ep.name)
    return tuple(out)


def feature(name: str) -> Feature | None:
    """The registered feature called ``name``, or None."""
    return next((f for f in features() if f.name == name), None)


def missing_extra(which: str | Feature) -> str | None:
    """``None`` when the feature (a registered name, or a :class:`Feature`) can run here, else one line
    saying which extra to install (its modules are looked up with ``importlib.util.find_spec``, nothing is
    imported)."""
    f = feature(which) if isinstance(which, str) else which
    if f is None:
        return f"the {which} feature is not installed (pip install 'libraryfs[{which}]')"
    absent = [m for m in f.modules if importlib.util.find_spec(m) is None]
    if not absent:
        return None
    return f"this command needs the {f.extra} extra: pip install 'libraryfs[{f.extra}]' (missing: {', '.join(absent)})"


def indexer_hooks(ctx: HookContext) -> list[IndexerHook]:
    """The indexer hooks of every registered feature that can run here, built for ``ctx``."""
    hooks = []
    for f in features():
        if f.indexer_hook is None:
            continue
        if missing_extra(f):
            log.info("%s: extra %r not installed; its indexer hook is off", f.name, f.extra)
            continue
        module, _, attr = f.indexer_hook.partition(":")
        try:
            factory = getattr(importlib.import_module(module), attr)
            hook = factory(ctx)
        except Exception as e:
            log.warning("%s: indexer hook not started: %s", f.name, e)
            continue
        if hook is not None:
            hooks.append(hook)
    return hooks
