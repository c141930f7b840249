#!/usr/bin/env python3
"""Generate the metrics parity fixture from the reference implementations.

Run from anywhere with any Python 3.9+:

    python3 scripts/crosscheck_metrics.py

It creates (once, through scripts/pyvenv.py) a virtual environment `.venv-metrics` at
the repository root,
installs the pinned sacrebleu and rouge-score there, re-runs itself inside it,
and writes `tests/fixtures/metrics_parity.jsonl`:

- line 1, `{"kind": "meta", ...}`: versions, seed, sacrebleu signatures, and the
  code points CPython's `str.isspace()` accepts;
- `{"kind": "pair", ...}` lines: a prediction, a reference and their reference
  scores: sacrebleu sentence chrF and chrF++, rouge-score rougeL and rougeLsum
  F (default tokenizer), rougeL F with the code tokenizer (the Python regex
  below, fed to rouge-score's own LCS scorer), and both exact matches;
- `{"kind": "notebook_pair", ...}` lines: the same scores for pairs of
  neighbouring code cells (their sources, or their text outputs) of the real
  notebooks in `../shared/data/notebooks`, named by notebook path and cell
  index only, with the texts' lengths in code points; the Rust test extracts
  the texts itself (see `cell_text`);
- `{"kind": "group", ...}` lines: pair ids and sacrebleu corpus chrF / chrF++.

The Rust test `tests/it/metrics_parity.rs` checks every value to 1e-9. The pairs
come from a fixed seed, so rerunning gives the same file.
"""

import argparse
import json
import os
import random
import re
import subprocess
import sys
import time
import unicodedata
from pathlib import Path

SACREBLEU_VERSION = "2.6.0"
ROUGE_SCORE_VERSION = "0.1.2"
SEED = 20240611
REPO = Path(__file__).resolve().parent.parent
VENV = REPO / ".venv-metrics"
DEFAULT_OUT = REPO / "tests" / "fixtures" / "metrics_parity.jsonl"
# Real notebooks (not ours to copy: the fixture names cells, never their text).
NOTEBOOKS = REPO.parent / "shared" / "data" / "notebooks"
NOTEBOOK_PAIRS = 400


# ---------------------------------------------------------------------------
# Environment


def ensure_venv() -> Path:
    """The python of `.venv-metrics` with the pinned sacrebleu and rouge-score (scripts/pyvenv.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import pyvenv

    return pyvenv.ensure(VENV, [f"sacrebleu=={SACREBLEU_VERSION}", f"rouge-score=={ROUGE_SCORE_VERSION}"])


# ---------------------------------------------------------------------------
# Our own definitions, restated in Python (the Rust code must agree)

# Identifiers, numbers with `.digit` continuations, and any other single
# non-whitespace character (Python's `\S` is "not str.isspace()").
CODE_TOKEN_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9](?:[A-Za-z0-9_]|\.[0-9])*|\S")


class CodeTokenizer:
    def tokenize(self, text):
        return CODE_TOKEN_RE.findall(text)


def normalize_exact(s: str) -> str:
    s = s.replace("\r\n", "\n").replace("\r", "\n")
    lines = [line.rstrip() for line in s.split("\n")]
    while lines and lines[0] == "":
        lines.pop(0)
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Pair generation

ODD_WS = ["\x1c", "\x1d", "\x1e", "\x1f", "\x85", "\xa0", "\u2028", "\u2029", "\u3000",
          "\u2007", "\u1680", "\x0b", "\x0c", "\r", "\t", "\n", " "]
NOT_WS = ["\u200b", "\u180e", "\ufeff", "\u2060", "\x00", "\x1b", "\x7f"]
UNICODE_WORDS = [
    "café", "naïve", "e\u0301te\u0301", "Ångström", "straße", "ΣΟΦΟΣ", "σοφός", "İstanbul",
    "\u212aelvin", "ﬁle", "Ｆｕｌｌ", "데이터", "データフレーム", "数据框", "Москва", "привет",
    "مرحبا", "שלום", "नमस्ते", "ตาราง", "🐍", "👩\u200d💻", "🇩🇪", "a\u0300\u0316", "Z\u0335\u0321",
    "ǅ", "ﬀ", "Ⅻ", "①", "٣٤", "𝔘𝔫𝔦", "\U0001f600x",
]
IDENTS = ["df", "x", "y", "data", "model", "np", "pd", "plt", "result", "i", "j", "count",
          "train_df", "X_train", "y_pred", "acc", "mean", "groupby", "value_counts", "self",
          "_private", "__init__", "CamelCase", "lr", "epochs", "fig", "ax", "col", "row"]
FUNCS = ["print", "len", "sum", "range", "sorted", "head", "describe", "fit", "predict",
         "read_csv", "merge", "apply", "plot", "reshape", "astype", "dropna", "info"]
OPS = ["=", "==", "+", "-", "*", "/", "//", "%", "**", ">=", "<=", "!=", "+=", "->", ":", ",",
       ".", "@", "&", "|", "~", "^"]
NUMS = ["0", "1", "42", "3.14", "1e-5", "0x1F", "1_000", "2.", ".5", "100.0", "-7", "1e10"]
STRINGS = ["'a'", '"hello world"', "f'{x}'", "'Age'", '"col_1"', "r'\\d+'", "''", "'é'"]


def rand_expr(r: random.Random, depth=0) -> str:
    k = r.random()
    if depth > 2 or k < 0.3:
        return r.choice(IDENTS + NUMS + STRINGS)
    if k < 0.55:
        return f"{rand_expr(r, depth + 1)} {r.choice(OPS)} {rand_expr(r, depth + 1)}"
    if k < 0.8:
        args = ", ".join(rand_expr(r, depth + 1) for _ in range(r.randint(0, 3)))
        return f"{r.choice(IDENTS)}.{r.choice(FUNCS)}({args})"
    return f"{r.choice(IDENTS)}[{rand_expr(r, depth + 1)}]"


def rand_code(r: random.Random, lines=None) -> str:
    out = []
    indent = 0
    for _ in range(lines if lines is not None else r.randint(1, 8)):
        k = r.random()
        pad = "    " * indent
        if k < 0.1 and indent < 3:
            out.append(f"{pad}for {r.choice(IDENTS)} in range({r.choice(NUMS)}):")
            indent += 1
        elif k < 0.15 and indent < 3:
            out.append(f"{pad}def {r.choice(FUNCS)}_{r.randint(0, 9)}({r.choice(IDENTS)}):")
            indent += 1
        elif k < 0.2:
            out.append(f"{pad}# {r.choice(['TODO', 'fix this', 'Schritt 2: Daten prüfen', '计算'])}")
        elif k < 0.25:
            out.append("")
        else:
            out.append(f"{pad}{r.choice(IDENTS)} = {rand_expr(r)}")
        if indent and r.random() < 0.2:
            indent -= 1
    return "\n".join(out)


def rand_dataframe(r: random.Random, rows=None) -> str:
    ncols = r.randint(1, 5)
    cols = r.sample(["name", "age", "score", "city", "value", "label", "Größe", "日付"], ncols)
    nrows = rows if rows is not None else r.randint(1, 8)
    cells = []
    for _ in range(nrows):
        row = []
        for c in cols:
            if c in ("name", "city", "label"):
                row.append(r.choice(["Alice", "Bob", "Zoë", "NaN", "None", "São Paulo", "北京", "x"]))
            elif c == "age":
                row.append(str(r.randint(0, 99)))
            else:
                row.append(f"{r.uniform(-1000, 1000):.{r.randint(0, 6)}f}")
        cells.append(row)
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    iw = len(str(nrows - 1))
    lines = [" " * iw + "  " + "  ".join(c.rjust(w) for c, w in zip(cols, widths))]
    for i, row in enumerate(cells):
        lines.append(str(i).ljust(iw) + "  " + "  ".join(v.rjust(w) for v, w in zip(row, widths)))
    if r.random() < 0.3:
        lines.append("")
        lines.append(f"[{nrows} rows x {ncols} columns]")
    return "\n".join(lines)


def rand_traceback(r: random.Random) -> str:
    err = r.choice([
        ("KeyError", "'Age'"), ("ValueError", "could not convert string to float: 'abc'"),
        ("NameError", "name 'df' is not defined"), ("ZeroDivisionError", "division by zero"),
        ("TypeError", "unsupported operand type(s) for +: 'int' and 'str'"),
        ("ModuleNotFoundError", "No module named 'sklearn'"),
        ("IndexError", "index 10 is out of bounds for axis 0 with size 3"),
    ])
    lines = ["---------------------------------------------------------------------------",
             f"{err[0]}                                  Traceback (most recent call last)"]
    for _ in range(r.randint(1, 3)):
        lines.append(f"Cell In[{r.randint(1, 40)}], line {r.randint(1, 9)}")
        lines.append(f"----> {r.randint(1, 9)} {rand_expr(r)}")
        lines.append("")
    lines.append(f"{err[0]}: {err[1]}")
    if r.random() < 0.3:
        lines = [f"\x1b[0;31m{line}\x1b[0m" for line in lines]
    return "\n".join(lines)


def rand_unicode(r: random.Random) -> str:
    parts = []
    for _ in range(r.randint(1, 10)):
        k = r.random()
        if k < 0.5:
            parts.append(r.choice(UNICODE_WORDS))
        elif k < 0.7:
            parts.append(r.choice(IDENTS))
        elif k < 0.85:
            parts.append("".join(chr(r.randint(0x300, 0x36F)) for _ in range(r.randint(1, 3))))
        else:
            parts.append(rand_codepoint(r))
        parts.append(r.choice([" ", " ", "", "\n", r.choice(ODD_WS), r.choice(NOT_WS)]))
    return "".join(parts)


def rand_codepoint(r: random.Random) -> str:
    while True:
        c = r.choice([r.randint(0, 0x7F), r.randint(0x80, 0x2FFF), r.randint(0x3000, 0xFFFF),
                      r.randint(0x10000, 0x10FFFF)])
        if not 0xD800 <= c <= 0xDFFF:
            return chr(c)


def rand_ws_soup(r: random.Random) -> str:
    alphabet = ODD_WS + NOT_WS + list("ab(),._=+1 ") + ["é", "İ", "\u212a"]
    return "".join(r.choice(alphabet) for _ in range(r.randint(0, 40)))


def rand_small_alphabet(r: random.Random) -> str:
    alphabet = r.choice(["ab", "abc ", "a b\n", "xy().", "aA1_"])
    return "".join(r.choice(alphabet) for _ in range(r.randint(0, 30)))


def mutate(r: random.Random, s: str) -> str:
    chars = list(s)
    for _ in range(r.randint(1, 4)):
        k = r.random()
        pos = r.randint(0, len(chars))
        if k < 0.25 and chars:
            del chars[min(pos, len(chars) - 1)]
        elif k < 0.45:
            chars.insert(pos, r.choice(list("abxyz01(),.=_ \n") + ODD_WS[:6]))
        elif k < 0.6 and chars:
            chars[min(pos, len(chars) - 1)] = r.choice("XYZ123!?")
        elif k < 0.7:
            chars.insert(pos, "  ")
        elif k < 0.8:
            return "".join(chars).upper() if r.random() < 0.5 else "".join(chars).lower()
        elif k < 0.9:
            lines = "".join(chars).split("\n")
            r.shuffle(lines)
            chars = list("\n".join(lines))
        else:
            chars = list("".join(chars).replace("\n", r.choice(["\r\n", "\r", "\n\n", " \n"])))
    return "".join(chars)


def whitespace_variant(r: random.Random, s: str) -> str:
    k = r.random()
    if k < 0.25:
        return "\n" + s.replace("\n", "\r\n") + "  \n\n"
    if k < 0.5:
        return "\n".join(line + r.choice(ODD_WS[:6] + [" ", "\t"]) for line in s.split("\n"))
    if k < 0.75:
        return s.replace(" ", "")
    return " \u2028".join(s.split(" "))


GENERATORS = [rand_code, rand_dataframe, rand_traceback, rand_unicode, rand_ws_soup,
              rand_small_alphabet]


def fixed_pairs():
    """Hand-picked adversarial pairs."""
    p = [
        ("", ""), ("", "x"), ("x", ""), (" ", ""), ("\n\n", " \t "), ("\x1c\x1d\x1e\x1f", ""),
        ("\x85", "\x85"), ("a\x85b", "ab"), ("a\x1fb", "ab"), ("a\u200bb", "ab"),
        ("a\u180eb", "a b"), ("a\ufeffb", "ab"), ("a\xa0b", "a b"), ("a\u2028b", "a\nb"),
        ("x", "x"), ("a", "b"), ("ab", "abc"), ("a b", "abc"), ("abc", "ab"),
        ("(hi)", "(hi)"), ("(hi)", "hi"), ("hi.", "hi ."), ("..", "."), ("'a'", "a"),
        ("é", "e\u0301"), ("e\u0301", "e\u0301"), ("İ", "i"), ("\u212a", "k"), ("K", "\u212a"),
        ("ΣΑΣ", "σας"), ("straße", "STRASSE"), ("ﬁle", "file"), ("Ｘ", "x"),
        ("df[0]", "df(0)"), ("df.head()", "df.head()\n"), ("print(1)\r\n", "print(1)"),
        ("x = 1\n\n", "\n\nx = 1"), ("  x", "x"), ("x\t\n", "x"), ("a\n\nb", "a\nb"),
        ("1e-5", "1e-5"), ("3.14", "3 . 14"), ("0x1F", "0x1f"), ("a_b", "a b"),
        ("🐍🐍", "🐍"), ("日本語", "日本"), ("a\nb\nc", "c\nb\na"), ("a c\nb d", "a b\nc d"),
        ("a\na", "a"), ("a\n\n\n", "a"), ("\n \n", "\n"), ("x\r\ny", "x\ny"), ("x\ry", "x\ny"),
        ("!!!", "???"), ("+-*/", "+-*/"), ("abcdefgh", "abcdefgh"), ("abcdefg", "gfedcba"),
        ("the cat sat on the mat", "the cat on mat"), ("a b c", "a b c d e f g"),
        ("x" * 7, "x" * 6), ("ab" * 10, "ba" * 10), ("\x00", "\x00"), ("\x1b[31mred\x1b[0m", "red"),
    ]
    return p


def long_pairs(r: random.Random):
    out = []
    big_df = rand_dataframe(r, rows=150)
    out.append((mutate(r, big_df), big_df))
    big_code = rand_code(r, lines=200)
    out.append((big_code, mutate(r, big_code)))
    ident = "".join(r.choice("abcdefghij_") for _ in range(30000))
    out.append((ident, ident[:29000] + "Z" + ident[29001:]))
    out.append(("x" * 25000, "x" * 24000 + "y"))
    out.append((rand_code(r, lines=150), rand_dataframe(r, rows=100)))
    out.append(("".join(r.choice(UNICODE_WORDS) + " " for _ in range(1500)), "café " * 800))
    out.append(("short", big_df))
    return out


def generate_pairs(seed: int, count: int):
    r = random.Random(seed)
    pairs = fixed_pairs() + long_pairs(r)
    while len(pairs) < count:
        k = r.random()
        base = r.choice(GENERATORS)(r)
        if k < 0.15:
            pairs.append((base, base))
        elif k < 0.45:
            pairs.append((mutate(r, base), base) if r.random() < 0.5 else (base, mutate(r, base)))
        elif k < 0.6:
            pairs.append((whitespace_variant(r, base), base))
        elif k < 0.8:
            pairs.append((base, r.choice(GENERATORS)(r)))
        else:
            other = r.choice(GENERATORS)(r)
            pairs.append((base + r.choice(["\n", " ", ""]) + other, other))
    return pairs


def _joined(x) -> str:
    return "".join(x) if isinstance(x, list) else (x or "")


def cell_text(cell: dict, part: str) -> str:
    """A code cell's source, or its outputs' text: stream text, the
    `text/plain` of results and displays, and error tracebacks joined by
    newlines, concatenated in order."""
    if part == "source":
        return _joined(cell.get("source", ""))
    out = []
    for o in cell.get("outputs", []):
        kind = o.get("output_type")
        if kind == "stream":
            out.append(_joined(o.get("text", "")))
        elif kind in ("execute_result", "display_data"):
            out.append(_joined(o.get("data", {}).get("text/plain", "")))
        elif kind == "error":
            out.append("\n".join(o.get("traceback", [])))
    return "".join(out)


def notebook_pairs(seed: int):
    """(notebook, part, prediction cell, reference cell, prediction, reference)
    for neighbouring code cells, a seeded sample of at most NOTEBOOK_PAIRS."""
    if not NOTEBOOKS.is_dir():
        sys.exit(f"{NOTEBOOKS} is missing: it holds the real notebooks this fixture scores")
    candidates = []
    for path in sorted(NOTEBOOKS.rglob("*.ipynb")):
        rel = path.relative_to(NOTEBOOKS).as_posix()
        cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
        code = [i for i, c in enumerate(cells) if c.get("cell_type") == "code"]
        for a, b in zip(code, code[1:]):
            for part in ("source", "output"):
                candidates.append((rel, part, a, b, cell_text(cells[a], part), cell_text(cells[b], part)))
    r = random.Random(seed)
    chosen = sorted(r.sample(range(len(candidates)), min(NOTEBOOK_PAIRS, len(candidates))))
    return [candidates[i] for i in chosen]


def make_groups(r: random.Random, n: int):
    groups = [("single", [0]), ("empty_pairs", list(range(0, 6))), ("first_100", list(range(100))),
              ("all", list(range(n)))]
    for size in (2, 10, 50, 300, 1000):
        groups.append((f"random_{size}", r.sample(range(n), size)))
    groups.append(("with_repeats", [r.randrange(n) for _ in range(200)]))
    return groups


# ---------------------------------------------------------------------------
# Scoring with the reference implementations


def generate(out: Path, count: int):
    import importlib.metadata as md

    from rouge_score import rouge_scorer
    from sacrebleu.metrics import CHRF

    chrf, chrf_pp = CHRF(), CHRF(word_order=2)
    rouge = rouge_scorer.RougeScorer(["rougeL", "rougeLsum"])
    rouge_code = rouge_scorer.RougeScorer(["rougeL"], tokenizer=CodeTokenizer())

    def reference_scores(pred: str, ref: str) -> dict:
        s_chrf = chrf.sentence_score(pred, [ref]).score
        # sentence_score with one reference is corpus_score over that one pair.
        assert s_chrf == CHRF().corpus_score([pred], [[ref]]).score, (pred, ref)
        rs = rouge.score(ref, pred)
        return {
            "chrf": s_chrf, "chrf_pp": chrf_pp.sentence_score(pred, [ref]).score,
            "rouge_l": rs["rougeL"].fmeasure, "rouge_lsum": rs["rougeLsum"].fmeasure,
            "rouge_l_code": rouge_code.score(ref, pred)["rougeL"].fmeasure,
            "exact_match": float(normalize_exact(pred) == normalize_exact(ref)),
            "exact_match_ws": float("".join(pred.split()) == "".join(ref.split())),
        }

    started = time.time()
    pairs = generate_pairs(SEED, count)
    records = []
    for i, (pred, ref) in enumerate(pairs):
        records.append({"kind": "pair", "id": i, "prediction": pred, "reference": ref,
                        **reference_scores(pred, ref)})
    for rel, part, a, b, pred, ref in notebook_pairs(SEED + 2):
        records.append({"kind": "notebook_pair", "notebook": rel, "part": part,
                        "prediction_cell": a, "reference_cell": b,
                        "prediction_chars": len(pred), "reference_chars": len(ref),
                        **reference_scores(pred, ref)})

    groups = []
    for name, ids in make_groups(random.Random(SEED + 1), len(pairs)):
        hyps = [pairs[i][0] for i in ids]
        refs = [[pairs[i][1] for i in ids]]
        groups.append({
            "kind": "group", "name": name, "ids": ids,
            "chrf_corpus": CHRF().corpus_score(hyps, refs).score,
            "chrf_pp_corpus": CHRF(word_order=2).corpus_score(hyps, refs).score,
        })

    meta = {
        "kind": "meta",
        "sacrebleu": md.version("sacrebleu"),
        "rouge_score": md.version("rouge-score"),
        "python": sys.version.split()[0],
        "unicode": unicodedata.unidata_version,
        "seed": SEED,
        "chrf_signature": f"{chrf.get_signature()}",
        "chrf_pp_signature": f"{chrf_pp.get_signature()}",
        "chrf_name": chrf.sentence_score("a", ["a"]).name,
        "chrf_pp_name": chrf_pp.sentence_score("a", ["a"]).name,
        "python_whitespace": [c for c in range(0x110000) if chr(c).isspace()],
        "code_token_regex": CODE_TOKEN_RE.pattern,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8", newline="\n") as f:
        for rec in [meta] + records + groups:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    print(f"wrote {out}: {len(records)} pairs, {len(groups)} groups, "
          f"{out.stat().st_size / 1e6:.2f} MB in {time.time() - started:.1f} s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--count", type=int, default=2500, help="number of pairs")
    ap.add_argument("--in-venv", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not args.in_venv:
        py = ensure_venv()
        cmd = [str(py), __file__, "--in-venv", "--out", str(args.out), "--count", str(args.count)]
        sys.exit(subprocess.run(cmd).returncode)
    generate(args.out, args.count)


if __name__ == "__main__":
    main()
