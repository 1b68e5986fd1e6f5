"""``libraryfs code eval``: the router judged on real commits, fitted on the earlier ones (issue 17).

Registered through the ``libraryfs.commands`` entry point ``code.eval`` of the ``libraryfs-bench``
distribution; the tasks come from git checkouts (:mod:`.evalset`) or a tasks file, the fit and the tables
from :mod:`.fit` and :mod:`.report`. Reproducing the figures of docs/code.md:
``libraryfs code eval --from-tasks bench/libraryfs_bench/code/data/realhistory-tasks.jsonl.gz``.
"""

from __future__ import annotations

import json
import os
import time

import click

from libraryfs.cli.common import write_json
from libraryfs_bench.options import out_json_option


@click.command("eval")
@click.argument("checkouts", nargs=-1)
@click.option(
    "--max-commits",
    default=500,
    show_default=True,
    help="Eligible commits per checkout (non-merge, non-root, non-bot): the most recent, or --sample.",
)
@click.option("--since", help="Only commits after this date (git's --since, committer date).")
@click.option("--until", help="Only commits before this date (git's --until).")
@click.option(
    "--sample", is_flag=True, help="Draw --max-commits uniformly at random instead of the most recent."
)
@click.option("--seed", default=0, show_default=True, help="Seed for --sample.")
@click.option(
    "--train-share",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=0.7,
    show_default=True,
    help="Per repository, this share of the tasks (earliest first) is the training split.",
)
@click.option(
    "--no-fit",
    is_flag=True,
    help="Judge the shipped router on every task instead of fitting on the training split.",
)
@click.option(
    "--from-tasks",
    type=click.Path(exists=True, dir_okay=False),
    help="Read tasks written by --tasks-out (no git).",
)
@click.option(
    "--tasks-out", type=click.Path(dir_okay=False), help="Write every task (JSON lines; .gz compresses)."
)
@click.option("--public", is_flag=True, help="--tasks-out without messages and with hashed authors.")
@out_json_option("out_json", help="Write the result as JSON here.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def code_eval(
    checkouts: tuple[str, ...],
    max_commits: int,
    since: str | None,
    until: str | None,
    sample: bool,
    seed: int,
    train_share: float,
    no_fit: bool,
    from_tasks: str | None,
    tasks_out: str | None,
    public: bool,
    out_json: str | None,
    as_json: bool,
) -> None:
    """Route real commits of CHECKOUTS (default: .; PATH@REV pins a commit) and score against the written
    rubric: fit on the earlier tasks of each repository, report the later ones (issue 17)."""
    from libraryfs_bench.code.evalset import RUBRIC, load_tasks, save_tasks

    t0 = time.perf_counter()
    if from_tasks:
        if checkouts:
            raise click.UsageError("give CHECKOUTS or --from-tasks, not both")
        try:
            tasks, counts = load_tasks(from_tasks), {}
        except (OSError, ValueError) as e:
            raise click.ClickException(str(e)) from None
    else:
        tasks, counts = _eval_tasks(checkouts or (".",), max_commits, since, until, sample, seed)
    if tasks_out:
        save_tasks(tasks_out, tasks, public=public)
    result = _eval_result(tasks, counts, train_share, no_fit)
    result["elapsed_s"] = round(time.perf_counter() - t0, 1)
    if as_json:  # stdout stays one JSON document: the file is written without a "wrote" line
        if out_json:
            with open(out_json, "w", encoding="utf-8") as f:
                json.dump(result, f, indent=2)
        click.echo(json.dumps(result, indent=2))
        return
    click.echo(RUBRIC)
    _print_eval(result)
    write_json(out_json, result)


def _eval_tasks(checkouts, max_commits, since, until, sample, seed) -> tuple[list, dict]:
    import subprocess

    from libraryfs_bench.code.evalset import build_tasks

    tasks, counts = [], {}
    for arg in checkouts:
        path, rev = arg, "HEAD"
        if not os.path.isdir(path) and "@" in arg:
            path, rev = arg.rsplit("@", 1)
        if not os.path.isdir(path):
            raise click.ClickException(f"{path}: no such directory")
        try:
            ts, c = build_tasks(
                path, max_commits, since=since, until=until, sample=sample, seed=seed, rev=rev
            )
        except subprocess.CalledProcessError as e:
            raise click.ClickException(
                f"{arg}: not a git repository or unknown revision ({e.stderr.decode(errors='replace').strip()})"
            ) from None
        tasks += ts
        counts[os.path.abspath(path)] = c
    return tasks, counts


def _eval_result(tasks: list, counts: dict, train_share: float, no_fit: bool) -> dict:
    from libraryfs.features.code.footprint import MODEL
    from libraryfs.features.code.router import THRESHOLDS
    from libraryfs_bench.code.fit import evaluate, fit, time_split

    result: dict = {"counts": counts, "n": len(tasks)}
    if not tasks:
        return result
    if no_fit:
        result["all"] = evaluate(tasks, tasks, MODEL, THRESHOLDS)
        result["parameters"] = {"model": MODEL.as_dict(), "thresholds": THRESHOLDS.as_dict(), "fitted": False}
        return result
    train, held = time_split(tasks, train_share)
    if not train or not held:
        raise click.ClickException("too few tasks for a training and a held-out split")
    f = fit(train)
    result["split"] = {
        "train_share": train_share,
        "train": len(train),
        "held_out": len(held),
        "per_repo": {
            r: {
                "train": sum(t.repo == r for t in train),
                "held_out": sum(t.repo == r for t in held),
                "held_out_from": min((t.commit_time_s for t in held if t.repo == r), default=None),
            }
            for r in sorted({t.repo for t in tasks})
        },
    }
    result["parameters"] = f.as_dict() | {"fitted": True}
    result["train"] = evaluate(train, train, f.model, f.thresholds)
    result["held_out"] = evaluate(held, train, f.model, f.thresholds)
    return result


def _print_eval(result: dict) -> None:
    from libraryfs_bench.code.report import format_counts, format_evaluation

    for line in format_counts(result["counts"]):
        click.echo(line)
    if not result["n"]:
        click.echo("no tasks: the history has no eligible commit that changes code")
        return
    p = result["parameters"]
    click.echo("")
    click.echo(
        f"parameters ({'fitted on the training split' if p['fitted'] else 'shipped'}): "
        f"weights {p['model']['weights']}, size weights {p['model']['size_weights']}, thresholds {p['thresholds']}"
    )
    if "all" in result:
        click.echo("\n".join(format_evaluation(f"all {result['n']} tasks (shipped router)", result["all"])))
    else:
        s = result["split"]
        per = ", ".join(f"{r} {v['train']}/{v['held_out']}" for r, v in s["per_repo"].items())
        click.echo(
            f"split: {s['train']} training / {s['held_out']} held-out tasks (train/held-out per repo: {per})"
        )
        click.echo("")
        click.echo(
            "\n".join(format_evaluation(f"HELD-OUT ({s['held_out']} later tasks)", result["held_out"]))
        )
        click.echo("")
        click.echo(
            "\n".join(format_evaluation(f"training split ({s['train']} tasks, fitted on)", result["train"]))
        )
    click.echo(f"{result['elapsed_s']} s")
