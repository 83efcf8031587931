"""The tests' fork server (`support/script_runs.py`, `support/engine_zygote.py`): a forked run is
what a fresh `python script *args` would be (output, exit code, argv, environment, working
directory), a run past its deadline is killed with its whole session and leaves the server
usable, a server that falls out of step is replaced, and a run whose import-time environment
differs gets a server of its own.

The server here imports `json` only (the prelude is the caller's), so these take a second.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import script_runs

LIGHT = ("json",)
REPORT = """
import json, os, sys
print(json.dumps({"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd(),
                  "ppid": os.getppid(), "path0": sys.path[0]}))
print("to stderr", file=sys.stderr)
sys.exit(int(os.environ.get("EXIT", "0")))
"""


def env(**extra: str) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", ""), **extra}


@pytest.fixture
def report(tmp_path: Path) -> Path:
    script = tmp_path / "report.py"
    script.write_text(REPORT)
    return script


def run(script: Path, *args: str, timeout: float = 60, **extra: str
        ) -> subprocess.CompletedProcess[str]:
    return script_runs.run(script, list(args), env(**extra), timeout, prelude=LIGHT,
                           starts_engine=False)


def servers() -> dict:
    return script_runs._servers


def test_a_forked_run_is_what_a_fresh_process_would_be(report, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    done = run(report, "a", "b c", EXIT="3", ONLY="this")
    seen = json.loads(done.stdout)
    assert done.returncode == 3 and done.stderr == "to stderr\n"
    assert seen["argv"] == ["a", "b c"] and seen["cwd"] == str(tmp_path)
    assert seen["env"] == env(EXIT="3", ONLY="this")  # replaced, not merged into the server's
    assert seen["path0"] == str(report.parent)  # as `python script` sets it
    key = next(k for k in servers() if k[1] == LIGHT)
    assert seen["ppid"] == servers()[key].proc.pid  # forked: the server is its parent


def test_what_the_prelude_writes_into_the_environment_the_child_holds_too(report, tmp_path):
    """As a fresh process that imported it would (vLLM's env_override sets variables)."""
    (tmp_path / "sets_env.py").write_text(
        "import os\nos.environ['SET_BY_IMPORT'] = 'yes'\nos.environ.pop('DROPPED', None)\n")
    done = script_runs.run(report, [], env(PYTHONPATH=str(tmp_path), DROPPED="1"), 60,
                           prelude=("sets_env", "no_such_module_here"), starts_engine=False)
    seen = json.loads(done.stdout)["env"]
    assert seen["SET_BY_IMPORT"] == "yes" and "DROPPED" not in seen
    assert seen["PYTHONPATH"] == str(tmp_path)


def test_a_module_runs_as_dash_m_would(tmp_path, monkeypatch):
    (tmp_path / "mod_for_run.py").write_text(REPORT)
    monkeypatch.chdir(tmp_path)
    done = script_runs.run_module("mod_for_run", ["x"], env(), 60, prelude=LIGHT)
    seen = json.loads(done.stdout)
    assert done.returncode == 0 and seen["argv"] == ["x"] and seen["path0"] == str(tmp_path)


EXITS = """
import atexit, os, sys, threading, time, weakref
out = sys.argv[1]
def note(what):
    with open(out, "a") as f:
        f.write(what + "\\n")
class Held:
    pass
held = Held()
weakref.finalize(held, note, "finalize")
atexit.register(note, "atexit")
threading.Thread(target=lambda: (time.sleep(0.3), note("thread"))).start()
sys.stdout.write("unflushed")  # no newline, no flush: the exit flushes it
how = os.environ["HOW"]
if how == "raise":
    raise ValueError("boom")
if how == "message":
    sys.exit("a message")
if how == "object":
    sys.exit(["a", "list"])
sys.exit(int(how))
"""


@pytest.mark.parametrize("how", ["0", "4", "raise", "message", "object"])
def test_a_forked_run_ends_as_a_fresh_process_does(tmp_path, monkeypatch, how):
    """The child skips the interpreter's module teardown (`os._exit`, 2 s less a run) but not
    what a script's exit does: its non-daemon threads finish, its `atexit` and
    `weakref.finalize` handlers run in that order, its output is flushed, and its exit status
    and stderr are a fresh process's."""
    script = tmp_path / "exits.py"
    script.write_text(EXITS)
    seen = {}
    for fork in ("1", "0"):
        monkeypatch.setenv(script_runs.SWITCH, fork)
        out = tmp_path / f"notes-{fork}"
        done = run(script, str(out), HOW=how)
        seen[fork] = (done.returncode, done.stdout, done.stderr.splitlines()[-1:],
                      out.read_text().split())
    assert seen["1"] == seen["0"]
    assert seen["1"][1] == "unflushed" and seen["1"][3] == ["thread", "atexit", "finalize"]
    assert seen["1"][0] == {"0": 0, "4": 4}.get(how, 1)


def test_a_run_past_its_deadline_is_killed_with_its_session(tmp_path):
    marker = tmp_path / "grandchild.pid"
    script = tmp_path / "hang.py"
    script.write_text(f"""
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
open({str(marker)!r}, "w").write(str(child.pid))
print("started", flush=True)
time.sleep(120)
""")
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as caught:
        run(script, timeout=3)
    assert time.monotonic() - started < 30
    assert "started" in caught.value.output
    grandchild = int(marker.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(grandchild):
        time.sleep(0.1)
    assert not _alive(grandchild), "the run's own child outlived the deadline"
    # the protocol stayed in step: the same server takes the next run
    ok = tmp_path / "ok.py"
    ok.write_text("print('ok')\n")
    again = run(ok, timeout=30)
    assert again.returncode == 0 and again.stdout == "ok\n"


def test_another_import_time_environment_gets_a_server_of_its_own(report):
    run(report)
    before = {k for k in servers() if k[1] == LIGHT}
    run(report, TORCH_SOMETHING="1")  # TORCH* is read while torch imports
    after = {k for k in servers() if k[1] == LIGHT}
    assert len(after) == len(before) + 1
    run(report, KAITO_ENABLE_SPECULATIVE_DECODING="true")  # read at engine start, not import
    assert {k for k in servers() if k[1] == LIGHT} == after


def test_a_child_stuck_before_its_set_up_is_killed_and_run_again(report, tmp_path):
    """Its session cannot be killed (it has none of its own yet): the harness kills it by its
    pid, the server stays in step, and the run is made once more."""
    run(report)
    server = next(s for k, s in servers().items() if k[1] == LIGHT)
    flag = tmp_path / "stall"
    flag.write_text("")
    done = server.run({"script": str(report), "stall_once": str(flag)}, [str(report), "x"],
                      env(), 3)
    assert done.returncode == 0 and json.loads(done.stdout)["argv"] == ["x"]
    assert not flag.exists()
    assert run(report).returncode == 0  # the server still answers in step


def test_the_switch_off_starts_a_fresh_process(report, monkeypatch):
    monkeypatch.setenv(script_runs.SWITCH, "0")
    seen = json.loads(run(report).stdout)
    assert seen["ppid"] == os.getpid()  # Popen from this process, no server between


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (killed, not yet reaped by its parent) counts as gone
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except OSError:
        return False


def test_two_answers_that_arrive_together_are_both_read(report, tmp_path):
    """A quick child's pid and exit code can reach the pipe before the harness reads the first
    (the harness starved under load): the second answer must not wait in a read buffer that
    `select` does not see (in CI this timed out one run and put every later run of that server
    one answer behind: `KeyError: 'pid'`)."""
    run(report)
    server = next(s for k, s in servers().items() if k[1] == LIGHT)
    out = tmp_path / "out"
    server._in.write(json.dumps({"script": str(report), "args": [], "env": env(),
                                 "cwd": str(tmp_path), "stdout": str(out),
                                 "stderr": str(tmp_path / "err")}).encode() + b"\n")
    server._in.flush()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (out.exists() and out.read_text()):
        time.sleep(0.05)
    time.sleep(1.0)  # the child has exited and the server has said so: both lines are waiting
    started = time.monotonic()
    assert "pid" in server._read(5) and server._read(5) == {"rc": 0}
    assert time.monotonic() - started < 2
    assert run(report).returncode == 0  # and the server is still in step


def _light_server() -> script_runs._Zygote:
    """The server `run` forks from with `env()`."""
    view = tuple(sorted(script_runs._import_view(env()).items()))
    return servers()[(sys.executable, LIGHT, view)]


ONCE = """
import os, signal, sys, time
flag = os.environ["FLAG"]
if os.path.exists(flag):  # once, in the server's child: the server stops ({how})
    os.unlink(flag)
    os.kill(os.getppid(), signal.{signal})
    time.sleep({sleep})
print("ran", os.getppid())
"""


@pytest.mark.parametrize("how", ["killed between runs", "silent at the pid", "killed mid-run",
                                 "silent while reaping"])
def test_a_server_out_of_step_is_replaced_and_the_run_still_made(tmp_path, monkeypatch, how):
    """Each place the protocol can break: the request meets a closed pipe, no pid in time, no
    exit code (the server gone while its child ran), no word that a timed-out child was reaped.
    The run's outcome is still what a fresh process gives (or its deadline), the lost server is
    closed and forgotten, and the next run forks from a new server in step."""
    monkeypatch.setattr(script_runs, "PID_TIMEOUT_S", 1.0)
    monkeypatch.setattr(script_runs, "REAP_TIMEOUT_S", 1.0)
    flag = tmp_path / "flag"
    ok = tmp_path / "ok.py"
    ok.write_text("import os\nprint('ok', os.getppid())\n")
    run(ok)
    lost = _light_server()
    script = tmp_path / "once.py"
    if how == "killed between runs":
        os.kill(lost.proc.pid, 9)
        lost.proc.wait()
        script = ok
    elif how == "silent at the pid":
        os.kill(lost.proc.pid, 19)  # SIGSTOP: it reads nothing, forks nothing
        script = ok
    else:
        signal, sleep = ("SIGKILL", 0) if how == "killed mid-run" else ("SIGSTOP", 120)
        script.write_text(ONCE.format(how=how, signal=signal, sleep=sleep))
        flag.write_text("")
    started = time.monotonic()
    if how == "silent while reaping":
        with pytest.raises(subprocess.TimeoutExpired):  # its deadline, still
            run(script, timeout=2, FLAG=str(flag))
    else:
        done = run(script, FLAG=str(flag))
        assert done.returncode == 0
        assert done.stdout.split() == ["ok" if script == ok else "ran", str(os.getpid())]
    assert time.monotonic() - started < 20
    assert lost not in servers().values() and lost.proc.poll() is not None
    again = run(ok)
    assert again.stdout.split() == ["ok", str(_light_server().proc.pid)]  # forked again
