"""Click options shared by the ``libraryfs-bench`` commands: one definition of each, so that the same option
reads the same in every benchmark's ``--help``. The library's own options (tree, LLM settings) are in
:mod:`libraryfs.cli.options`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def out_json_option(dest: str = "out", help: str = "Write the result JSON here.") -> Decorator:
    """``--out FILE`` (passed as ``dest``, default None): where the command writes its result as JSON."""
    return click.option("--out", dest, type=click.Path(dir_okay=False), default=None, help=help)


def out_dir_option(default: str, contents: str) -> Decorator:
    """``--out DIR`` (passed as ``out_dir``): the output directory, ``default`` shown; ``contents`` names
    what is written there (``"JSONL, JSON, PNG"``)."""
    return click.option(
        "--out",
        "out_dir",
        type=click.Path(file_okay=False),
        default=default,
        show_default=True,
        help=f"Output directory ({contents}).",
    )


#: ``--no-plots``: skip the PNG plots (passed as ``no_plots``).
no_plots_option: Decorator = click.option("--no-plots", is_flag=True, help="Skip the PNG plots.")


def local_model_option(help: str) -> Decorator:
    """``--local-model`` (a flag, passed as ``local_model``): serve libraryfs's real local model
    (``libraryfs[llm-local]``) for the run; ``help`` says what it is used for."""
    return click.option("--local-model", is_flag=True, help=help)
