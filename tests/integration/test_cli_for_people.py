"""The CLI for people (issue 25.3, 25.5): `show` output, Ctrl-C, option names, enum case."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from memroot.cli.main import cli

MEMROOT = [str(Path(sys.executable).with_name("memroot"))]


def run(path: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["-l", str(path), *args], catch_exceptions=False)


def ok(path: Path, *args: str) -> Any:
    r = run(path, *args, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _ledger(tmp_path: Path) -> Path:
    path = tmp_path / "a.ledger"
    assert run(path, "init").exit_code == 0
    return path


def _event(path: Path, content: str = "I take tea") -> str:
    line = {
        "kind": "event",
        "stream": "s",
        "actor_id": "alice",
        "actor_type": "HUMAN_USER",
        "role": "USER",
        "content": content,
        "namespace_id": "default",
    }
    return str(ok(path, "append", json.dumps(line))[0]["id"])


def test_show_prints_for_people_and_json_on_request(tmp_path: Path) -> None:
    """`show` prints a header and the body's fields, not JSON; --json prints the JSON."""
    path = _ledger(tmp_path)
    eid = _event(path)
    human = run(path, "show", "1")
    assert human.exit_code == 0
    assert human.stdout.startswith("entry 1 on main: event EVENT, ")
    assert f"  id          {eid}\n" in human.stdout
    assert (
        "  actor_type: HUMAN_USER\n" in human.stdout and "content:\n  I take tea\n" in human.stdout
    )
    assert not human.stdout.lstrip().startswith("{") and "entry_cbor" not in human.stdout
    data = ok(path, "show", "1")
    assert data["id"] == eid and data["content"] == "I take tea" and data["entry_cbor"]


def _count(path: Path) -> int:
    r = subprocess.run(
        [*MEMROOT, "-l", str(path), "log", "--json", "--limit", "1000"],
        capture_output=True,
        text=True,
        check=True,
    )
    return len(json.loads(r.stdout))


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _read_position(pid: int, file: Path) -> int:
    """How far process ``pid`` has read ``file`` (its descriptor's offset, from /proc)."""
    fds = Path(f"/proc/{pid}/fd")
    for fd in fds.iterdir():
        with contextlib.suppress(OSError):
            if Path(os.readlink(fd)) == file.resolve():
                info = (Path(f"/proc/{pid}/fdinfo") / fd.name).read_text()
                return int(info.split("pos:", 1)[1].split()[0])
    return 0


@pytest.mark.skipif(not Path("/proc/self/fdinfo").is_dir(), reason="needs Linux's /proc")
def test_ctrl_c_during_import_exits_130_and_writes_nothing(tmp_path: Path) -> None:
    """SIGINT during a long import exits 130, says nothing was written, and the ledger is intact."""
    path = _ledger(tmp_path)
    _event(path, "before the import")
    big = tmp_path / "big.jsonl"
    line = json.dumps(
        {
            "kind": "event",
            "stream": "s",
            "actor_id": "a",
            "actor_type": "AI_AGENT",
            "role": "USER",
            "content": "x" * 40,
            "namespace_id": "default",
        }
    )
    big.write_text((line + "\n") * 300_000)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [*MEMROOT, "-l", str(path), "import", str(big)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        # Ctrl-C as a terminal delivers it: a test run started in the background (`cmd &` in
        # a script) ignores SIGINT, the child would inherit that, and Python then installs no
        # handler for it.
        preexec_fn=_sigint_default,
    )
    # Wait until the import has read a tenth of its input and not yet half: it is appending
    # inside its one transaction, well before the commit. (The WAL is no sign of that: the
    # ledger's 64 MB page cache holds the whole transaction until its commit writes it.)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if _read_position(proc.pid, big) > big.stat().st_size // 10:
            break
        time.sleep(0.01)
    assert proc.poll() is None, "the import ended before it could be interrupted"
    assert _read_position(proc.pid, big) < big.stat().st_size // 2, "the import ran too far"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted: nothing was written" in err and "Traceback" not in err
    assert out == ""
    assert _count(path) == 2  # genesis and the one event before
    verify = subprocess.run(
        [*MEMROOT, "-l", str(path), "verify", "--trusted", str(tmp_path / "t.json")],
        capture_output=True,
        text=True,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr


# A child that runs the CLI and delivers SIGINT at the instant that loses it: inside the
# frame of `ABCMeta.__instancecheck__` that cbor2's encoder (PyO3) runs for a list, whose
# exception PyO3 reports as "Exception ignored" and drops. The reference backend's encoder is
# cbor2; the 200th such call is well inside the import's one transaction.
_SWALLOWED_CTRL_C = """
import os, signal, sys
from memroot.cli.main import main
calls = 0
def probe(frame, event, arg):
    global calls
    if event == "call" and frame.f_code.co_name == "__instancecheck__":
        caller = frame.f_back
        if caller is not None and caller.f_code.co_name in ("_py_encode", "encode_normalized"):
            calls += 1
            if calls == 200:
                os.kill(os.getpid(), signal.SIGINT)  # run at this frame's first instruction
sys.setprofile(probe)
sys.argv = ["memroot", *sys.argv[1:]]
main()
"""


def test_ctrl_c_that_a_library_swallows_still_writes_nothing(tmp_path: Path) -> None:
    """A Ctrl-C whose KeyboardInterrupt cbor2 drops still stops an import: exit 130, no row.

    Before the SIGINT latch (``ledger.interrupts``) the import carried on and committed, exit 0.
    """
    path = _ledger(tmp_path)
    _event(path, "before the import")
    lines = tmp_path / "some.jsonl"
    line = {
        "kind": "event",
        "stream": "s",
        "actor_id": "a",
        "actor_type": "AI_AGENT",
        "role": "USER",
        "namespace_id": "default",
    }
    lines.write_text("".join(json.dumps({**line, "content": f"n{i}"}) + "\n" for i in range(600)))
    child = subprocess.run(
        [sys.executable, "-c", _SWALLOWED_CTRL_C, "-l", str(path), "import", str(lines)],
        capture_output=True,
        text=True,
        env={**os.environ, "MEMROOT_BACKEND": "python"},
        preexec_fn=_sigint_default,
        timeout=300,
    )
    assert child.returncode == 130, child.stdout + child.stderr
    assert "interrupted: nothing was written" in child.stderr
    assert "Traceback" not in child.stderr and "Exception ignored" not in child.stderr
    assert _count(path) == 2  # genesis and the one event before


def test_library_errors_name_the_commands_options(tmp_path: Path) -> None:
    """A library error naming expiry_days reads --expiry-days on the command line."""
    import memroot
    from memroot.memory_root.branches import set_branch_policy

    path = _ledger(tmp_path)
    with memroot.open(path, create=False) as mem:
        set_branch_policy(mem.ledger, "default", {"SIMULATION": None}, actor_id="op")
    size = len(ok(path, "log"))
    r = run(path, "branch", "create", "--type", "SIMULATION", "--purpose", "x")
    assert r.exit_code == 3, r.output
    assert "give --expiry-days" in r.stderr and "expiry_days" not in r.stderr
    assert len(ok(path, "log")) == size


def test_enum_options_take_any_case(tmp_path: Path) -> None:
    """`branch create --type simulation` works like `query --type fact`: any case."""
    path = _ledger(tmp_path)
    made = ok(path, "branch", "create", "--type", "simulation", "--purpose", "what if")
    assert made["type"] == "SIMULATION"
    assert ok(path, "branch", "list", "--state", "open")[0]["branch_id"] == made["branch_id"]
    assert ok(path, "query", "--type", "fact") == []
    bad = run(path, "branch", "create", "--type", "holiday", "--purpose", "x")
    assert bad.exit_code == 2 and "simulation" in bad.output.lower()
