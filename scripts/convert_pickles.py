#!/usr/bin/env python3
"""Convert pickled runtime snapshots (or any pickled table) to JSONL rows.

themisto never unpickles: loading a pickle runs code chosen by whoever wrote
it. Run this script yourself, in a Python environment you choose (one with
pandas if the pickle holds DataFrames), on pickles you trust:

    python3 scripts/convert_pickles.py runtime.pkl --out runtime.jsonl

What it writes, one JSON object per line:
- a pandas DataFrame: one row per DataFrame row (column -> value);
- a list of dicts: one row per dict;
- a dict whose values are lists of dicts (e.g. kernel_id -> steps): one row
  per element, with the key added as `kernel_id` (change it with --key);
- a dict of scalars/dicts: one row.
Values that are not JSON (numpy numbers and arrays, objects) become their
`repr` text, cut at --repr-limit characters. A variables dict of
name -> object becomes name -> {"type", "size", "repr"} with sys.getsizeof.

The output is read by themisto as Themisto rows when it has `kernel_id` and
`code`, else with a column mapping (`--columns trajectory=COL,code=COL,...`).
"""

import argparse
import json
import pickle
import sys


def jsonable(value, limit):
    """A JSON value for `value`: itself when JSON can hold it, else its repr."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, (list, tuple)):
        return [jsonable(v, limit) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v, limit) for k, v in value.items()}
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "shape", None) == ():
        return jsonable(item(), limit)
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def variables(value, limit):
    """name -> object as name -> {type, size, repr} (dicts of plain info kept)."""
    out = {}
    for name, obj in value.items():
        if isinstance(obj, dict):
            out[str(name)] = jsonable(obj, limit)
        else:
            text = repr(obj)
            out[str(name)] = {
                "type": type(obj).__name__,
                "size": sys.getsizeof(obj),
                "repr": text if len(text) <= limit else text[:limit] + "...",
            }
    return out


def rows_of(obj, key):
    """The rows a pickled object holds."""
    to_dict = getattr(obj, "to_dict", None)
    if callable(to_dict) and hasattr(obj, "columns"):
        return to_dict(orient="records")
    if isinstance(obj, list):
        return [r if isinstance(r, dict) else {"value": r} for r in obj]
    if isinstance(obj, dict):
        if obj and all(isinstance(v, list) and all(isinstance(x, dict) for x in v) for v in obj.values()):
            return [dict(x, **{key: k}) for k, v in obj.items() for x in v]
        return [obj]
    return [{"value": obj}]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("pickles", nargs="+", help="pickle files to convert (trusted ones only)")
    p.add_argument("--out", required=True, help="JSONL file to write")
    p.add_argument("--key", default="kernel_id", help="column for the keys of a dict of lists (default kernel_id)")
    p.add_argument("--repr-limit", type=int, default=200, help="longest repr kept (default 200)")
    a = p.parse_args()
    n = 0
    with open(a.out, "w", encoding="utf-8") as out:
        for path in a.pickles:
            with open(path, "rb") as f:
                obj = pickle.load(f)  # noqa: S301 - the user runs this on pickles they trust
            for row in rows_of(obj, a.key):
                row = {str(k): v for k, v in row.items()}
                for name in ("runtime_variables", "variables"):
                    if isinstance(row.get(name), dict):
                        row[name] = variables(row[name], a.repr_limit)
                out.write(json.dumps(jsonable(row, a.repr_limit), ensure_ascii=False) + "\n")
                n += 1
    print(f"wrote {n} rows to {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
