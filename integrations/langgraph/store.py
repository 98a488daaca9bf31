"""``MemrootStore``: LangGraph's long-term memory store (``BaseStore``) on a memroot ledger.

Every put appends one event of type ``langgraph.store.put`` whose content is the item
(namespace, key, JSON value, timestamps); a delete appends a ``TOMBSTONE`` for every stored
version of the item, so its content is erased and the chain still verifies. Reads re-check
each item's entry against the signed tree and its content commitment (``_strict``), and
raise ``IntegrityError`` instead of returning a tampered item.

Search is lexical: ``query`` keeps items whose JSON value contains every word of it (case
folded); there is no embedding index, and ``score`` is None. ``filter`` compares value
fields for equality, or with ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``. TTLs are
refused (``NotImplementedError``, LangGraph's convention for a store without TTLs).
"""

from __future__ import annotations

import asyncio
import builtins
import datetime as dt
import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from memroot.integrations.langgraph import _index
from memroot.integrations.langgraph._ledger import AsyncLedgerTables, LedgerTables
from memroot.integrations.langgraph._tables import PUT_TYPE, STORE, ns_text
from memroot.ledger.entries import CANONICAL_BRANCH, now_us
from memroot.ledger.errors import IntegrityError, ValidationError
from memroot.ledger.ledger import Ledger

if TYPE_CHECKING:
    from memroot.memory import Memory

__all__ = ["PUT_TYPE", "AsyncMemrootStore", "MemrootStore"]

_NO_TTL: Final = (
    "TTL is not supported by MemrootStore (an item lives until it is deleted, and its "
    "ledger entry for good); set ttl=None"
)
_NO_INDEX: Final = "MemrootStore has no embedding index (search is lexical); set index=None"


def _when(us: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(us / 1e6, dt.UTC)


def _compare(value: Any, op: str, wanted: Any) -> bool:
    if op == "$eq":
        return bool(value == wanted)
    if op == "$ne":
        return bool(value != wanted)
    if op in ("$gt", "$gte", "$lt", "$lte"):
        if not isinstance(wanted, int | float) or isinstance(wanted, bool):
            raise ValidationError(f"filter {op} needs a number, got {wanted!r}", field="filter")
        if not isinstance(value, int | float) or isinstance(value, bool):
            return False
        a, b = float(value), float(wanted)
        if op == "$gt":
            return a > b
        if op == "$gte":
            return a >= b
        return a < b if op == "$lt" else a <= b
    raise ValidationError(f"filter operator {op!r} is not one of $eq $ne $gt $gte $lt $lte")


def _matches(value: Any, wanted: Any) -> bool:
    """Whether a value field satisfies a filter value (nested maps compare field by field)."""
    if isinstance(wanted, dict):
        if any(str(k).startswith("$") for k in wanted):
            return all(_compare(value, str(k), v) for k, v in wanted.items())
        return isinstance(value, dict) and all(_matches(value.get(k), v) for k, v in wanted.items())
    return bool(value == wanted)


def _path_matches(cond: MatchCondition, ns: tuple[str, ...]) -> bool:
    path = tuple(cond.path)
    if len(ns) < len(path):
        return False
    if cond.match_type not in ("prefix", "suffix"):
        raise ValidationError(f"match_type must be 'prefix' or 'suffix', not {cond.match_type!r}")
    if cond.match_type == "suffix":
        ns, path = ns[::-1], path[::-1]
    return all(p == "*" or k == p for k, p in zip(ns, path, strict=False))


# mypy calls the bases disjoint (both have __slots__); CPython allows it, since BaseStore's
# only slot is __weakref__.
class MemrootStore(BaseStore, LedgerTables):  # type: ignore[misc]
    """A LangGraph ``BaseStore`` on a memroot ledger (see the module docstring)."""

    __slots__ = ()  # the attributes are LedgerTables' slots
    _TABLES = STORE

    def __init__(
        self,
        ledger: Ledger | Memory,
        *,
        branch: str = CANONICAL_BRANCH,
        actor: str = "langgraph",
        actor_type: str = "SYSTEM_PROCESS",
        namespace: str = "langgraph",
        index: None = None,
        ttl: None = None,
    ) -> None:
        """Wrap an open ledger (or ``Memory``); entries go to ``branch`` as ``actor``.

        ``index`` and ``ttl`` are ``SqliteStore``'s options: neither is supported, so
        anything but None is refused, as LangGraph's stores refuse what they lack.

        Raises:
            NotImplementedError: an ``index`` (embeddings) or ``ttl`` configuration.
            ValidationError: the ledger was opened without strict reads.
            IntegrityError: an entry of the branch does not check out.
        """
        if ttl is not None:
            raise NotImplementedError(_NO_TTL)
        if index is not None:
            raise NotImplementedError(_NO_INDEX)
        self._open(ledger, branch=branch, actor=actor, actor_type=actor_type, namespace=namespace)

    # -- reads -------------------------------------------------------------------------------

    def _item(self, row: tuple[Any, ...]) -> Item:
        nst, key, seq = str(row[0]), str(row[1]), int(row[2])
        entry, content = self._checked(seq)
        namespace = tuple(json.loads(nst))
        if (
            content is None
            or _index.event_type(entry) != PUT_TYPE
            or tuple(content.get("namespace", ())) != namespace
            or content.get("key") != key
        ):
            raise IntegrityError(
                f"the store index points {nst}/{key} at entry {self.branch}:{seq}, which "
                "does not hold that item",
                branch=self.branch,
                seq=seq,
            )
        return Item(
            value=content["value"],
            key=key,
            namespace=namespace,
            created_at=_when(int(content["created_at"])),
            updated_at=_when(int(content["updated_at"])),
        )

    # -- operations ----------------------------------------------------------------------------

    def _get(self, op: GetOp) -> Item | None:
        row = self._rows(
            "SELECT ns, key, seq FROM lg_store WHERE branch = ? AND ns = ? AND key = ? "
            "ORDER BY seq DESC LIMIT 1",
            (self.branch, ns_text(op.namespace), op.key),
        )
        return self._item(row[0]) if row else None

    def _search(self, op: SearchOp) -> builtins.list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        words = [w.casefold() for w in (op.query or "").split()]
        rows = self._rows(
            "SELECT ns, key, MAX(seq), updated FROM lg_store WHERE branch = ? GROUP BY ns, key "
            "ORDER BY updated DESC, ns, key",
            (self.branch,),
        )
        out: builtins.list[SearchItem] = []
        skipped = 0
        for row in rows:
            if tuple(json.loads(str(row[0])))[: len(prefix)] != prefix:
                continue
            item = self._item(tuple(row))
            if op.filter and not all(_matches(item.value.get(k), v) for k, v in op.filter.items()):
                continue
            if words:
                text = json.dumps(item.value, ensure_ascii=False).casefold()
                if not all(w in text for w in words):
                    continue
            if skipped < op.offset:
                skipped += 1
                continue
            out.append(
                SearchItem(
                    namespace=item.namespace,
                    key=item.key,
                    value=item.value,
                    created_at=item.created_at,
                    updated_at=item.updated_at,
                    score=None,
                )
            )
            if len(out) >= op.limit:
                break
        return out

    def _list_namespaces(self, op: ListNamespacesOp) -> builtins.list[tuple[str, ...]]:
        found = {
            tuple(json.loads(str(r[0])))
            for r in self._rows("SELECT DISTINCT ns FROM lg_store WHERE branch = ?", (self.branch,))
        }
        if op.match_conditions:
            found = {n for n in found if all(_path_matches(c, n) for c in op.match_conditions)}
        if op.max_depth is not None:
            found = {n[: op.max_depth] for n in found}
        return sorted(found)[op.offset : op.offset + op.limit]

    def _put(self, ops: builtins.list[PutOp]) -> None:
        items: builtins.list[Any] = []
        for op in ops:
            ns = ns_text(op.namespace)
            if op.value is None:
                events = [
                    str(self._checked(int(r[0]))[0].body["id"])
                    for r in self._rows(
                        "SELECT seq FROM lg_store WHERE branch = ? AND ns = ? AND key = ?",
                        (self.branch, ns, op.key),
                    )
                ]
                items += self._tombstones(events, "langgraph store delete")
                continue
            if not isinstance(op.value, dict):
                raise ValidationError(
                    f"a store value is a JSON object, not {type(op.value).__name__}",
                    field="value",
                )
            have = self._rows(
                "SELECT created FROM lg_store WHERE branch = ? AND ns = ? AND key = ? "
                "ORDER BY seq DESC LIMIT 1",
                (self.branch, ns, op.key),
            )
            now = now_us()
            content = {
                "namespace": list(op.namespace),
                "key": op.key,
                "value": dict(op.value),
                "created_at": int(have[0][0]) if have else now,
                "updated_at": now,
            }
            try:
                event = self._event(PUT_TYPE, content)
            except (TypeError, ValueError) as e:
                raise ValidationError(
                    f"the value of {op.namespace}/{op.key} is not JSON: {e}", field="value"
                ) from e
            items.append(event)
        self._write(items)

    def batch(self, ops: Iterable[Op]) -> builtins.list[Result]:
        """Run the operations: reads see the store before the batch; puts then land together.

        Several puts of one key in a batch: the last one wins. All puts are one transaction.

        Raises:
            IntegrityError: an item to be returned was tampered with (nothing is returned).
            ValidationError: a value that is not a JSON object, or a bad filter.
        """
        results: builtins.list[Result] = []
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        with self._lock:
            self._sync()
            for op in ops:
                if isinstance(op, GetOp):
                    results.append(self._get(op))
                elif isinstance(op, SearchOp):
                    results.append(self._search(op))
                elif isinstance(op, ListNamespacesOp):
                    results.append(self._list_namespaces(op))
                elif isinstance(op, PutOp):
                    if op.ttl is not None:
                        raise NotImplementedError(_NO_TTL)
                    if op.index not in (None, False):
                        raise NotImplementedError(_NO_INDEX)
                    puts.pop((op.namespace, op.key), None)
                    puts[(op.namespace, op.key)] = op
                    results.append(None)
                else:
                    raise ValueError(f"unknown store operation {type(op).__name__}")
            self._put(builtins.list(puts.values()))
        return results

    async def abatch(self, ops: Iterable[Op]) -> builtins.list[Result]:
        """Async ``batch`` (run in a worker thread; one lock with the sync methods)."""
        materialized = builtins.list(ops)
        return await asyncio.to_thread(self.batch, materialized)


class AsyncMemrootStore(AsyncLedgerTables, MemrootStore):  # type: ignore[misc]
    """``MemrootStore`` opened and closed from ``asyncio``, like ``AsyncSqliteStore``.

    ``async with AsyncMemrootStore.from_conn_string("agent.ledger") as store:``; its async
    methods (``aput``, ``aget``, ``asearch``, ...) run in worker threads under the ledger's
    one lock, shared with a saver on the same ledger.
    """

    __slots__ = ()
