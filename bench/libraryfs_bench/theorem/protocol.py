"""The agent-facing protocol of the benchmark: tool schemas, system prompts and the user message.

Tool names and arguments are the paper's (Mainen 2026, PAPERS.md §1): ``read_page(page_num)``,
``get_index()``, ``get_section_index(section_num)``, ``submit_answer(value)``; which tools a condition offers
is the paper's too. The prompt wording is ours (same instructions, similar length). PATH and AUTO, which
are libraryfs's own conditions, offer ``read_file(path)`` over the mounted directory instead.
"""

from __future__ import annotations

from libraryfs.fs.generated import INDEX_FILE
from libraryfs_bench.theorem.stores import PAGE_ITEMS

MAX_TURNS = 120  # paper default; its DEEP-INDEXED runs at N ≥ 1000 used 300–500


def _fn(name: str, description: str, props: dict | None = None) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": props or {}, "required": list(props or {})},
        },
    }


READ_PAGE = _fn(
    "read_page",
    "Read one page of the key-value store; returns every entry on it.",
    {"page_num": {"type": "integer", "description": "Page number, counting from 1"}},
)
GET_INDEX = _fn("get_index", "Get the index that tells which key ranges are on which pages.")
GET_SECTION_INDEX = _fn(
    "get_section_index",
    "Get the page-level index of one section.",
    {"section_num": {"type": "integer", "description": "Section number"}},
)
SUBMIT = _fn(
    "submit_answer",
    "Submit the final answer once the value is found.",
    {"value": {"type": "string", "description": "The value stored under the target key"}},
)
READ_FILE = _fn(
    "read_file",
    f"Read a file of the library (a path relative to the store directory, e.g. {INDEX_FILE}).",
    {"path": {"type": "string", "description": f"Relative path, as written in an {INDEX_FILE} link"}},
)

TOOLS: dict[str, list[dict]] = {
    "FLAT": [READ_PAGE, SUBMIT],
    "FLAT-SORTED": [READ_PAGE, SUBMIT],
    "INDEXED": [READ_PAGE, GET_INDEX, SUBMIT],
    "INDEXED-CORRUPTED": [READ_PAGE, GET_INDEX, SUBMIT],
    "DEEP-INDEXED": [READ_PAGE, GET_INDEX, GET_SECTION_INDEX, SUBMIT],
    "PATH": [READ_FILE, SUBMIT],
    "AUTO": [READ_FILE, SUBMIT],
}

_INTRO = "You are looking up a key in a key-value store kept on {num_pages} pages ({P} entries per page, {order}). "
_TASK = "Your task: find the value stored under key {target_key}. "
SYSTEM: dict[str, str] = {
    "FLAT": _INTRO.format(num_pages="{num_pages}", P=PAGE_ITEMS, order="in random order")
    + _TASK
    + "Read pages one by one with read_page until the key turns up, then give the value with "
    "submit_answer. Read no more pages than you need.",
    "FLAT-SORTED": _INTRO.format(num_pages="{num_pages}", P=PAGE_ITEMS, order="ascending by key")
    + _TASK
    + "The pages run from 1 to {num_pages}: page 1 holds the smallest keys and page {num_pages} the "
    "largest. Any page can be read by its number with read_page; choose any search strategy. "
    "Give the value with submit_answer once found.",
    "INDEXED": _INTRO.format(num_pages="{num_pages}", P=PAGE_ITEMS, order="sorted by key")
    + _TASK
    + "Call get_index to learn which page holds your key's range, read that page, then give the value "
    "with submit_answer.",
    "INDEXED-CORRUPTED": _INTRO.format(num_pages="{num_pages}", P=PAGE_ITEMS, order="sorted by key")
    + _TASK
    + "get_index returns an index, which may be wrong. Use read_page and submit_answer to find and "
    "report the value.",
    "DEEP-INDEXED": _INTRO.format(
        num_pages="{num_pages}", P=PAGE_ITEMS, order="sorted by key, grouped in sections"
    )
    + _TASK
    + "Call get_index to learn which section holds your key's range, then get_section_index with that "
    "section number to see its pages; read the page and give the value with submit_answer.",
    "PATH": "You are looking up a key in a library directory holding one file per key ({num_pages} "
    "files); a file's name is its key. "
    + _TASK
    + "Read the file named after the key with read_file, then give the value with submit_answer.",
    "AUTO": "You are looking up a key in a library directory holding one file per key ({num_pages} "
    "files). "
    + _TASK
    + f"Start with read_file('{INDEX_FILE}'): it lists files, or index pages covering ranges "
    "of names. Follow the link whose range covers the key until you reach the file, then give the value "
    "with submit_answer.",
}


def system_prompt(condition: str, num_pages: int, target_key: int | str) -> str:
    """System prompt for one trial (``num_pages``: pages, or entries for PATH/AUTO)."""
    return SYSTEM[condition].format(num_pages=num_pages, target_key=target_key)


def user_message(target_key: int | str) -> str:
    """The user turn that starts each trial."""
    return f"Find the value for key {target_key}."
