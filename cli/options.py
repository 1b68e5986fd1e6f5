"""The command-line options every command shares, built once: the library argument/option, the card/code
tree options, and a flag for each setting of :data:`libraryfs.settings.SPEC` (``--read-only``,
``--poll-s``, ``--llm-base-url``, …) so that flags take precedence over environment and file.

Usage::

    @click.command()
    @library_argument
    @setting_options("index.poll_s", "log.level")
    @llm_options
    def cmd(libdir, **kwargs):
        overrides = setting_overrides(kwargs)      # {"index.poll_s": 0.5, "llm.model": "m", ...}

A setting's older flag spellings (``--base-url``, ``--model``, ``--api-key``) still work but are hidden and
print one deprecation line on stderr.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

# libraryfs.settings (the settings table, tomllib, the layout module) is imported where a setting flag is
# built or read: ``find``/``status``/``recall`` take none, and a fresh process of theirs need not load it.

F = Callable[..., Any]
_PREFIX = "setting__"  #: parameter names of setting flags: setting__<table>__<name>[__alias<k>]
_CLICK_TYPES = {"float": float, "int": int}
#: The API key has no flag of its own (it would show in the process list): only the old ``--api-key``.
API_KEY_ALIAS = "--api-key"


class UntouchedPath(click.Path):
    """``click.Path`` that never ``stat``s a mountpoint listed in ``/proc/mounts``: the ``stat`` of a mount
    whose server is stopped (SIGSTOP) waits until it runs again, and ``status``/``umount`` must say so
    instead (:func:`libraryfs.layout.stopped_server`). Other paths are checked as ``click.Path`` does."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """``value`` unchecked when it names a mountpoint (found without touching it), else ``click.Path``'s
        check; raises what ``click.Path`` raises (a usage error, exit status 2), also for an empty path."""
        from libraryfs.layout import proc_mount

        if value == "":  # os.path.abspath("") is the working directory: never what an empty $VAR meant
            self.fail("the path is empty", param, ctx)
        if isinstance(value, str) and proc_mount(value) is not None:
            return value
        return super().convert(value, param, ctx)


class FiniteFloat(click.FloatRange):
    """``click.FloatRange`` that also refuses ``nan`` and ``inf`` (``float()`` parses both, and a range
    check passes ``nan``): a usage error, exit status 2, as for ``abc``. Before, ``episode watch --interval
    nan`` ended in a ``time.sleep`` traceback."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """The float ``value``, range-checked; raises a usage error for a non-number, ``nan``, ``±inf``, or
        one out of range."""
        import math

        out = super().convert(value, param, ctx)
        if not math.isfinite(out):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return out


def library_argument(f: F) -> F:
    """``LIBDIR`` argument (defaults to ``$LIBRARYFS_LIBRARY``); a mountpoint given instead is not touched."""
    return click.argument("libdir", type=UntouchedPath(file_okay=False), envvar="LIBRARYFS_LIBRARY")(f)


def library_option(
    required: bool = False, dest: str = "libdir", help_text: str | None = None
) -> Callable[[F], F]:
    """``--library DIR`` (defaults to ``$LIBRARYFS_LIBRARY``), passed as ``dest``."""
    return click.option(
        "--library",
        dest,
        envvar="LIBRARYFS_LIBRARY",
        required=required,
        type=click.Path(file_okay=False),
        default=None,
        help=help_text or "Library directory (env LIBRARYFS_LIBRARY).",
    )


def tree_options(f: F) -> F:
    """``--library DIR`` (``library_dir``) and ``--tree DIR`` (``tree_dir``): where a feature writes —
    a library (through its mount when mounted) or a plain directory (a mountpoint, or any directory)."""
    f = click.option(
        "--tree",
        "tree_dir",
        type=click.Path(file_okay=False),
        help="A plain directory instead of a library (e.g. a mountpoint).",
    )(f)
    return library_option(dest="library_dir")(f)


def _param(key: str, alias: int | None = None) -> str:
    base = _PREFIX + key.replace(".", "__")
    return base if alias is None else f"{base}__alias{alias}"


def setting_options(*keys: str) -> Callable[[F], F]:
    """Decorator adding the flag of each dotted setting key (and its hidden older spellings); read the
    values with :func:`setting_overrides`. A boolean setting is a plain flag (absent: not given)."""

    def deco(f: F) -> F:
        """Add the click options of ``keys`` to command function ``f`` (in order in ``--help``); raises
        ``ValueError`` for a key without a flag."""
        from libraryfs.settings import SPEC, env_var

        for key in reversed(keys):
            spec = SPEC[key]
            if spec.flag is None:
                raise ValueError(f"setting {key} has no flag")
            names = [(spec.flag, _param(key), False)]
            names += [(a, _param(key, k), True) for k, a in enumerate(spec.aliases)]
            for flag, param, hidden in reversed(names):
                kw: dict[str, Any] = {"default": None, "hidden": hidden, "metavar": spec.metavar}
                if spec.kind == "bool":
                    kw["is_flag"] = True
                else:
                    kw["type"] = _CLICK_TYPES.get(spec.kind, str)
                help_ = f"{spec.doc[:1].upper()}{spec.doc[1:]} (overrides {env_var(key)} and config.toml)."
                f = click.option(flag, param, help=help_, callback=_checked(key), **kw)(f)
        return f

    return deco


def _checked(key: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A click callback checking a setting flag's value with :func:`~libraryfs.settings.coerce` as the
    command line is parsed, before anything starts: a bad value is ``click.BadParameter`` (a usage error,
    exit status 2). The value is passed on as given (the settings loader converts it)."""

    def check(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        """Raise ``click.BadParameter`` unless ``value`` is a valid value of setting ``key``."""
        from libraryfs.settings import SPEC, SettingsError, coerce

        if value is not None and key in SPEC:
            try:
                coerce(key, value, "flag")
            except SettingsError as e:
                raise click.BadParameter(str(e).removeprefix(f"{key} from flag: ")) from None
        return value

    return check


def _checked_timeouts(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """Click callback of ``--timeouts``: :func:`~libraryfs.settings.parse_timeouts` as the command line is
    parsed; a bad value is ``click.BadParameter`` (exit status 2)."""
    from libraryfs.settings import SettingsError, parse_timeouts

    try:
        parse_timeouts(value)
    except SettingsError as e:
        raise click.BadParameter(str(e)) from None
    return value


def checked_store_url(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Click callback of ``--store URL``: :func:`~libraryfs.fs.etcd_backend.parse_url` as the command line
    is parsed, before anything is made; a bad URL is ``click.BadParameter`` (exit status 2)."""
    if value is None:
        return None
    from libraryfs.errors import InvalidArgument
    from libraryfs.fs.etcd_backend import parse_url

    try:
        parse_url(value)
    except InvalidArgument as e:
        raise click.BadParameter(str(e)) from None
    return value


def timeouts_option(f: F) -> F:
    """``--timeouts E,A,N``: the three kernel cache timeouts (seconds) in one flag."""
    return click.option(
        "--timeouts",
        _PREFIX + "timeouts",
        default=None,
        metavar="E,A,N",
        callback=_checked_timeouts,
        help="Kernel cache timeouts in seconds: entry, attribute, negative lookup [default: config.toml / 1,1,1].",
    )(f)


def setting_overrides(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``{dotted key: value}`` of the setting flags given in a command's ``kwargs`` (their parameters are
    popped). An older spelling counts when the new one is absent and prints a deprecation line. Raises
    :class:`~libraryfs.settings.SettingsError` on a bad ``--timeouts``."""
    from libraryfs.settings import SPEC, parse_timeouts

    out: dict[str, Any] = {}
    for param in sorted(p for p in kwargs if p.startswith(_PREFIX)):
        value = kwargs.pop(param)
        rest = param[len(_PREFIX) :]
        if rest == "timeouts":
            out.update({k: v for k, v in parse_timeouts(value).items() if v is not None})
            continue
        if rest == "api_key":
            key, alias = "llm.api_key", API_KEY_ALIAS
        else:
            table, name, *tail = rest.split("__")
            key = f"{table}.{name}"
            alias = SPEC[key].aliases[int(tail[0][5:])] if tail else None
        if value is None:
            continue
        if alias is not None:
            new = SPEC[key].flag if key in SPEC else "LIBRARYFS_LLM_API_KEY"
            click.echo(f"libraryfs: {alias} is deprecated; use {new}", err=True)
            if out.get(key) is not None:
                continue
        out[key] = value
    return out


def llm_flag_keys() -> tuple[str, ...]:
    """The dotted keys of the ``llm.*`` settings that have a flag, in the settings table's order."""
    from libraryfs.settings import SPEC

    return tuple(k for k in SPEC if k.startswith("llm.") and SPEC[k].flag)


def api_key_option(f: F) -> F:
    """The hidden, deprecated ``--api-key`` (``llm.api_key``): a key on the command line shows in the
    process list; ``LIBRARYFS_LLM_API_KEY`` is the way to give it."""
    return click.option(API_KEY_ALIAS, _PREFIX + "api_key", default=None, hidden=True)(f)


def llm_options(f: F) -> F:
    """The LLM endpoint flags: ``--llm-base-url``, ``--llm-model``, ``--llm-timeout-s``,
    ``--llm-max-concurrency``, ``--llm-max-requests-per-hour``, ``--llm-max-tokens-per-hour``,
    ``--llm-batch-size``; hidden older spellings ``--base-url``, ``--model`` and ``--api-key``."""
    return setting_options(*llm_flag_keys())(api_key_option(f))


def llm_switch(f: F) -> F:
    """``--llm/--no-llm`` (``llm``: True, False, or None = use the LLM when one is configured)."""
    return click.option("--llm/--no-llm", default=None, help="Use (or not) the configured LLM endpoint.")(f)


def llm_field_overrides(overrides: dict[str, Any]) -> dict[str, Any]:
    """The ``llm.*`` entries of ``overrides`` keyed by :class:`~libraryfs.llm.config.LLMConfig` field."""
    return {k.split(".", 1)[1]: v for k, v in overrides.items() if k.startswith("llm.")}
