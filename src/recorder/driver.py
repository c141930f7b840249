"""themisto record: the Python side of the notebook recorder.

Runs notebook cells sent by the Rust side, one at a time, in one namespace, and
answers each with what the cell printed, displayed or raised, plus a snapshot of
the user's variables. Standard library only: pandas and numpy objects are
recognised by their type, never imported here.

Protocol (one JSON object per line, ASCII only):
  Rust -> driver, on stdin:   {"op": "run", "code": "..."}   |   {"op": "quit"}
  driver -> Rust, on stdout:  {"event": "ready", ...} once, then one
                              {"event": "result", ...} per "run" request.
Before any user code runs, the driver moves the protocol pipes to private file
descriptors and points fds 0 and 1 at /dev/null and stderr, so user code, C
libraries and child processes cannot read or corrupt the protocol.

Arguments: --timeout SECONDS --repr-limit N --output-limit N
"""

import ast
import builtins
import hashlib
import inspect
import io
import json
import linecache
import os
import re
import reprlib
import signal
import sys
import textwrap
import time
import tokenize
import traceback
import types

DRIVER_FILE = os.path.abspath(__file__)
ADDRESS_RE = re.compile(r" at 0x[0-9a-fA-F]+")
MAGIC_LINE_RE = re.compile(r"^\s*(%|!)")
MAGIC_ASSIGN_RE = re.compile(r"^\s*[A-Za-z_][\w\s,]*=\s*(%|!)")
HELP_LINE_RE = re.compile(r"^\s*[\w.]+\s*\?{1,2}\s*$|^\s*\?{1,2}\s*[\w.]+\s*$")
CONTAINERS = (list, tuple, dict, set, frozenset, str, bytes, bytearray, range)
BIG_CONTAINER = 100_000
HEADER_WIDTH = 75
TB_TITLE = "Traceback (most recent call last)"


def parse_args(argv):
    opts = {"timeout": 0.0, "repr_limit": 200, "output_limit": 1_000_000}
    i = 0
    while i + 1 < len(argv):
        key, value = argv[i], argv[i + 1]
        if key == "--timeout":
            opts["timeout"] = float(value)
        elif key == "--repr-limit":
            opts["repr_limit"] = int(value)
        elif key == "--output-limit":
            opts["output_limit"] = int(value)
        i += 2
    return opts


class Capture(io.TextIOBase):
    """A text stream that keeps what is written, up to `limit` characters."""

    def __init__(self, limit, name):
        self.limit = limit
        self.name = name
        self.reset()

    def reset(self):
        self.chunks = []
        self.size = 0
        self.dropped = 0

    def text(self):
        return "".join(self.chunks)

    def writable(self):
        return True

    def write(self, text):
        if not isinstance(text, str):
            raise TypeError("write() argument must be str, not %s" % type(text).__name__)
        room = max(self.limit - self.size, 0)
        kept = text if len(text) <= room else text[:room]
        if kept:
            self.chunks.append(kept)
            self.size += len(kept)
        self.dropped += len(text) - len(kept)
        return len(text)

    def flush(self):
        pass

    def isatty(self):
        return False

    @property
    def encoding(self):
        return "utf-8"

    def fileno(self):
        raise io.UnsupportedOperation("fileno")


class Driver:
    def __init__(self, opts, proto_in, proto_out):
        self.opts = opts
        self.proto_in = proto_in
        self.proto_out = proto_out
        self.count = 0
        self.in_cell = False
        self.timed_out = False
        self.display_used = False
        self.module = types.ModuleType("__main__")
        self.ns = self.module.__dict__
        self.ns["__builtins__"] = builtins
        self.pandas_ready = False
        sys.modules["__main__"] = self.module
        builtins.display = self.display
        self.stdout = Capture(opts["output_limit"], "<stdout>")
        self.stderr = Capture(opts["output_limit"], "<stderr>")

    # ----- protocol -------------------------------------------------------
    def send(self, obj):
        self.proto_out.write(json.dumps(obj, ensure_ascii=True) + "\n")
        self.proto_out.flush()

    def serve(self):
        self.send({
            "event": "ready",
            "python": "%d.%d.%d" % sys.version_info[:3],
            "executable": sys.executable,
            "pid": os.getpid(),
        })
        for line in self.proto_in:
            line = line.strip()
            if not line:
                continue
            request = json.loads(line)
            if request.get("op") == "quit":
                break
            if request.get("op") == "run":
                try:
                    reply = self.run(request.get("code", ""))
                except Exception as exc:  # noqa: BLE001 - a driver bug must not hang the recorder
                    reply = {
                        "event": "result",
                        "execution_count": self.count,
                        "error": "RecorderError: %s: %s" % (type(exc).__name__, exc),
                        "error_name": "RecorderError",
                        "exec_time_s": 0.0,
                        "notes": ["the recorder's driver failed on this cell"],
                    }
                self.send(reply)

    # ----- user-facing helpers -------------------------------------------
    def display(self, *objs, **_kwargs):
        """IPython's display(), text only: the repr of each object on its own line."""
        self.jupyter_defaults()
        for obj in objs:
            self.display_used = True
            self.stdout.write(repr(obj) + "\n")

    def jupyter_defaults(self):
        """Once the user has imported pandas, give it a Jupyter kernel's display options.

        Outside IPython pandas sizes frames to the terminal (display.max_columns 0);
        a Jupyter kernel has max_columns 20. Only that one default is changed, once.
        """
        if self.pandas_ready:
            return
        pandas = sys.modules.get("pandas")
        if pandas is None or not hasattr(pandas, "get_option"):
            return
        self.pandas_ready = True
        try:
            if pandas.get_option("display.max_columns") == 0:
                pandas.set_option("display.max_columns", 20)
        except Exception:  # noqa: BLE001 - a broken pandas is the user's business
            pass

    def on_alarm(self, _signum, _frame):
        if self.in_cell:
            self.timed_out = True
            raise KeyboardInterrupt()

    # ----- running a cell -------------------------------------------------
    def run(self, code):
        self.count += 1
        count = self.count
        filename = "<cell-%d>" % count
        notes = []
        self.stdout.reset()
        self.stderr.reset()
        self.display_used = False
        self.timed_out = False
        self.jupyter_defaults()
        source, skipped = strip_magics(code)
        for line in skipped:
            notes.append("skipped IPython syntax (not run): " + line.strip())
        lines = code.splitlines(True)
        linecache.cache[filename] = (len(code), None, lines, filename)

        result_text = None
        error_text = None
        error_name = None
        elapsed = 0.0
        old_out, old_err, old_in = sys.stdout, sys.stderr, sys.stdin
        sys.stdout, sys.stderr, sys.stdin = self.stdout, self.stderr, io.StringIO("")
        try:
            try:
                body, last = compile_cell(source, filename)
            except (SyntaxError, ValueError) as exc:  # ValueError: null bytes in the source
                error_text = exception_only(exc)
                error_name = type(exc).__name__
            else:
                start = time.perf_counter()
                try:
                    value = self.execute(body, last)
                    elapsed = time.perf_counter() - start
                    if last is not None and value is not None and not ends_quietly(source):
                        self.ns["_"] = value
                        self.jupyter_defaults()
                        result_text = repr(value)
                except BaseException as exc:  # noqa: B902 - the cell's error is data
                    elapsed = time.perf_counter() - start
                    self.in_cell = False
                    error_name = type(exc).__name__
                    try:
                        error_text = format_exception(exc)
                    except Exception:  # noqa: BLE001 - fall back to the plain last line
                        error_text = "".join(traceback.format_exception_only(type(exc), exc)).rstrip()
        finally:
            self.in_cell = False
            signal_off()
            sys.stdout, sys.stderr, sys.stdin = old_out, old_err, old_in
        if self.stdout.dropped:
            notes.append("stdout cut at %d characters: %d dropped" % (self.stdout.limit, self.stdout.dropped))
        if self.stderr.dropped:
            notes.append("stderr cut at %d characters: %d dropped" % (self.stderr.limit, self.stderr.dropped))
        variables, state_hash = self.snapshot()
        return {
            "event": "result",
            "execution_count": count,
            "stdout": self.stdout.text(),
            "displayed": self.display_used,
            "result": result_text,
            "error": error_text,
            "error_name": error_name,
            "timed_out": self.timed_out,
            "stderr": self.stderr.text(),
            "exec_time_s": round(elapsed, 6),
            "memory_bytes": rss_bytes(),
            "variables": variables,
            "state_hash": state_hash,
            "notes": notes,
        }

    def execute(self, body, last):
        timeout = self.opts["timeout"]
        self.in_cell = True
        if timeout > 0 and hasattr(signal, "setitimer"):
            signal.signal(signal.SIGALRM, self.on_alarm)
            signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            exec(body, self.ns)
            value = eval(last, self.ns) if last is not None else None
            self.in_cell = False
        finally:
            self.in_cell = False
            signal_off()
        return value

    # ----- variables ------------------------------------------------------
    def snapshot(self):
        limit = self.opts["repr_limit"]
        variables = []
        digest = hashlib.sha256()
        for name in sorted(k for k in self.ns if isinstance(k, str)):
            value = self.ns[name]
            try:
                if not is_user_variable(name, value):
                    continue
            except Exception:  # noqa: BLE001 - an object that fails to answer is skipped
                continue
            var, fingerprint = describe(name, value, limit)
            variables.append(var)
            digest.update(json.dumps([name, var["type"]]).encode())
            digest.update(fingerprint)
            digest.update(b"\x00")
        return variables, digest.hexdigest()[:16]


def signal_off():
    if hasattr(signal, "setitimer"):
        signal.setitimer(signal.ITIMER_REAL, 0)


# ----- cell source ----------------------------------------------------------
def strip_magics(code):
    """Replace IPython-only lines (%magic, !shell, x = !cmd, obj?) by `pass`.

    Only done when the cell is not valid Python as written, so a `%` at the start
    of a line inside a string or a continued expression is left alone. A cell
    magic (`%%name` on the first line) skips the whole cell.
    """
    stripped = code.lstrip()
    if stripped.startswith("%%"):
        first = stripped.splitlines()[0]
        return "", ["cell magic " + first + " (whole cell)"]
    try:
        ast.parse(code)
        return code, []
    except (SyntaxError, ValueError):
        pass
    out, skipped = [], []
    for line in code.splitlines(True):
        if MAGIC_LINE_RE.match(line) or MAGIC_ASSIGN_RE.match(line) or HELP_LINE_RE.match(line):
            indent = line[: len(line) - len(line.lstrip())]
            out.append(indent + "pass\n")
            skipped.append(line.rstrip("\n"))
        else:
            out.append(line)
    return "".join(out), skipped


def compile_cell(source, filename):
    """Compile all but a final expression for exec, and that expression for eval."""
    tree = ast.parse(source, filename, "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        expr = ast.Expression(tree.body.pop().value)
        last = compile(expr, filename, "eval", dont_inherit=True)
    body = compile(tree, filename, "exec", dont_inherit=True)
    return body, last


def ends_quietly(source):
    """True when the cell's last token is ';' (IPython then shows no value)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return source.rstrip().endswith(";")
    ignore = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENDMARKER,
              tokenize.INDENT, tokenize.DEDENT}
    for tok in reversed(tokens):
        if tok.type in ignore:
            continue
        return tok.type == tokenize.OP and tok.string == ";"
    return False


# ----- tracebacks -----------------------------------------------------------
def cell_number(filename):
    if filename.startswith("<cell-") and filename.endswith(">"):
        return filename[6:-1]
    return None


def short_path(path):
    """A path that does not depend on where Python or the venv is installed."""
    marker = os.sep + "site-packages" + os.sep
    if marker in path:
        return "..." + path[path.index(marker):]
    for prefix in {sys.base_prefix, sys.prefix, sys.exec_prefix}:
        if prefix and path.startswith(prefix + os.sep):
            return "..." + path[len(prefix):]
    cwd = os.getcwd()
    if path.startswith(cwd + os.sep):
        return path[len(cwd) + 1:]
    home = os.path.expanduser("~")
    if home not in ("", "/") and path.startswith(home + os.sep):
        return "~" + path[len(home):]
    return path


def signature(code):
    names = list(code.co_varnames[: code.co_argcount + code.co_kwonlyargcount])
    pos = code.co_argcount + code.co_kwonlyargcount
    if code.co_flags & inspect.CO_VARARGS:
        names.insert(code.co_argcount, "*" + code.co_varnames[pos])
        pos += 1
    if code.co_flags & inspect.CO_VARKEYWORDS:
        names.append("**" + code.co_varnames[pos])
    return "(" + ", ".join(names) + ")"


def context_lines(filename, lineno, before=2, after=2):
    """Source lines around `lineno`, IPython style: '----> 3 code'."""
    if lineno is None:
        return []
    lines = []
    first = max(1, lineno - before)
    numbers = []
    for n in range(first, lineno + after + 1):
        text = linecache.getline(filename, n)
        if not text:
            if n >= lineno:
                break
            continue
        numbers.append(n)
        lines.append(text.rstrip("\n").rstrip())
    if not lines:
        return []
    lines = textwrap.dedent("\n".join(lines)).split("\n")
    out = []
    for n, text in zip(numbers, lines):
        num = str(n)
        if n == lineno:
            prefix = "-" * max(7 - len(num) - 2, 1) + "> " + num
        else:
            prefix = num.rjust(7)
        out.append((prefix + " " + text).rstrip())
    return out


def format_frames(tb):
    blocks = []
    for frame, lineno in traceback.walk_tb(tb):
        code = frame.f_code
        filename = code.co_filename
        if not filename.startswith("<") and os.path.abspath(filename) == DRIVER_FILE:
            continue
        qualname = getattr(code, "co_qualname", code.co_name)
        num = cell_number(filename)
        if num is not None:
            head = "Cell In[%s], line %s" % (num, lineno)
            if code.co_name != "<module>":
                head += ", in " + qualname + signature(code)
        else:
            head = "File %s:%s, in %s" % (short_path(filename), lineno, qualname)
            if code.co_name != "<module>":
                head += signature(code)
        blocks.append("\n".join([head] + context_lines(filename, lineno)))
    return blocks


def exception_chain(exc):
    chain = []
    seen = set()
    current = exc
    while current is not None and id(current) not in seen and len(chain) < 5:
        seen.add(id(current))
        if current.__cause__ is not None:
            link, nxt = "The above exception was the direct cause of the following exception:", current.__cause__
        elif current.__context__ is not None and not current.__suppress_context__:
            link, nxt = "During handling of the above exception, another exception occurred:", current.__context__
        else:
            link, nxt = None, None
        chain.append((current, link))
        current = nxt
    return list(reversed(chain))


def format_exception(exc):
    parts = []
    for one, link in exception_chain(exc):
        name = type(one).__name__
        header = name + " " * max(HEADER_WIDTH - len(name) - len(TB_TITLE), 1) + TB_TITLE
        lines = ["-" * HEADER_WIDTH, header]
        blocks = format_frames(one.__traceback__)
        body = "\n".join(lines) + "\n"
        if blocks:
            body += "\n\n".join(blocks) + "\n\n"
        body += exception_only(one)
        if link:
            parts.append(link)
        parts.append(body)
    return "\n\n".join(parts)


def exception_only(exc):
    text = "".join(traceback.format_exception_only(type(exc), exc)).rstrip("\n")
    return re.sub(r'File "<cell-(\d+)>", line (\d+)', r"Cell In[\1], line \2", text)


# ----- variables --------------------------------------------------------------
def is_user_variable(name, value):
    if name.startswith("_"):
        return False
    if isinstance(value, types.ModuleType):
        return False
    if callable(value) and getattr(value, "__module__", None) != "__main__":
        return False
    return True


def type_module(value):
    return getattr(type(value), "__module__", "") or ""


def is_numpy_array(value):
    return type_module(value).startswith("numpy") and type(value).__name__ == "ndarray"


def is_pandas(value):
    return type_module(value).startswith("pandas") and type(value).__name__ in (
        "DataFrame", "Series", "Index", "RangeIndex", "MultiIndex", "DatetimeIndex", "Categorical")


def clip(text, limit):
    text = ADDRESS_RE.sub(" at 0x...", text)
    if limit >= 0 and len(text) > limit:
        return text[:limit] + "..."
    return text


def safe_repr(value):
    if isinstance(value, CONTAINERS) and len(value) > BIG_CONTAINER:
        short = reprlib.Repr()
        short.maxlist = short.maxtuple = short.maxdict = short.maxset = short.maxfrozenset = 100
        short.maxstring = short.maxother = 1000
        return short.repr(value)
    return repr(value)


def describe(name, value, limit):
    """One variable as the canonical format wants it, plus bytes for the state hash."""
    var = {"name": name, "type": type(value).__name__}
    fingerprint = None
    try:
        if is_numpy_array(value):
            var["size_bytes"] = int(value.nbytes)
            var["shape"] = [int(d) for d in value.shape]
            if value.dtype.kind != "O":
                fingerprint = (str(value.dtype) + str(value.shape)).encode() + value.tobytes()
        elif is_pandas(value):
            kind = type(value).__name__
            usage = value.memory_usage(deep=True)
            var["size_bytes"] = int(usage.sum() if kind == "DataFrame" else usage)
            var["shape"] = [int(d) for d in value.shape]
            pandas = sys.modules.get("pandas")
            if pandas is not None and kind in ("DataFrame", "Series", "Index"):
                hashed = pandas.util.hash_pandas_object(value, index=(kind != "Index"))
                extra = repr(list(value.columns)) + repr(list(value.dtypes)) if kind == "DataFrame" else ""
                fingerprint = extra.encode() + hashed.values.tobytes()
        else:
            var["size_bytes"] = int(sys.getsizeof(value))
            if isinstance(value, CONTAINERS):
                var["len"] = len(value)
    except Exception:  # noqa: BLE001 - a strange object still gets a line
        pass
    try:
        full = safe_repr(value)
    except Exception as exc:  # noqa: BLE001
        full = "<repr failed: %s>" % type(exc).__name__
    var["repr"] = clip(full, limit)
    if fingerprint is None:
        fingerprint = ADDRESS_RE.sub(" at 0x...", full).encode("utf-8", "replace")
    return var, hashlib.sha256(fingerprint).digest()


def rss_bytes():
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024
    except (ImportError, OSError):
        return None


def main():
    opts = parse_args(sys.argv[1:])
    # Keep the protocol on private descriptors; user code sees /dev/null and stderr.
    proto_in = os.fdopen(os.dup(0), "r", encoding="utf-8")
    proto_out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    sys.stdin = io.StringIO("")
    sys.path[0] = ""
    Driver(opts, proto_in, proto_out).serve()


if __name__ == "__main__":
    main()
