"""dump.json text of one entry, produced once when the entry is recorded.

The text is exactly what :func:`dumpers.format.dumps_json` writes for the entry at its place in
dump.json (msprobe's ``indent=1`` style: an entry sits two levels deep, under ``"data"``). The journal
carries that text and ``stop()`` assembles dump.json by joining the finished texts, so every entry is
encoded once per step instead of twice (once for the journal, once for dump.json).
"""
from __future__ import annotations

import json
from typing import Any

import torch

from dumpers import format as fmt
from dumpers import json_render

ENTRY_LEVEL = 2                       # dump.json -> "data" -> entry
_ESC = json.encoder.encode_basestring_ascii
_ENTRY_INDENT = "\n" + " " * ENTRY_LEVEL
_TAIL = '"data": null\n}'


def entry_text(entry: dict) -> str:
    """The text of one dump.json entry as it stands under ``"data"`` (no leading indentation).

    Encoded strings never hold a raw newline (JSON escapes them), so every newline of the text is
    structural and indenting it shifts the whole value two levels deeper.
    """
    return json_render.dumps_json_fast(entry, ENTRY_LEVEL)


def dump_json_text(header: dict, texts: dict) -> str:
    """dump.json from its header fields and the finished text of every entry (key -> text), in order."""
    head = json_render.dumps_json_fast({**header, "data": None})
    if not head.endswith(_TAIL):
        raise ValueError("dump.json header must be a dict of plain values without a 'data' key")
    head = head[: -len("null\n}")]
    if not texts:
        return head + "{}\n}"
    body = ("," + _ENTRY_INDENT).join([f"{_ESC(key)}: {text}" for key, text in texts.items()])
    return head + "{" + _ENTRY_INDENT + body + "\n }\n}"


# --- entries of plain calls, rendered as they are encoded (see DumpSession._plain_begin) ------------------
_I = json_render.INDENTS
_PLAIN_SCALARS = {bool: "bool", int: "int", float: "float", str: "str"}
ITEM_LEVEL = ENTRY_LEVEL + 2          # entry -> "input_args" list -> item
_ARGS, _KWARGS, _OUTPUT, _INPUT = (_ESC(key) for key in (fmt.INPUT_ARGS, fmt.INPUT_KWARGS, fmt.OUTPUT, fmt.INPUT))


def plain_value(value: Any) -> bool:
    """A value whose dump.json item :func:`item_text` renders: a strided CPU tensor, a scalar, None."""
    if value is None or type(value) in _PLAIN_SCALARS:
        return True
    return isinstance(value, torch.Tensor) and value.is_cpu and value.layout == torch.strided


def item_text(value: Any, batch: Any, cacheable: bool, on_tensor: Any = None, path: tuple = ()) -> str:
    """The text of one argument or result at item level: exactly the text of the item the Encoder makes.

    ``on_tensor(tensor, item, path)``: the tensor task's hook (it names and queues the tensor file and
    adds ``data_name`` to the item), called as the Encoder calls it.
    """
    if value is None:
        return "null"
    kind = _PLAIN_SCALARS.get(type(value))
    if kind is not None:
        i = _I[ITEM_LEVEL + 1]
        return f'{{{i}"type": "{kind}",{i}"value": {json_render.SCALAR_TEXT[type(value)](value)}{_I[ITEM_LEVEL]}}}'
    if on_tensor is None:
        return batch.text(value, cacheable or value.requires_grad, ITEM_LEVEL)
    item = batch.add(value, cacheable or value.requires_grad)
    on_tensor(value, item, path)
    if batch.pending:
        batch.resolve()
    text = json_render.tensor_item_text(item, ITEM_LEVEL)
    return text if text is not None else json_render.dumps_json_fast(item, ITEM_LEVEL)


def list_text(items: list) -> str:
    """A list of item texts at list level (``input_args``, ``output``)."""
    if not items:
        return "[]"
    sep = "," + _I[ITEM_LEVEL]
    return "[" + _I[ITEM_LEVEL] + sep.join(items) + _I[ITEM_LEVEL - 1] + "]"


def dict_text(items: dict) -> str:
    """A dict of item texts at list level (``input_kwargs``); keys as the Encoder writes them."""
    if not items:
        return "{}"
    sep = "," + _I[ITEM_LEVEL]
    return "{" + _I[ITEM_LEVEL] + sep.join(f"{_ESC(k)}: {v}" for k, v in items.items()) + _I[ITEM_LEVEL - 1] + "}"


def forward_text(args: str, kwargs: str, output: str) -> str:
    i = _I[ENTRY_LEVEL + 1]
    return f"{{{i}{_ARGS}: {args},{i}{_KWARGS}: {kwargs},{i}{_OUTPUT}: {output}{_I[ENTRY_LEVEL]}}}"


def backward_text(inputs: str, outputs: str) -> str:
    i = _I[ENTRY_LEVEL + 1]
    return f"{{{i}{_INPUT}: {inputs},{i}{_OUTPUT}: {outputs}{_I[ENTRY_LEVEL]}}}"


# --- stack.json, from the text of each call stack's lines (rendered once per stack, not once per step) -------------
def lines_text(lines: list) -> str:
    """The text of one stack group's frame lines where stack.json holds them (a list two levels deep)."""
    return json_render.dumps_json_fast(lines, 2)


def stack_json_text(groups: list) -> str:
    """stack.json from ``(stack id, keys, lines_text(lines))`` triples: exactly the text of
    ``dumps_json_fast({str(id): [keys, lines], ...})``."""
    if not groups:
        return "{}"
    i1, i2 = _I[1], _I[2]
    body = ("," + i1).join([f"{_ESC(str(sid))}: [{i2}{json_render.dumps_json_fast(keys, 2)},{i2}{lines}{i1}]"
                            for sid, keys, lines in groups])
    return "{" + i1 + body + _I[0] + "}"
