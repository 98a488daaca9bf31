"""RFC-0004 namespaces: policies recorded as operations, default deny, named refusals."""

from __future__ import annotations

from typing import Any

import pytest

from memroot.ledger.entries import EventInput
from memroot.projections import requests as rq
from memroot.projections import rules
from memroot.projections.query import Query, query
from memroot.projections.rules import PermissionRefused, RuleError

ADMIN = rq.Actor("alice", "HUMAN_USER", "team")
BOB = rq.Actor("bob", "AI_AGENT", "team")


def event(world: Any, actor: str, ns: str = "team") -> str:
    return world.append(
        EventInput(
            stream="s",
            actor_id=actor,
            actor_type="HUMAN_USER",
            role="USER",
            content="hello",
            namespace_id=ns,
        )
    ).id


def test_namespace_without_policy_is_open(world: Any) -> None:
    """Before NAMESPACE_CREATE anyone may write to a namespace (no policy, nothing to deny)."""
    world.assert_(by=BOB, evidence=[event(world, "bob")])


def test_policy_denies_by_default_and_names_actor_namespace_permission(world: Any) -> None:
    """Once a namespace has a policy, an actor without the permission is refused by name."""
    world.op(rq.namespace_create(ADMIN, "PROJECT"))
    snap = world.snapshot()
    with pytest.raises(PermissionRefused) as e:
        event(world, "bob")
    err = e.value
    assert (err.actor_id, err.namespace_id, err.permission) == ("bob", "team", "WRITE")
    assert "'bob'" in str(err) and "'team'" in str(err) and "WRITE" in str(err)
    assert err.rule == rules.NAMESPACE_POLICY
    assert world.snapshot() == snap
    ev = world.event(ns="other")
    with pytest.raises(PermissionRefused) as e2:
        world.assert_(by=BOB, evidence=[ev])
    assert e2.value.permission == "ASSERT"


def test_creator_is_admin_and_grants_are_not_hierarchical(world: Any) -> None:
    """The creator holds ADMIN; ASSERT does not imply WRITE or DEPRECATE."""
    world.op(rq.namespace_create(ADMIN, "PROJECT"))
    with pytest.raises(PermissionRefused):
        event(world, "alice")  # ADMIN is not WRITE
    world.op(rq.grant(ADMIN, "alice", "WRITE"))
    world.op(rq.grant(ADMIN, "bob", "ASSERT"))
    ev = event(world, "alice")
    oid = world.assert_(by=BOB, evidence=[ev])
    with pytest.raises(PermissionRefused) as e:
        world.op(rq.deprecate(BOB, oid, "mine"))
    assert e.value.permission == "DEPRECATE"
    world.op(rq.grant(ADMIN, "bob", "DEPRECATE"))
    world.op(rq.deprecate(BOB, oid, "mine"))


def test_grant_and_revoke_rules(world: Any) -> None:
    """Only ADMINs grant; no duplicate grants; revoke needs a grant; the last ADMIN stays."""
    with pytest.raises(RuleError) as e:
        world.op(rq.grant(ADMIN, "bob", "READ"))
    assert "NAMESPACE_CREATE it first" in str(e.value)
    world.op(rq.namespace_create(ADMIN, "PROJECT"))
    with pytest.raises(RuleError):
        world.op(rq.namespace_create(ADMIN, "PROJECT"))
    with pytest.raises(PermissionRefused) as e2:
        world.op(rq.grant(BOB, "bob", "ADMIN"))
    assert e2.value.permission == "ADMIN"
    world.op(rq.grant(ADMIN, "bob", "READ"))
    with pytest.raises(RuleError):
        world.op(rq.grant(ADMIN, "bob", "READ"))
    world.op(rq.revoke(ADMIN, "bob", "READ"))
    with pytest.raises(RuleError):
        world.op(rq.revoke(ADMIN, "bob", "READ"))
    with pytest.raises(RuleError) as e3:
        world.op(rq.revoke(ADMIN, "alice", "ADMIN"))
    assert "last ADMIN" in str(e3.value)
    world.op(rq.grant(ADMIN, "bob", "ADMIN"))
    world.op(rq.revoke(BOB, "alice", "ADMIN"))
    with pytest.raises(PermissionRefused):
        world.op(rq.grant(ADMIN, "carol", "READ"))


def test_citing_another_policed_namespace_needs_read(world: Any) -> None:
    """Evidence from a namespace with a policy may be cited only with READ on it."""
    world.op(rq.namespace_create(ADMIN, "PERSONAL"))
    world.op(rq.grant(ADMIN, "alice", "WRITE"))
    ev = event(world, "alice")
    agent = rq.Actor("bob", "AI_AGENT", "bobs")
    with pytest.raises(PermissionRefused) as e:
        world.assert_(by=agent, evidence=[ev])
    assert (e.value.namespace_id, e.value.permission) == ("team", "READ")
    world.op(rq.grant(ADMIN, "bob", "READ"))
    world.assert_(by=agent, evidence=[ev])


def test_query_for_an_actor_shows_only_readable_namespaces(world: Any) -> None:
    """query(actor=...) returns objects in open namespaces and in those the actor may READ."""
    open_obj = world.assert_("open", by=rq.Actor("x", namespace_id="public"))
    world.op(rq.namespace_create(ADMIN, "PROJECT"))
    world.op(rq.grant(ADMIN, "alice", "WRITE"))
    world.op(rq.grant(ADMIN, "alice", "ASSERT"))
    secret = world.assert_("secret", by=ADMIN, evidence=[event(world, "alice")])
    seen = {r.object.id for r in query(world.db, Query(actor="bob"))}
    assert seen == {open_obj}
    world.op(rq.grant(ADMIN, "bob", "READ"))
    granted_at = world.ledger.size() - 1
    assert {r.object.id for r in query(world.db, Query(actor="bob"))} == {open_obj, secret}
    before = Query(actor="bob", as_of=granted_at - 1)
    assert {r.object.id for r in query(world.db, before)} == {open_obj}
    assert {r.object.id for r in query(world.db, Query())} == {open_obj, secret}
