"""A fork server for the tests' runner scripts: torch and vLLM imported once, a fork a run.

Started by `script_runs.py` as `PYTHON engine_zygote.py MODULE...` (one per interpreter and
import-time environment in a pytest process; PYTHON may be a sibling environment's, e.g.
.venv-rbln's): it imports the MODULEs (torch and vLLM: 13 s on this host's cores, a third of an
in-process engine run), then reads one JSON request a line on stdin: {"script" or "module",
"args", "env", "cwd", "stdout", "stderr"}. For each it forks a child that starts a session of
its own, points fds 0-2 at /dev/null and the two files, replaces its environment with `env` and
runs `script` (or `module`, as `-m` would) as __main__, exactly as `python script *args` would
from the same imports; the server answers {"pid": N} at once and {"rc": N} when the child is
gone (a signal: minus its number, as `subprocess` reports it). It imports nothing of the
project, so it runs in any of the test environments.

vLLM itself forks its engine-core process from a process that has imported torch and vLLM (the
default "fork" start method on CPU): a forked child of these imports is what vLLM runs in
production too. The plugin is not imported here: vLLM loads it through its entry point in the
child, at engine start, as in a fresh process. What the imports read from the environment
(logging, torch and OpenMP settings, the platform) is the server's: `script_runs.py` sends a
run here only where those variables equal the server's.
"""

from __future__ import annotations

import atexit
import importlib
import importlib.util
import json
import os
import runpy
import sys
import threading
import time
import traceback
from typing import IO


def _child(request: dict, protocol: tuple[IO[str], IO[str]],
           set_by_imports: dict[str, str | None]) -> None:
    """In the forked child: never returns. It ends as a script's own exit does, up to the
    interpreter's module teardown: non-daemon threads joined, then the exit handlers (`atexit`:
    logging's flush, multiprocessing's children, the adaptive proposer's last statistics
    write, `weakref.finalize`), then the standard streams flushed. The teardown itself, which
    frees torch's and vLLM's modules one object at a time, is skipped (`os._exit`): 1.9 of a
    forked `explain`'s 2.1 s here, and nothing a run reports is written there."""
    code: int | str | None = 0
    stall = request.get("stall_once")
    if stall and os.path.exists(stall):  # the tests' child stuck before its set-up, once
        os.unlink(stall)
        time.sleep(3600)
    try:
        os.setsid()
        for pipe in protocol:
            pipe.close()
        null = os.open(os.devnull, os.O_RDONLY)
        out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        for fd, target in ((null, 0), (out, 1), (err, 2)):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        # what the prelude's imports wrote into the environment (vLLM's env_override sets
        # TORCHINDUCTOR_COMPILE_THREADS and others while it imports): a fresh process that
        # imported them would hold it too
        for key, value in set_by_imports.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        os.chdir(request["cwd"])
        if "module" in request:  # `python -m module`: sys.path[0] is the working directory
            sys.argv = [request["module"], *request["args"]]
            sys.path[0] = os.getcwd()
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        else:
            script = request["script"]
            sys.argv = [script, *request["args"]]
            sys.path[0] = os.path.dirname(os.path.abspath(script))
            runpy.run_path(script, run_name="__main__")
    except SystemExit as done:
        code = done.code
    except BaseException:  # the script's own failure, reported as python would
        traceback.print_exc()
        code = 1
    os._exit(_exit_code(code))


def _exit_code(code: int | str | None) -> int:
    """What the interpreter does at exit, short of its module teardown; the status `SystemExit`
    with `code` gives (a string is printed to stderr, status 1)."""
    try:
        threading._shutdown()  # type: ignore[attr-defined]  # what exit does first
        atexit._run_exitfuncs()
    except BaseException:
        traceback.print_exc()
        code = 1 if code in (0, None) else code
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            code = 120 if code in (0, None) else code  # what the interpreter says then
    return int(code or 0)


def serve(modules: list[str]) -> None:
    requests = os.fdopen(os.dup(0), "r", encoding="utf-8")
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # a stray print of the imports must not reach the protocol
    # what the runner scripts import before their engine starts, and no more: the plugin's
    # patches then meet the same modules already imported as in a fresh process
    before = dict(os.environ)
    for module in modules:
        if importlib.util.find_spec(module.partition(".")[0]) is not None:  # else: not here
            importlib.import_module(module)
    set_by_imports: dict[str, str | None] = {
        key: value for key, value in os.environ.items() if before.get(key) != value}
    set_by_imports.update({key: None for key in before if key not in os.environ})

    answers.write(json.dumps({"ready": os.getpid()}) + "\n")
    answers.flush()
    for line in requests:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request, (requests, answers), set_by_imports)
        answers.write(json.dumps({"pid": pid}) + "\n")
        answers.flush()
        _, status = os.waitpid(pid, 0)
        answers.write(json.dumps({"rc": os.waitstatus_to_exitcode(status)}) + "\n")
        answers.flush()


if __name__ == "__main__":
    serve(sys.argv[1:])
