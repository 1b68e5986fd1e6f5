"""Real trajectories from the ``crafter`` environment: seeded rollouts of a simple survival policy.

Each step of a rollout becomes one JSON-ready record — what an agent would append to
``episodes/<id>/steps.jsonl`` (the input contract of :mod:`libraryfs.features.episodes.units`)::

    {"t": 412, "action": "do", "position": [34, 40],
     "place": "zone-2-2", "area": "forest",                          # two location labels
     "facing": "tree", "nearby": ["cow", "tree", "water"],            # salient things within 2 cells
     "inventory": {"wood": 2, "sapling": 1},                          # items > 0 (no vitals)
     "inventory_delta": {"wood": 1},                                  # change since the previous step
     "vitals": {"health": 9, "food": 7, "drink": 6, "energy": 8},
     "vitals_delta": {"food": -1},
     "achievements": ["collect_wood"],                                # unlocked/incremented this step
     "observation": "I hit the tree in the forest and collected wood; ...",   # one free-text sentence
     "text": "Step 412: action do. At (34, 40) in zone-2-2, area forest. ...",  # the raw log line
     "sleeping": false, "life": 1}

Everything comes from Crafter itself: ``info["inventory"]``, ``info["achievements"]`` (counts, diffed step to
step), ``info["player_pos"]``, ``info["semantic"]`` (the 64×64 map of material and creature ids) for
``nearby``, and the world's material map for ``area``; ``facing`` reads the player's facing cell from the
world (``env._player.facing``, a private attribute: Crafter's info does not expose it). ``place`` is the
16×16-cell zone of the position; ``area`` names the terrain around the player (7×7 cells: forest, lake
shore, mountain, cave, grassland — see :func:`area_of`), with hysteresis so that it does not flicker at a
border. Deltas are exact differences to the previous step's record (also at a respawn, when the inventory
is lost and the vitals reset). Step 0 is the state after ``reset`` (action ``"start"``).

The policy (``survivor``) drinks when thirsty, eats cows when hungry, sleeps when tired, fights adjacent
zombies, gathers wood, places a table, crafts pickaxes/swords, mines stone and coal, and otherwise explores
with momentum; 10 % of its actions are random. It is seeded: one seed, one trajectory.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

ZONE_CELLS = 16  #: cells per side of a place zone
NEARBY_CELLS = 2  #: Chebyshev radius (cells) of "nearby"
GROUND = {"grass", "sand", "path"}  #: materials that are not salient
VITALS = ("health", "food", "drink", "energy")
DIRS = {"move_left": (-1, 0), "move_right": (1, 0), "move_up": (0, -1), "move_down": (0, 1)}
POLICY_VERSION = "v2"
#: seeds of the evaluation episodes start here: disjoint from the seeds used while the parser was written
#: (0–9 in the earlier benchmark and the tests, 500–502 for development)
EVAL_FIRST_SEED = 1000
DEV_FIRST_SEED = 500  #: bump when the records change: cached rollouts are keyed by it
AREA_CELLS = 3  #: Chebyshev radius (cells) of the terrain window that names the area
#: area → (materials that count for it, share of the window needed to enter it)
AREAS = {
    "cave": ({"path", "lava"}, 0.25),
    "mountain": ({"stone", "coal", "iron", "diamond"}, 0.35),
    "lake shore": ({"water"}, 0.15),
    "forest": ({"tree"}, 0.2),
}
AREA_KEEP = 0.6  #: the current area is kept while its share stays above AREA_KEEP × its entry share


def zone_of(x: int, y: int) -> str:
    """Place name of a cell: ``zone-<x // 16>-<y // 16>``."""
    return f"zone-{x // ZONE_CELLS}-{y // ZONE_CELLS}"


def _id_names(env: Any) -> dict[int, str]:
    names = {i: n for n, i in env._world._mat_ids.items() if n}
    names.update({i: c.__name__.lower() for c, i in env._sem_view._obj_ids.items()})
    return names


def area_of(mats: dict[str, float], prev: str | None) -> str:
    """The area label of a terrain window given each material's share ``mats`` (0..1) and the previous
    area: the area whose materials exceed their entry share by the largest ratio, else ``grassland``;
    the previous area is kept while its share stays above :data:`AREA_KEEP` × its entry share."""
    share = {a: sum(mats.get(m, 0.0) for m in ms) for a, (ms, _) in AREAS.items()}
    if prev in AREAS and share[prev] >= AREA_KEEP * AREAS[prev][1]:
        return prev
    best = max(AREAS, key=lambda a: (share[a] / AREAS[a][1], a))
    return best if share[best] >= AREAS[best][1] else "grassland"


def _delta_phrase(delta: dict[str, int]) -> str:
    return ", ".join(f"{k} {'+' if v > 0 else ''}{v}" for k, v in sorted(delta.items()))


def observation(rec: dict) -> str:
    """One free-text sentence of what the agent saw and did (deterministic; the wording varies by step)."""
    a, area, face = rec["action"], rec["area"], rec["facing"]
    verb = {
        "do": f"I hit the {face}",
        "noop": "I waited",
        "sleep": "I slept",
        "start": "I woke up in a new world",
        "respawn": "I came back to life",
    }.get(a, f"I moved {a[5:]}" if a.startswith("move_") else f"I tried to {a.replace('_', ' ')}")
    parts = [f"{verb} in the {area}" if rec["t"] % 2 else f"{verb}, standing in the {area}"]
    near = [n for n in rec["nearby"] if n != face]
    if near:
        names = " and ".join(near[:3])
        parts.append(f"with {names} around" if rec["t"] % 3 else f"close to {names}")
    for e in rec["achievements"]:
        parts.append(e.replace("_", " ") if e != "died" else "then I died")
    up = [k for k, v in rec["inventory_delta"].items() if v > 0]
    down = [k for k, v in rec["inventory_delta"].items() if v < 0]
    if up:
        parts.append("my " + " and ".join(up) + " went up")
    if down:
        parts.append("I used up some " + " and ".join(down))
    for k, v in sorted(rec["vitals_delta"].items()):
        parts.append(f"my {k} {'rose' if v > 0 else 'fell'} to {rec['vitals'][k]}")
    return "; ".join(parts) + "."


def step_text(rec: dict) -> str:
    """The free-text line of a step (what an agent would log; the flat-history baselines read this)."""
    x, y = rec["position"]
    parts = [
        f"Step {rec['t']}: action {rec['action']}. At ({x}, {y}) in {rec['place']}, area {rec['area']}.",
        f"Facing {rec['facing']}.",
    ]
    if rec["nearby"]:
        parts.append("Nearby: " + ", ".join(rec["nearby"]) + ".")
    if rec["achievements"]:
        parts.append("Events: " + ", ".join(rec["achievements"]) + ".")
    if rec["inventory_delta"]:
        parts.append("Inventory change: " + _delta_phrase(rec["inventory_delta"]) + ".")
    if rec["vitals_delta"]:
        parts.append("Vitals change: " + _delta_phrase(rec["vitals_delta"]) + ".")
    inv = ", ".join(f"{k} {v}" for k, v in sorted(rec["inventory"].items())) or "empty"
    parts.append(f"Inventory: {inv}.")
    v = rec["vitals"]
    parts.append(f"Health {v['health']}, food {v['food']}, drink {v['drink']}, energy {v['energy']}.")
    if rec.get("sleeping"):
        parts.append("Sleeping.")
    return " ".join(parts)


class SurvivorPolicy:
    """A seeded heuristic Crafter policy that survives long enough for ≥ 1,000-step episodes."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.heading = "move_right"

    def _toward(self, pos: np.ndarray, target: tuple[int, int]) -> str:
        dx, dy = target[0] - pos[0], target[1] - pos[1]
        if abs(dx) >= abs(dy) and dx:
            return "move_right" if dx > 0 else "move_left"
        return "move_down" if dy > 0 else "move_up"

    def _nearest(self, sem: np.ndarray, pos: np.ndarray, ids: list[int], radius: int = 6):
        x0, y0 = int(pos[0]), int(pos[1])
        best = None
        for i in ids:
            xs, ys = np.nonzero(
                sem[max(0, x0 - radius) : x0 + radius + 1, max(0, y0 - radius) : y0 + radius + 1] == i
            )
            for x, y in zip(xs + max(0, x0 - radius), ys + max(0, y0 - radius), strict=False):
                d = abs(int(x) - x0) + abs(int(y) - y0)
                if d and (best is None or d < best[0]):
                    best = (d, (int(x), int(y)))
        return best

    def act(self, env: Any, info: dict, ids: dict[str, int]) -> str:
        """Next action name for the current state (``info`` from the last step)."""
        inv, sem, pos = info["inventory"], info["semantic"], info["player_pos"]
        face = env._player.facing
        facing_cell = (int(pos[0] + face[0]), int(pos[1] + face[1]))
        if env._player.sleeping:
            return "noop"
        if self.rng.random() < 0.10:
            return str(self.rng.choice(list(DIRS) + ["do", "noop"]))

        def go_do(names: list[str], radius: int = 6) -> str | None:
            hit = self._nearest(sem, pos, [ids[n] for n in names if n in ids], radius)
            if not hit:
                return None
            d, cell = hit
            if d == 1:
                return "do" if cell == facing_cell else self._toward(pos, cell)
            return self._toward(pos, cell)

        zombie = self._nearest(sem, pos, [ids["zombie"]], 1)
        if zombie:
            return "do" if zombie[1] == facing_cell else self._toward(pos, zombie[1])
        if inv["energy"] < 3:
            return "sleep"
        if inv["drink"] < 5 and (a := go_do(["water"])):
            return a
        if inv["food"] < 5 and (a := go_do(["cow"])):
            return a
        near1 = {n for n in (self._nearby_names(sem, pos, ids, 1))}
        if "table" in near1:
            for tool, need in (
                ("wood_pickaxe", {"wood": 1}),
                ("stone_pickaxe", {"wood": 1, "stone": 1}),
                ("wood_sword", {"wood": 1}),
                ("stone_sword", {"wood": 1, "stone": 1}),
            ):
                if not inv[tool] and all(inv[k] >= v for k, v in need.items()):
                    return f"make_{tool}"
        if inv["wood"] >= 3 and not self._nearest(sem, pos, [ids["table"]], 8):
            return "place_table"
        if inv["sapling"] and self.rng.random() < 0.2:
            return "place_plant"
        r = self.rng.random()
        if inv["wood_pickaxe"] and r < 0.5 and (a := go_do(["coal", "stone"], 4)):
            return a
        if inv["wood"] < 6 and r < 0.7 and (a := go_do(["tree"], 4)):
            return a
        if self.rng.random() < 0.15:
            self.heading = str(self.rng.choice(list(DIRS)))
        return self.heading

    @staticmethod
    def _nearby_names(sem: np.ndarray, pos: np.ndarray, ids: dict[str, int], radius: int) -> list[str]:
        names = {i: n for n, i in ids.items()}
        x0, y0 = int(pos[0]), int(pos[1])
        win = sem[max(0, x0 - radius) : x0 + radius + 1, max(0, y0 - radius) : y0 + radius + 1]
        return [names.get(int(i), "") for i in np.unique(win)]


def rollout(seed: int, max_steps: int = 1500) -> list[dict]:
    """One seeded Crafter run of ``max_steps + 1`` step records (see module doc).

    The agent's episode is its whole run: when the player dies (health 0) the step carries the event
    ``"died"`` (not a Crafter achievement) and the next step is ``"respawn"`` into Crafter's next world
    (``env.reset()``); ``life`` counts the lives. Raises ``ImportError`` when ``crafter`` is missing.

    Crafter's chunk balancing iterates Python sets of objects, so a seed is not bit-reproducible across
    processes; :func:`load_rollout` caches the records so that a dataset stays fixed.
    """
    import crafter

    env = crafter.Env(seed=seed, length=None)
    env._obs = lambda: None  # skip rendering pixels: the records use info and the world only
    env.reset()
    id_names = _id_names(env)
    ids = {n: i for i, n in id_names.items()}
    actions = list(env.action_names)
    policy = SurvivorPolicy(seed)
    _, _, done, info = env.step(0)  # a noop to obtain info; recorded as step 0 ("start")
    records: list[dict] = []
    prev_ach: dict[str, int] = {k: 0 for k in info["achievements"]}
    prev: dict | None = None
    action, life = "start", 1
    for t in range(max_steps + 1):
        rec = _record(env, info, t, action, id_names, prev_ach, prev)
        rec["life"] = life
        if done:
            rec["achievements"].append("died")
            rec["observation"] = observation(rec)
            rec["text"] = step_text(rec)
        records.append(rec)
        prev = rec
        prev_ach = dict(info["achievements"])
        if done:
            env.reset()
            _, _, done, info = env.step(0)
            action, life = "respawn", life + 1
            prev_ach = {k: 0 for k in info["achievements"]}
            continue
        action = policy.act(env, info, ids)
        _, _, done, info = env.step(actions.index(action))
    return records


def _terrain(env: Any, x: int, y: int) -> dict[str, float]:
    """Share of each material in the (2·AREA_CELLS+1)² window around (x, y) (cells off the map excluded)."""
    mats = env._world._mat_map
    names = {i: n for n, i in env._world._mat_ids.items() if n}
    r = AREA_CELLS
    win = mats[max(0, x - r) : x + r + 1, max(0, y - r) : y + r + 1]
    ids, counts = np.unique(win, return_counts=True)
    total = float(counts.sum())
    return {names.get(int(i), "none"): float(c) / total for i, c in zip(ids, counts, strict=True)}


def _diff(old: dict[str, int], new: dict[str, int]) -> dict[str, int]:
    return {
        k: new.get(k, 0) - old.get(k, 0)
        for k in sorted(set(old) | set(new))
        if new.get(k, 0) != old.get(k, 0)
    }


def _record(
    env: Any,
    info: dict,
    t: int,
    action: str,
    id_names: dict[int, str],
    prev_ach: dict[str, int],
    prev: dict | None,
) -> dict:
    x, y = (int(v) for v in info["player_pos"])
    sem = info["semantic"]
    win = sem[
        max(0, x - NEARBY_CELLS) : x + NEARBY_CELLS + 1, max(0, y - NEARBY_CELLS) : y + NEARBY_CELLS + 1
    ]
    nearby = sorted({id_names.get(int(i), "unknown") for i in np.unique(win)} - GROUND - {"player"})
    fx, fy = x + int(env._player.facing[0]), y + int(env._player.facing[1])
    mat, obj = env._world[(fx, fy)]
    facing = type(obj).__name__.lower() if obj else (mat or "edge")
    inv = {k: int(v) for k, v in info["inventory"].items() if k not in VITALS and v > 0}
    vitals = {k: int(info["inventory"][k]) for k in VITALS}
    ach = [k for k, v in sorted(info["achievements"].items()) if v > prev_ach.get(k, 0)] if t else []
    # "wake_up" of a fresh world is counted by Crafter at reset; it is not an event of this step
    ach = [a for a in ach if not (action == "respawn" and a == "wake_up")]
    rec = {
        "t": t,
        "action": action,
        "position": [x, y],
        "place": zone_of(x, y),
        "area": area_of(_terrain(env, x, y), prev["area"] if prev else None),
        "facing": facing,
        "nearby": nearby,
        "inventory": inv,
        "inventory_delta": _diff(prev["inventory"], inv) if prev else {},
        "vitals": vitals,
        "vitals_delta": _diff(prev["vitals"], vitals) if prev else {},
        "achievements": ach,
        "sleeping": bool(env._player.sleeping),
    }
    rec["observation"] = observation(rec)
    rec["text"] = step_text(rec)
    return rec


def cache_dir() -> Path:
    """Where rollouts are cached: ``$LIBRARYFS_CACHE`` or ``~/.cache/libraryfs``, then ``crafter/``."""
    base = os.environ.get("LIBRARYFS_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "libraryfs")
    return Path(base) / "crafter"


def load_rollout(seed: int, max_steps: int = 1500) -> list[dict]:
    """:func:`rollout`, cached as JSONL by (seed, max_steps, policy version)."""
    p = cache_dir() / f"survivor-{POLICY_VERSION}-seed{seed}-max{max_steps}.jsonl"
    if p.exists():
        return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
    recs = rollout(seed, max_steps)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in recs))
    os.replace(tmp, p)
    return recs


def dataset(
    min_total_steps: int = 10_000, max_steps: int = 1500, first_seed: int = EVAL_FIRST_SEED
) -> Iterator[tuple[int, list[dict]]]:
    """Seeded episodes ``(seed, records)`` until at least ``min_total_steps`` steps in total."""
    total, seed = 0, first_seed
    while total < min_total_steps:
        recs = load_rollout(seed, max_steps)
        total += len(recs)
        yield seed, recs
        seed += 1
