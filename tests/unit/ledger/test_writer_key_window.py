"""The window a writer key signs in (docs/FORMAT.md 7.5), at its edges.

``WriterKey.may_sign`` is the one rule strict reads (``KeySet.signers_at``) and verify's step 6
apply; an off-by-one here would let a revoked key sign one more tree, or refuse an honest one.
"""

from __future__ import annotations

from memroot.ledger.keyset import KeySet, WriterKey


def test_main_window_is_after_the_add_and_up_to_the_revoke() -> None:
    """Added at entry 5 and revoked at entry 9: main sizes 6..9 only."""
    w = WriterKey("host-b", "vkey", added_by=5, revoked_by=9, branches={"b": 7})
    assert [s for s in range(3, 13) if w.may_sign("main", s)] == [6, 7, 8, 9]


def test_branch_window_ends_at_the_size_the_revoke_recorded() -> None:
    """Revoked with branch b at size 7: b's sizes up to 7; a branch it did not record: none."""
    w = WriterKey("host-b", "vkey", added_by=5, revoked_by=9, branches={"b": 7})
    assert [s for s in range(1, 11) if w.may_sign("b", s)] == list(range(1, 8))
    assert not any(w.may_sign("c", s) for s in range(1, 11))


def test_a_key_in_force_signs_every_later_main_size_and_any_branch_size() -> None:
    w = WriterKey("host-b", "vkey", added_by=5)
    assert [s for s in range(3, 9) if w.may_sign("main", s)] == [6, 7, 8]
    assert all(w.may_sign("b", s) for s in range(1, 9))


def test_signers_at_lists_the_writer_only_inside_its_window() -> None:
    ks = KeySet.start("example.org/log", "root-vkey")
    ks.writers["host-b"] = WriterKey("host-b", "w-vkey", added_by=5, revoked_by=9, branches={})
    assert "w-vkey" not in ks.signers_at("main", 5)
    assert "w-vkey" in ks.signers_at("main", 9)
    assert "w-vkey" not in ks.signers_at("main", 10)
    assert "w-vkey" not in ks.signers_at("b", 1)
