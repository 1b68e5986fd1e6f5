"""Surface forms of an episode's vocabulary for the question parser (:mod:`.anchors`).

Event names are ``verb_object`` (``collect_wood``, ``place_table``, ``defeat_zombie``) or one word
(``died``); each gets its verb forms (base, past, participle, gerund, 3rd person) and those of synonymous
verbs (collect ≈ gather/harvest/mine/chop, make ≈ craft/build, defeat ≈ kill/slay, ...), object synonyms
(wood ≈ tree/log, table ≈ workbench, ...) and noun forms ("wood collection", "collection of wood",
"table placement", "zombie kill"). Items, vitals (with the inverted synonyms thirst/hunger/fatigue) and
words of change (went up/rose/gained..., went down/fell/spent...) are listed here too. Everything is
deterministic: patterns are ordered by (−length, name), never by set or hash order.
"""

from __future__ import annotations

import functools
import re

#: event names of Crafter (known besides an episode's own vocabulary)
CRAFTER_EVENTS = (
    "collect_coal",
    "collect_diamond",
    "collect_drink",
    "collect_iron",
    "collect_sapling",
    "collect_stone",
    "collect_wood",
    "defeat_skeleton",
    "defeat_zombie",
    "eat_cow",
    "eat_plant",
    "make_iron_pickaxe",
    "make_iron_sword",
    "make_stone_pickaxe",
    "make_stone_sword",
    "make_wood_pickaxe",
    "make_wood_sword",
    "place_furnace",
    "place_plant",
    "place_stone",
    "place_table",
    "wake_up",
    "died",
)
CRAFTER_ITEMS = (
    "sapling",
    "wood",
    "stone",
    "coal",
    "iron",
    "diamond",
    "wood_pickaxe",
    "stone_pickaxe",
    "iron_pickaxe",
    "wood_sword",
    "stone_sword",
    "iron_sword",
)
VITAL_NAMES = ("health", "food", "drink", "energy")

NUMBER_WORDS = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
        "sixteen seventeen eighteen nineteen twenty".split()
    )
}
ORDINAL_WORDS = {
    w: i + 1
    for i, w in enumerate(
        "first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth thirteenth "
        "fourteenth fifteenth sixteenth seventeenth eighteenth nineteenth twentieth".split()
    )
}

_IRREGULAR = {  # verb -> (past, participle)
    "make": ("made", "made"),
    "eat": ("ate", "eaten"),
    "drink": ("drank", "drunk"),
    "build": ("built", "built"),
    "get": ("got", "gotten"),
    "put": ("put", "put"),
    "set": ("set", "set"),
    "wake": ("woke", "woken"),
    "slay": ("slew", "slain"),
    "beat": ("beat", "beaten"),
    "cut": ("cut", "cut"),
    "take": ("took", "taken"),
    "find": ("found", "found"),
    "fight": ("fought", "fought"),
    "die": ("died", "died"),
    "dig": ("dug", "dug"),
    "grab": ("grabbed", "grabbed"),
    "chop": ("chopped", "chopped"),
    "sip": ("sipped", "sipped"),
    "plant": ("planted", "planted"),
}
#: verbs that mean the same as an event's verb
VERB_SYNONYMS = {
    "collect": ("collect", "gather", "harvest", "grab", "pick up", "mine", "chop", "cut", "dig", "take"),
    "place": ("place", "put", "put down", "set down", "set up", "build", "plant"),
    "make": ("make", "craft", "build", "create", "forge", "produce"),
    "eat": ("eat", "devour", "consume"),
    "defeat": ("defeat", "kill", "slay", "beat", "destroy"),
    "wake": ("wake", "wake up"),
}
#: noun forms of an event verb ("wood collection", "collection of wood")
VERB_NOUNS = {
    "collect": ("collection", "collecting", "harvest", "gathering", "pickup", "pick up"),
    "place": ("placement", "placing", "planting"),
    "make": ("crafting", "craft", "making", "creation"),
    "eat": ("meal", "eating", "feast"),
    "defeat": ("kill", "defeat", "killing", "slaying"),
}
#: object synonyms (by the object part of an event name, or an item name)
OBJECT_SYNONYMS = {
    "wood": ("wood", "woods", "tree", "trees", "log", "logs", "timber"),
    "stone": ("stone", "stones", "rock", "rocks", "cobblestone"),
    "coal": ("coal",),
    "iron": ("iron", "iron ore"),
    "diamond": ("diamond", "diamonds"),
    "sapling": ("sapling", "saplings", "seedling"),
    "table": ("table", "crafting table", "workbench", "work bench"),
    "furnace": ("furnace",),
    "plant": ("plant", "sapling", "crop"),
    "cow": ("cow", "cows", "beef", "steak"),
    "zombie": ("zombie", "zombies"),
    "skeleton": ("skeleton", "skeletons"),
}
#: special surface forms of some Crafter events (besides the generated ones)
EVENT_EXTRA = {
    "collect_drink": (
        "drink water",
        "drank water",
        "drunk water",
        "drinking water",
        "drinks water",
        "drink of water",
        "drinks of water",
        "drinks",
        "sip of water",
        "sipped water",
        "drink some water",
        "drank some water",
        "collect water",
        "collected water",
        "collecting water",
        "water collection",
        "water drinking",
        "had a drink",
        "took a drink",
        "i drank",
        "i drink",
        "i drunk",
        "quenched my thirst",
    ),
    "wake_up": (
        "woke up",
        "woken up",
        "waking up",
        "wake up",
        "wakes up",
        "wake-up",
        "wake-ups",
        "wakeup",
        "wakeups",
        "awoke",
        "woke",
        "awakening",
        "awakenings",
    ),  # fmt: skip
    "died": ("died", "die", "dying", "death", "deaths", "dies", "got killed", "was killed", "perished"),
    "place_plant": ("planted a sapling", "plant a sapling", "planting a sapling", "sapling planting"),
}
DETERMINERS = r"(?:(?:a|an|the|some|more|another|my|new|piece of|pieces of|bit of|down|up|me|any|one) )*"

UP_VERBS = (
    "went up", "go up", "goes up", "gone up", "going up", "rose", "rise", "rises", "risen", "rising",
    "increased", "increase", "increases", "increasing", "grew", "grow", "grows", "grown", "climbed", "climb",
    "improved", "improve", "gained", "gain", "gains", "got", "get", "gets", "obtained", "obtain", "received",
    "receive", "acquired", "acquire", "went higher", "recovered", "recover", "restored", "refilled",
    "replenished", "jumped", "ticked up", "bumped up", "added", "picked up", "pick up", "picks up", "earned",
    "was topped up",
    "got bigger", "got higher", "came back", "regained", "regain", "regains", "ticked up", "tick up", "ticks up",
    "was added", "were added", "got added", "topped up", "went back up", "bounced back", "refilled",
)  # fmt: skip
DOWN_VERBS = (
    "went down", "go down", "goes down", "gone down", "going down", "dropped", "drop", "drops", "fell",
    "fall", "falls", "fallen", "decreased", "decrease", "decreases", "decreasing", "declined", "decline",
    "lost", "lose", "loses", "spent", "spend", "spends", "used up", "use up", "used", "use", "consumed",
    "consume", "shrank", "shrink", "shrunk", "depleted", "deplete", "reduced", "reduce", "sank", "sink",
    "dipped", "dip", "ticked down", "ran down", "ran low", "went lower", "diminished", "got smaller",
    "got lower", "lowered", "took damage", "got hurt", "was hurt", "removed", "was removed", "were removed",
    "got removed", "deducted", "was deducted", "taken away", "was taken", "subtracted", "tick down", "ticks down",
    "ran out", "went away", "got used", "was used", "were used", "was spent", "were spent", "gave away",
    "took a hit", "take a hit", "takes a hit", "taking a hit", "take damage", "takes damage", "taking damage",
    "got hit", "was hit", "taken", "taken from", "taken out", "taken out of", "removed from",
)  # fmt: skip
UP_NOUNS = (
    "increase",
    "rise",
    "gain",
    "growth",
    "uptick",
    "jump",
    "boost",
    "recovery",
    "refill",
    "increment",
)
DOWN_NOUNS = ("decrease", "drop", "fall", "loss", "decline", "dip", "reduction", "depletion", "decrement")
#: vital words: (vital, inverted) — "thirst went up" is a drop of drink
VITAL_WORDS = {
    "health": ("health", False),
    "hp": ("health", False),
    "hit points": ("health", False),
    "life": ("health", False),
    "food": ("food", False),
    "satiety": ("food", False),
    "fullness": ("food", False),
    "hunger": ("food", True),
    "drink": ("drink", False),
    "hydration": ("drink", False),
    "water level": ("drink", False),
    "thirst": ("drink", True),
    "energy": ("energy", False),
    "stamina": ("energy", False),
    "fatigue": ("energy", True),
    "tiredness": ("energy", True),
    "sleepiness": ("energy", True),
}
#: adjectives that are a vital's change on their own: "got thirsty" = drink dropped
VITAL_STATES = {
    "thirsty": ("drink", "drop"),
    "thirstier": ("drink", "drop"),
    "hungry": ("food", "drop"),
    "hungrier": ("food", "drop"),
    "tired": ("energy", "drop"),
    "tireder": ("energy", "drop"),
    "sleepy": ("energy", "drop"),
    "sleepier": ("energy", "drop"),
    "hurt": ("health", "drop"),
    "injured": ("health", "drop"),
    "wounded": ("health", "drop"),
    "damaged": ("health", "drop"),
    "healed": ("health", "rise"),
    "rested": ("energy", "rise"),
}


def verb_forms(verb: str) -> list[str]:
    """Base, past, participle, gerund and 3rd person of a (possibly two-word) verb."""
    head, _, tail = verb.partition(" ")
    past, part = _IRREGULAR.get(head, (None, None))
    if past is None:
        if head.endswith("e"):
            past = part = head + "d"
        elif re.search(r"[^aeiou]y$", head):
            past = part = head[:-1] + "ied"
        else:
            past = part = head + "ed"
    if head.endswith("ie"):
        ger = head[:-2] + "ying"
    elif head.endswith("e") and not head.endswith("ee"):
        ger = head[:-1] + "ing"
    elif head in ("chop", "grab", "sip", "dig", "cut", "put", "set", "drop"):
        ger = head + head[-1] + "ing"
    else:
        ger = head + "ing"
    third = head + ("es" if head.endswith(("s", "sh", "ch", "x")) else "s")
    forms = dict.fromkeys([head, past, part, ger, third])
    return [f"{f} {tail}".strip() for f in forms]


def _alts(words: list[str] | tuple[str, ...]) -> str:
    uniq = sorted(set(words), key=lambda w: (-len(w), w))
    return "(?:" + "|".join(re.escape(w).replace(r"\ ", r"[ _-]") for w in uniq) + ")"


def object_words(obj: str) -> list[str]:
    """Surface forms of an object/item (``wood_pickaxe`` → ``wood pickaxe``, ``wooden pickaxe``)."""
    base = obj.replace("_", " ")
    out = [base, base + "s"] if not base.endswith("s") else [base]
    out += list(OBJECT_SYNONYMS.get(obj, ()))
    if base.startswith("wood "):
        out.append("wooden " + base[5:])
    return out


def item_words(item: str) -> list[str]:
    """Surface forms of an inventory item: ``wood_pickaxe`` → wood pickaxe(s), wooden pickaxe."""
    base = item.replace("_", " ")
    out = [base] if base.endswith("s") else [base, base + "s"]
    if base.startswith("wood "):
        out += ["wooden " + base[5:], "wooden " + base[5:] + "s"]
    return out


@functools.lru_cache(maxsize=1024)
def event_patterns(event: str, items: tuple[str, ...] = CRAFTER_ITEMS) -> tuple[str, ...]:
    """Regular expressions (no groups), one per surface construction, matching ``event`` in a normalised
    question: its special forms, verb + object ("collected some wood"), object + noun ("wood collection",
    "wood collections"), noun + of + object ("collection of wood"). An object that begins a longer item
    name (``stone`` of ``stone_sword``) does not match there."""
    verb, _, obj = event.partition("_")
    forms: list[str] = list(EVENT_EXTRA.get(event, ()))
    if not obj:  # one-word event such as "died" or "respawn"
        return (_alts(forms + [verb, verb.replace("_", " ")] + verb_forms(verb)),)
    verbs = [f for v in VERB_SYNONYMS.get(verb, (verb,)) for f in verb_forms(v)]
    if verb == "wake":
        return (_alts(forms + verbs),)
    longer = sorted({i[len(obj) + 1 :].replace("_", " ") for i in items if i.startswith(obj + "_")})
    stop = rf"(?![ _-](?:{'|'.join(re.escape(w) for w in longer)})s?\b)" if longer else ""
    o, v = _alts(object_words(obj)) + stop, _alts(verbs)
    base_nouns = VERB_NOUNS.get(verb, (verb + "ing",))
    nouns = _alts([*base_nouns, *(n + "s" for n in base_nouns if not n.endswith("s"))])
    pats = [
        rf"{v} {DETERMINERS}{o}",  # collected (some) wood
        rf"{o} {nouns}",  # wood collection
        rf"{nouns} of {DETERMINERS}{o}",  # collection of wood
    ]
    return tuple(([_alts(forms)] if forms else []) + pats)
