"""Property: no run of key operations by two hosts leaves a ledger ``verify --vkey ROOT`` rejects.

Two hosts share one ledger file, each through its own ``Ledger`` handle (a handle holds what it
read, as a host's process does): host 0 holds the root key, host 1 a copy of it (stale after a
rotation), and each may be handed writer keys. Random operations (add, revoke, rotate, appends
on ``main`` and on a branch, with any key a host holds) either land or are refused with nothing
written; afterwards the audit given only the genesis vkey passes.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memroot.ledger import keys
from memroot.ledger.entries import EventInput, _library_op
from memroot.ledger.errors import KeyFileError, RefusedError
from memroot.ledger.ledger import Ledger
from memroot.ledger.verify import audit
from memroot.ledger.vocab import OpType

ORIGIN = "example.org/property"

OPS = st.lists(
    st.tuples(
        st.sampled_from(["add", "revoke", "rotate", "append", "append-branch"]),
        st.integers(0, 1),  # the host
        st.integers(0, 5),  # which of its keys / which writer
    ),
    min_size=1,
    max_size=12,
)


def _event(n: int) -> EventInput:
    return EventInput(
        stream="s",
        actor_id="a",
        actor_type="HUMAN_USER",
        role="USER",
        namespace_id="ns",
        content=f"event {n}",
    )


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=OPS)
def test_random_key_operations_never_break_verify(ops: list[tuple[str, int, int]]) -> None:
    """Whatever lands, verify given only the root vkey passes; refused ops write nothing."""
    tmp = Path(tempfile.mkdtemp(prefix="memroot-keys-prop-"))
    try:
        path = tmp / "l.ledger"
        with Ledger.init(path, origin=ORIGIN, hooks=()) as first:
            root_vkey = first.vkey()
            create = first.system_op(OpType.BRANCH_CREATE, {"branch_id": "sim"})
            first.fork(_library_op(create), genesis={"branch_type": "SIMULATION"})
        twin = tmp / "twin.key"
        shutil.copy2(f"{path}.key", twin)
        held: list[list[Path]] = [[Path(f"{path}.key")], [twin]]
        handles = [
            Ledger.open(path, key_path=held[0][0], hooks=()),
            Ledger.open(path, key_path=held[1][0], hooks=()),
        ]
        writers: list[str] = []
        try:
            for n, (op, host, pick) in enumerate(ops):
                h = handles[host]
                try:
                    if op == "add":
                        out = tmp / f"w{n}.key"
                        keys.add_key(h, f"w{n}", out)
                        held[n % 2].append(out)
                        writers.append(f"w{n}")
                    elif op == "revoke" and writers:
                        keys.revoke_key(h, writers[pick % len(writers)])
                    elif op == "rotate":
                        keys.rotate_key(h)
                    elif op.startswith("append"):
                        key = held[host][pick % len(held[host])]
                        branch = "sim" if op == "append-branch" else "main"
                        with Ledger.open(path, key_path=key, hooks=()) as w:
                            w.append(_event(n), branch=branch)
                except (KeyFileError, RefusedError):
                    pass
        finally:
            for h in handles:
                h.close()
        with Ledger.open(path, readonly=True, hooks=()) as ledger:
            report = audit(ledger.store, origin=ORIGIN, vkeys=[root_vkey], update_trusted=False)
        assert report.ok, [str(f) for f in report.findings]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
