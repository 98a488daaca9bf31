"""``memroot demo``: a short story on a temporary ledger that ends by verifying it."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import apsw
import click

from memroot.cli.main import cli
from memroot.ledger import merkle
from memroot.ledger.backends.store import entry_key
from memroot.ledger.entries import EventInput, OpInput
from memroot.ledger.errors import IntegrityError
from memroot.ledger.ledger import Ledger
from memroot.ledger.note import Verifier, open_checkpoint, parse_tlog_proof
from memroot.ledger.trust import TrustedState
from memroot.ledger.verify import verify_path
from memroot.memory_root import Roots
from memroot.memory_root.branches import create_branch
from memroot.memory_root.falsify import Falsifier

__all__ = ["demo"]


def _say(text: str) -> None:
    click.echo(text)


@cli.command()
@click.option(
    "--keep",
    type=click.Path(path_type=Path),
    help="Work in this new directory and keep it (default: a temp dir, removed).",
)
def demo(keep: Path | None) -> None:
    """Tell a short story on a temporary ledger and verify it, then catch a tampered copy.

    The ledger option is not used: the demo makes its own ledgers.

    Example: memroot demo
    """
    from memroot.memory_root import stack

    workdir = Path(tempfile.mkdtemp(prefix="memroot-demo-")) if keep is None else keep
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        path = workdir / "agent.ledger"
        trusted = TrustedState(workdir / "trusted.json")
        _say(f"1. A new ledger at {path}, with an Ed25519 key (mode 0600) beside it.")
        ledger = Ledger.init(
            path,
            origin="demo.memroot.local/agent-7",
            snapshot_every=50,
            hooks=stack.default_hooks(),
        )
        vkey = ledger.vkey()
        _say(f"   vkey for auditors: {vkey}")

        _say("2. The agent hears a conversation; every event is appended to the chain.")
        said = [
            ("USER", "HUMAN_USER", "alice", "I take my tea without sugar."),
            ("ASSISTANT", "AI_AGENT", "agent-7", "Noted: tea, no sugar."),
            ("USER", "HUMAN_USER", "alice", "My card number is 4111 1111 1111 1111."),
            ("TOOL", "EXTERNAL_CONNECTOR", "calendar", "Meeting with Bob moved to Friday 10:00."),
        ]
        events = ledger.append_batch(
            EventInput(
                stream="session-1",
                actor_id=who,
                actor_type=atype,
                role=role,
                content=text,
                namespace_id="alice-personal",
            )
            for role, atype, who, text in said
        )
        for e, (_, _, who, text) in zip(events, said, strict=True):
            _say(f"   seq {e.seq} {e.entry_hash.hex()[:16]}  {who}: {text}")

        _say("3. It remembers a preference, citing the event it came from.")
        op = ledger.append(
            OpInput(
                op_type="ASSERT",
                actor_id="agent-7",
                actor_type="AI_AGENT",
                namespace_id="alice-personal",
                target_type="MEMORY_OBJECT",
                policy_version="demo-policy/1",
                payload={
                    "object_type": "PREFERENCE",
                    "epistemic_type": "OBSERVED",
                    "source_type": "USER_STATED",
                    "evidence_ids": [events[0].id],
                    "value": "Alice takes tea without sugar",
                    "confidence": 0.9,
                    "salience": 0.7,
                },
            )
        )
        _say(f"   seq {op.seq} ASSERT {op.id}")

        _say("4. Alice asks to forget her card number: a TOMBSTONE erases content and salt.")
        tomb = ledger.append(
            OpInput(
                op_type="TOMBSTONE",
                actor_id="alice",
                actor_type="HUMAN_USER",
                namespace_id="alice-personal",
                policy_version="demo-policy/1",
                payload={
                    "target_event_id": events[2].id,
                    "reason": "right to erasure",
                    "policy_ref": "gdpr-art-17",
                },
            )
        )
        _say(
            f"   seq {tomb.seq} TOMBSTONE; content of seq {events[2].seq} is now "
            f"{ledger.content(events[2].seq)!r}, its commitment stays in the chain"
        )

        _say("5. A snapshot folds deterministic projections into a memory_root, itself an entry;")
        _say("   a signed checkpoint (C2SP signed note) then commits to the whole tree.")
        roots = Roots(ledger)
        snap = roots.snapshot()
        _say(
            f"   memory_root {snap.record.root.hex()[:16]}... at seq {snap.record.seq} "
            f"(high-water seq {snap.record.high_water.seq})"
        )
        signed = ledger.checkpoint()
        for line in signed.note.splitlines():
            _say(f"   | {line}")

        _say("5b. A SIMULATION branch explores a what-if without touching canonical memory.")
        _, genesis = create_branch(
            ledger,
            branch_type="SIMULATION",
            actor_id="agent-7",
            purpose="what if Alice took sugar?",
            branch_id="sim-sugar",
        )
        main_root = ledger.root()
        ledger.append(
            EventInput(
                stream="sim",
                actor_id="agent-7",
                actor_type="AI_AGENT",
                role="ASSISTANT",
                content="Suppose Alice now takes sugar.",
                namespace_id="alice-personal",
            ),
            branch=genesis.branch,
        )
        ledger.checkpoint(genesis.branch)
        unchanged = ledger.root() == main_root
        _say(
            f"   branch {genesis.branch}: {ledger.size(genesis.branch)} entries, anchored to "
            f"main's BRANCH_CREATE; canonical root unchanged by it: {unchanged}"
        )
        ledger.checkpoint()

        _say("5c. The preference turns out wrong: falsifying it flips its state and nothing else;")
        _say("    a bounded cascade, only when asked, marks what was built on it stale.")
        falsifier = Falsifier(ledger)
        falsifier.falsify(op.id, "Alice was joking about the tea", actor="alice")
        plan = falsifier.plan(op.id, max_depth=2, max_items=10)
        _say(
            f"   dry run: {len(plan.touched)} item(s) within depth 2, "
            f"{len(plan.beyond)} beyond the bound"
        )
        done = falsifier.cascade(
            op.id, max_depth=2, max_items=10, reason="tea preference falsified"
        )
        _say(f"   CASCADE entry seq {done.appended[-1].seq} marked stale:")
        for step in done.plan.touched:
            root, _, rest = step.item.id.partition(":")
            _say(
                f"     depth {step.depth}: {step.item.kind} {root[:16]}{':' if rest else ''}{rest}"
            )
        ledger.checkpoint()

        _say("6. An auditor checks that Alice's first message is in that tree.")
        proof = parse_tlog_proof(ledger.tlog_proof(events[0].seq))
        cp = open_checkpoint(proof.checkpoint_note, [Verifier.from_vkey(vkey)]).checkpoint
        merkle.verify_inclusion(
            events[0].entry_hash, proof.index, cp.size, list(proof.proof), cp.root
        )
        _say(
            f"   inclusion proof of seq {proof.index} in tree {cp.size}: "
            f"{len(proof.proof)} hashes, verified against the signed root"
        )
        calendar_seq = events[3].seq
        calendar_key = entry_key(ledger.branch_row().no, calendar_seq)
        ledger.close()

        _say("7. Full verification, every auditor step (memory roots and state replayed too):")
        with Ledger.open(path, readonly=True) as reader:
            checks = stack.replay_checks(reader)
        report = verify_path(path, trusted=trusted, vkeys=[vkey], checks=checks)
        for note in report.notes:
            _say(f"   note: {note}")
        _say(
            f"   {'OK' if report.ok else 'FAILED'}: {report.entries} entries on "
            f"{report.branches} branches, {report.checkpoints} checkpoints, steps "
            f"{sorted(report.steps_checked)} checked, {len(report.findings)} violations"
        )
        if not report.ok:
            for f in report.findings:
                _say(f"   VIOLATION {f}")
            raise click.exceptions.Exit(1)

        _say("8. Someone edits the stored copy of the calendar event behind the agent's back...")
        forged = workdir / "tampered.ledger"
        shutil.copy(path, forged)
        db = apsw.Connection(str(forged))
        db.execute(
            "UPDATE entries SET content = ? WHERE k = ?",
            (b"Meeting with Bob cancelled.", calendar_key),
        )
        db.close()
        caught = verify_path(forged, trusted=TrustedState(workdir / "auditor2.json"), vkeys=[vkey])
        for f in caught.findings:
            _say(f"   caught: {f}")
        if caught.ok:  # pragma: no cover - the demo proves the opposite
            raise click.ClickException("the tampered copy verified; this is a bug")
        # Reads are strict too: the edited content is never served, not even without a verify.
        with Ledger.open(forged, readonly=True) as tampered:
            try:
                tampered.read(calendar_seq)
            except IntegrityError as e:
                _say(f"   and a plain read refuses it: {e}")
            else:  # pragma: no cover - the demo proves the opposite
                raise click.ClickException("the tampered entry was served; this is a bug")
        _say("Done: the genuine ledger verifies, the tampered copy does not, and is not read.")
    finally:
        if keep is None:
            shutil.rmtree(workdir, ignore_errors=True)
