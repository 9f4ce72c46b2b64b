"""dump.json text of one entry, produced once when the entry is recorded.

The text is exactly what :func:`dumpers.format.dumps_json` writes for the entry at its place in
dump.json (msprobe's ``indent=1`` style: an entry sits two levels deep, under ``"data"``). The journal
carries that text and ``stop()`` assembles dump.json by joining the finished texts, so every entry is
encoded once per step instead of twice (once for the journal, once for dump.json).
"""
from __future__ import annotations

import json

from dumpers import format as fmt

ENTRY_LEVEL = 2                       # dump.json -> "data" -> entry
_ESC = json.encoder.encode_basestring_ascii
_ENTRY_INDENT = "\n" + " " * ENTRY_LEVEL
_TAIL = '"data": null\n}'


def entry_text(entry: dict) -> str:
    """The text of one dump.json entry as it stands under ``"data"`` (no leading indentation).

    Encoded strings never hold a raw newline (JSON escapes them), so every newline of the text is
    structural and indenting it shifts the whole value two levels deeper.
    """
    return fmt.dumps_json_fast(entry, ENTRY_LEVEL)


def dump_json_text(header: dict, texts: dict) -> str:
    """dump.json from its header fields and the finished text of every entry (key -> text), in order."""
    head = fmt.dumps_json_fast({**header, "data": None})
    if not head.endswith(_TAIL):
        raise ValueError("dump.json header must be a dict of plain values without a 'data' key")
    head = head[: -len("null\n}")]
    if not texts:
        return head + "{}\n}"
    body = ("," + _ENTRY_INDENT).join([f"{_ESC(key)}: {text}" for key, text in texts.items()])
    return head + "{" + _ENTRY_INDENT + body + "\n }\n}"
