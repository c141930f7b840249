"""The one Python virtual-environment helper of the scripts.

A script that needs packages asks for a venv at a path with a list of pip
requirements; the venv is made on first use (with pip, by the interpreter that
runs this file) and the requirements installed, then reused while the list is
unchanged (a marker file inside the venv holds it). Nothing is installed into
the interpreter that calls it.

From Python (the scripts' folder is on `sys.path` when a script runs):

    import pyvenv
    pyvenv.reexec_in(pyvenv.DEFAULT_VENV, pyvenv.GGUF_TOOLS)   # re-runs the script inside it

From a shell script (prints the venv's python):

    py="$(python3 scripts/pyvenv.py DIR REQUIREMENT...)"
    py="$(python3 scripts/pyvenv.py --gguf-tools)"             # DEFAULT_VENV with GGUF_TOOLS
    py="$(python3 scripts/pyvenv.py --records-tools)"          # RECORDS_VENV with RECORDS_TOOLS

Environment: THEMISTO_IN_VENV=1 (run in the calling interpreter, no venv),
THEMISTO_VENV (the path of DEFAULT_VENV), THEMISTO_HOME (the cache
folder it lies in, default ~/.cache/themisto), THEMISTO_PIP_ARGS (extra `pip
install` arguments, e.g. the `--index-url` of a mirror).
"""

import os
import shlex
import subprocess
import sys
import venv
from pathlib import Path

THEMISTO_HOME = Path(os.environ.get("THEMISTO_HOME", Path.home() / ".cache" / "themisto"))
# The shared venv of the GGUF and safetensors tools (gguf_to_safetensors.py,
# tiny_gguf.py, gpu_check_parts.sh).
DEFAULT_VENV = Path(os.environ.get("THEMISTO_VENV", THEMISTO_HOME / "venv"))
GGUF_TOOLS = ["gguf==0.17.1", "numpy>=1.26,<3", "safetensors==0.6.2"]
# The venv of the transformers reference (transformers_reference.py): PyPI's
# torch wheel with its CUDA libraries (about 3 GB installed; it runs on the CPU).
TRANSFORMERS_VENV = Path(os.environ.get("THEMISTO_TRANSFORMERS_VENV", THEMISTO_HOME / "venv-transformers"))
TRANSFORMERS = ["torch==2.15.0", "transformers==5.25.0", "numpy>=1.26,<3"]
# The venv the record-format tests read exports and validate schemas with
# (tests/it/export.rs, tests/it/schema.rs).
RECORDS_VENV = THEMISTO_HOME / "venv-records"
RECORDS_TOOLS = ["pandas==2.3.3", "pyarrow==21.0.0", "jsonschema==4.25.1"]
MARKER = ".themisto-requirements"


def python_of(venv_dir: Path) -> Path:
    return Path(venv_dir) / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def ensure(venv_dir, requirements) -> Path:
    """The python of a venv at `venv_dir` holding `requirements`, made or updated as needed."""
    venv_dir = Path(venv_dir)
    python = python_of(venv_dir)
    marker = venv_dir / MARKER
    wanted = "\n".join(requirements)
    if python.exists() and marker.exists() and marker.read_text() == wanted:
        return python
    print(f"setting up {venv_dir} ({', '.join(requirements) or 'no packages'})", file=sys.stderr)
    if not python.exists():
        venv.EnvBuilder(with_pip=True, clear=True).create(venv_dir)
    if requirements:
        extra = shlex.split(os.environ.get("THEMISTO_PIP_ARGS", ""))
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *extra, *requirements],
            check=True,
            stdout=sys.stderr,
        )
    marker.write_text(wanted)
    return python


def inside(venv_dir) -> bool:
    """Whether this interpreter is the venv's, or THEMISTO_IN_VENV=1 says the caller
    provides the packages itself (as gpu_check_parts.sh does on a machine without pip's
    index)."""
    return os.environ.get("THEMISTO_IN_VENV") == "1" or Path(sys.prefix).resolve() == Path(venv_dir).resolve()


def reexec_in(venv_dir, requirements, script=None):
    """Run the calling script again inside the venv (made on first use) unless already there."""
    if inside(venv_dir):
        return
    python = ensure(venv_dir, requirements)
    script = script or sys.argv[0]
    sys.exit(subprocess.run([str(python), str(Path(script).resolve()), *sys.argv[1:]]).returncode)


def main(argv):
    if argv == ["--gguf-tools"]:
        print(ensure(DEFAULT_VENV, GGUF_TOOLS))
        return 0
    if argv == ["--records-tools"]:
        print(ensure(RECORDS_VENV, RECORDS_TOOLS))
        return 0
    if not argv or argv[0].startswith("-"):
        print("usage: pyvenv.py DIR [REQUIREMENT...] | pyvenv.py --gguf-tools | pyvenv.py --records-tools", file=sys.stderr)
        return 2
    print(ensure(Path(argv[0]), argv[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
