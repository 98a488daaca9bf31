"""``MemrootSaver``: a LangGraph checkpoint saver whose checkpoints are ledger entries.

Every ``put`` appends one event of type ``langgraph.checkpoint`` and every ``put_writes``
one of type ``langgraph.writes`` (docs/FORMAT.md, "LangGraph checkpoints"); their content
is the serialized checkpoint (or writes), so it sits behind the entry's salted content
commitment, in the Merkle tree, under the signed checkpoint the append's own commit signs.
A checkpoint stores the channel values that changed and refers to the entry that holds each
unchanged one (docs/FORMAT.md §9). Deleting (``delete_thread``, ``delete_for_runs``,
``prune``) appends ``TOMBSTONE``s: the content is erased and ``memroot verify`` still passes
("erased by entry N").

Reads are strict: ``get_tuple`` and ``list`` re-check every entry they serve against the
signed tree and its content commitment, look up checkpoints in a private index folded from
those entries (the file's lookup tables are compared with it), and raise ``IntegrityError``
instead of serving a tampered checkpoint or rolling a thread back. Reads never sign.

Example::

    with MemrootSaver.from_conn_string("agent.ledger") as saver:
        graph = builder.compile(checkpointer=saver)
        graph.invoke(inputs, {"configurable": {"thread_id": "t1"}})
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import builtins
import json
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from memroot.integrations.langgraph import _index
from memroot.integrations.langgraph._ledger import AsyncLedgerTables, LedgerTables
from memroot.integrations.langgraph._tables import CHECKPOINT_TYPE, SAVER, WRITES_TYPE
from memroot.ledger.entries import CANONICAL_BRANCH, EventInput
from memroot.ledger.errors import IntegrityError
from memroot.ledger.ledger import Ledger

if TYPE_CHECKING:
    from memroot.memory import Memory

__all__ = ["CHECKPOINT_TYPE", "WRITES_TYPE", "AsyncMemrootSaver", "MemrootSaver"]


_REF: Final = "ref"
"""The type of a channel value held by an earlier checkpoint entry: ``[channel, version,
"ref", seq]`` (docs/FORMAT.md §9)."""


def _b64(typed: tuple[str, bytes]) -> list[str]:
    return [typed[0], base64.b64encode(typed[1]).decode("ascii")]


def _unb64(value: Any) -> tuple[str, bytes]:
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)):
        raise IntegrityError(f"a serialized value must be [type, base64], got {value!r:.80}")
    return value[0], base64.b64decode(value[1], validate=True)


def _version_key(version: Any) -> str:
    return json.dumps(version)


class MemrootSaver(BaseCheckpointSaver[int], LedgerTables):
    """A ``BaseCheckpointSaver`` on a memroot ledger (see the module docstring).

    ``ledger`` is an open ``Ledger`` (opened with ``memroot.memory.ledger_hooks()``) or a
    ``Memory``; ``branch`` is where the entries go; ``actor`` and ``namespace`` are the
    events' ``actor_id`` and ``namespace_id``. Sync and async methods share one lock, so a
    saver may be used from several threads or tasks; the async ones run the sync ones in a
    worker thread.
    """

    _TABLES = SAVER

    def __init__(
        self,
        ledger: Ledger | Memory,
        *,
        branch: str = CANONICAL_BRANCH,
        actor: str = "langgraph",
        actor_type: str = "SYSTEM_PROCESS",
        namespace: str = "langgraph",
        serde: SerializerProtocol | None = None,
    ) -> None:
        """Wrap an open ledger; prefer ``MemrootSaver.from_conn_string``."""
        super().__init__(serde=serde)
        self._open(ledger, branch=branch, actor=actor, actor_type=actor_type, namespace=namespace)

    # -- the index -----------------------------------------------------------------------------

    def _content(self, seq: int) -> dict[str, Any]:
        """Return the checked content of an entry the index points to.

        Raises:
            IntegrityError: the entry is tampered, or erased although the index names it.
        """
        entry, content = self._checked(seq)
        if content is None or _index.event_type(entry) not in SAVER.types:
            raise IntegrityError(
                f"the index points at entry {self.branch}:{seq}, which is not a live "
                "LangGraph event (run the saver again to refold its tables)",
                branch=self.branch,
                seq=seq,
            )
        return content

    # -- reads ---------------------------------------------------------------------------------

    def _tuple(self, thread: str, ns: str, row: tuple[Any, ...]) -> CheckpointTuple:
        """Return the checkpoint of an index row, read and checked.

        Raises:
            IntegrityError: an entry is tampered, or holds no well-formed checkpoint.
        """
        try:
            return self._read_tuple(thread, ns, row)
        except (KeyError, TypeError, ValueError, binascii.Error) as e:
            raise IntegrityError(
                f"entry {self.branch}:{row[2]} holds no well-formed checkpoint of thread "
                f"{thread!r} ({type(e).__name__}: {e})",
                branch=self.branch,
                seq=int(row[2]),
                step=4,
            ) from e

    def _read_tuple(self, thread: str, ns: str, row: tuple[Any, ...]) -> CheckpointTuple:
        checkpoint_id, parent, seq = str(row[0]), row[1], int(row[2])
        c = self._content(seq)
        if (c["thread_id"], c["checkpoint_ns"], c["checkpoint_id"]) != (thread, ns, checkpoint_id):
            raise IntegrityError(
                f"entry {self.branch}:{seq} holds checkpoint {c['checkpoint_id']} of thread "
                f"{c['thread_id']!r}, not the one the index names",
                branch=self.branch,
                seq=seq,
            )
        # The entry's serialized parts, base64-decoded once per checked state of the file.
        decoded = self._memo.get(seq)
        if decoded is None:
            decoded = self._memo[seq] = (
                _unb64(c["checkpoint"]),
                _unb64(c["metadata"]),
                [(ch, _unb64([t, d])) for ch, t, d in self._literals(seq, c) if t != "empty"],
            )
        typed_cp, typed_md, typed_values = decoded
        loads = self.serde.loads_typed
        checkpoint: Checkpoint = loads(typed_cp)
        checkpoint["channel_values"] = {ch: loads(v) for ch, v in typed_values}
        metadata: CheckpointMetadata = loads(typed_md)
        pending: list[PendingWrite] = [
            (task_id, channel, loads(_unb64([typ, data])))
            for (_path, task_id, _idx), (channel, typ, data) in sorted(
                self._writes(thread, ns, checkpoint_id).items()
            )
        ]
        config: RunnableConfig = {
            "configurable": {
                "thread_id": thread,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint_id,
            }
        }
        parent_config: RunnableConfig | None = None
        if parent is not None:
            parent_config = {
                "configurable": {
                    "thread_id": thread,
                    "checkpoint_ns": ns,
                    "checkpoint_id": str(parent),
                }
            }
        return CheckpointTuple(config, checkpoint, metadata, parent_config, pending)

    def _writes(
        self, thread: str, ns: str, checkpoint_id: str, task_id: str | None = None
    ) -> dict[tuple[str, str, int], tuple[str, str, str]]:
        """Return a checkpoint's pending writes (of one task), checked, by (path, task, index).

        The newest entry's write of each (task, index) wins: a special channel's later write
        replaces the earlier one.
        """
        rows = self._rows(
            "SELECT seq FROM lg_writes WHERE branch = ? AND thread = ? AND ns = ? "
            "AND checkpoint = ? ORDER BY seq",
            (self.branch, thread, ns, checkpoint_id),
        )
        out: dict[tuple[str, str, int], tuple[str, str, str]] = {}
        for (seq,) in rows:
            c = self._content(int(seq))
            if task_id is not None and c["task_id"] != task_id:
                continue
            if (c["thread_id"], c["checkpoint_ns"], c["checkpoint_id"]) != (
                thread,
                ns,
                checkpoint_id,
            ):
                raise IntegrityError(
                    f"entry {self.branch}:{seq} holds writes of another checkpoint than the "
                    "index names",
                    branch=self.branch,
                    seq=int(seq),
                )
            for idx, channel, typ, data in c["writes"]:
                out[(str(c["task_path"]), str(c["task_id"]), int(idx))] = (channel, typ, data)
        return out

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Return the checkpoint ``config`` names (the thread's newest without an id).

        Raises:
            IntegrityError: the entry holding it was tampered with; nothing is served.
        """
        conf = config["configurable"]
        thread, ns = str(conf["thread_id"]), str(conf.get("checkpoint_ns", ""))
        checkpoint_id = get_checkpoint_id(config)
        with self._lock:
            self._sync()
            if checkpoint_id:
                row = self._rows(
                    "SELECT id, parent, seq FROM lg_checkpoints WHERE branch = ? AND thread = ? "
                    "AND ns = ? AND id = ? ORDER BY seq DESC LIMIT 1",
                    (self.branch, thread, ns, checkpoint_id),
                )[:1]
            else:
                row = self._rows(
                    "SELECT id, parent, seq FROM lg_checkpoints WHERE branch = ? AND thread = ? "
                    "AND ns = ? ORDER BY id DESC, seq DESC LIMIT 1",
                    (self.branch, thread, ns),
                )[:1]
            return self._tuple(thread, ns, row[0]) if row else None

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Yield checkpoints newest first, by thread, namespace, metadata ``filter``, ``before``.

        Raises:
            IntegrityError: an entry to be listed was tampered with.
        """
        where = ["branch = ?"]
        args: list[Any] = [self.branch]
        if config is not None:
            conf = config["configurable"]
            if conf.get("thread_id") is not None:
                where.append("thread = ?")
                args.append(str(conf["thread_id"]))
            if conf.get("checkpoint_ns") is not None:
                where.append("ns = ?")
                args.append(str(conf["checkpoint_ns"]))
            if get_checkpoint_id(config):
                where.append("id = ?")
                args.append(get_checkpoint_id(config))
        if before is not None and get_checkpoint_id(before):
            where.append("id < ?")
            args.append(get_checkpoint_id(before))
        with self._lock:
            self._sync()
            rows = self._rows(
                "SELECT thread, ns, id, parent, MAX(seq) FROM lg_checkpoints WHERE "
                + " AND ".join(where)
                + " GROUP BY thread, ns, id ORDER BY thread, ns, id DESC",
                args,
            )
            rows.sort(key=lambda r: str(r[2]), reverse=True)
            out: list[CheckpointTuple] = []
            for thread, ns, cid, parent, seq in rows:
                if limit is not None and len(out) >= limit:
                    break
                t = self._tuple(str(thread), str(ns), (cid, parent, seq))
                if filter and not all(t.metadata.get(k) == v for k, v in filter.items()):
                    continue
                out.append(t)
        yield from out

    # -- writes --------------------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Append the checkpoint as one ``langgraph.checkpoint`` event; return its config.

        The event holds every channel value the checkpoint's versions name (those in
        ``new_versions`` from ``checkpoint``, the others copied, already serialized, from
        the parent checkpoint's entry when it holds that version), so each checkpoint entry
        stands alone: erasing one never breaks another.
        """
        conf = config["configurable"]
        thread, ns = str(conf["thread_id"]), str(conf.get("checkpoint_ns", ""))
        c: dict[str, Any] = dict(checkpoint)
        values: dict[str, Any] = c.pop("channel_values", {})
        md = get_checkpoint_metadata(config, metadata)
        parent_id = conf.get("checkpoint_id")

        def build() -> builtins.list[EventInput]:
            # In the write transaction, on tables synced there (``_write``).
            inherited = {} if not parent_id else self._parent_values(thread, ns, str(parent_id))
            channels: list[list[Any]] = []
            for channel, version in sorted(checkpoint["channel_versions"].items()):
                key = _version_key(version)
                stored = None if channel in new_versions else inherited.get((channel, key))
                if channel in new_versions:
                    typed = (
                        _b64(self.serde.dumps_typed(values[channel]))
                        if channel in values
                        else ["empty", ""]
                    )
                elif stored is not None:
                    typed = stored
                elif channel in values:
                    typed = _b64(self.serde.dumps_typed(values[channel]))
                else:
                    continue
                channels.append([channel, key, *typed])
            run_id = md.get("run_id")
            content = {
                "thread_id": thread,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
                "parent_checkpoint_id": parent_id,
                "run_id": None if run_id is None else str(run_id),
                "checkpoint": _b64(self.serde.dumps_typed(c)),
                "metadata": _b64(self.serde.dumps_typed(md)),
                "channels": channels,
            }
            return [self._event(CHECKPOINT_TYPE, content)]

        with self._lock:
            self._write(build)
        return {
            "configurable": {
                "thread_id": thread,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def _parent_values(self, thread: str, ns: str, parent_id: str) -> dict[tuple[str, str], Any]:
        """Return a reference to each of the parent checkpoint's ``(channel, version)`` values.

        ``["ref", seq]``: the entry that holds the serialized value (the parent's, or the one
        the parent refers to). Empty when the parent is not stored (or was erased): the values
        are then serialized from the checkpoint itself.
        """
        row = self._rows(
            "SELECT seq FROM lg_checkpoints WHERE branch = ? AND thread = ? AND ns = ? AND id = ? "
            "ORDER BY seq DESC LIMIT 1",
            (self.branch, thread, ns, parent_id),
        )
        if not row:
            return {}
        at = int(row[0][0])
        return {
            (ch, v): [typ, data] if typ == _REF else [_REF, at]
            for ch, v, typ, data in self._content(at)["channels"]
        }

    def _literals(self, seq: int, c: dict[str, Any]) -> builtins.list[tuple[str, str, str]]:
        """Return ``(channel, type, base64)`` of checkpoint entry ``seq``, references resolved.

        Raises:
            IntegrityError: a reference to an entry that does not hold that value (checked).
        """
        out = []
        for ch, v, typ, data in c["channels"]:
            if typ != _REF:
                out.append((ch, typ, data))
                continue
            held = self._content(int(data))
            found = [
                (t2, d2)
                for c2, v2, t2, d2 in held.get("channels", ())
                if c2 == ch and v2 == v and t2 != _REF
            ]
            if (held.get("thread_id"), held.get("checkpoint_ns")) != (
                c["thread_id"],
                c["checkpoint_ns"],
            ) or len(found) != 1:
                raise IntegrityError(
                    f"checkpoint entry {self.branch}:{seq} takes channel {ch!r} version {v} from "
                    f"entry {data}, which does not hold it",
                    branch=self.branch,
                    seq=seq,
                )
            out.append((ch, *found[0]))
        return out

    def _standalone(self, seq: int) -> dict[str, Any]:
        """Return checkpoint entry ``seq``'s content with every reference replaced by its value."""
        c = self._content(seq)
        versions = {ch: v for ch, v, *_ in c["channels"]}
        return {
            **c,
            "channels": [[ch, versions[ch], typ, data] for ch, typ, data in self._literals(seq, c)],
        }

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Append a task's pending writes as one ``langgraph.writes`` event.

        As LangGraph's savers do, a regular write already stored for ``(task_id, index)``
        is kept; the special channels (errors, interrupts, ...) replace theirs.
        """
        conf = config["configurable"]
        thread, ns = str(conf["thread_id"]), str(conf.get("checkpoint_ns", ""))
        checkpoint_id = str(conf["checkpoint_id"])

        def build() -> builtins.list[EventInput]:
            # In the write transaction, on tables synced there (``_write``).
            have = {idx for _, _, idx in self._writes(thread, ns, checkpoint_id, task_id)}
            rows = []
            for i, (channel, value) in enumerate(writes):
                idx = WRITES_IDX_MAP.get(channel, i)
                if idx >= 0 and idx in have:
                    continue
                rows.append([idx, channel, *_b64(self.serde.dumps_typed(value))])
            if not rows:
                return []
            content = {
                "thread_id": thread,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint_id,
                "task_id": task_id,
                "task_path": task_path,
                "writes": rows,
            }
            return [self._event(WRITES_TYPE, content)]

        with self._lock:
            self._write(build)

    # -- deleting and copying ------------------------------------------------------------------

    def _erase(
        self, where: str, args: Sequence[Any], reason: str, threads: Sequence[str] = ()
    ) -> None:
        """TOMBSTONE the events of the matched checkpoints, their writes, ``threads``' writes.

        A checkpoint that stays but takes a channel value from an entry being erased is first
        appended again whole (same id, every value in it), in the same batch, and its old
        entry erased too: erasing never breaks a checkpoint that stays.
        """
        with self._lock:
            self._sync()
            found = self._rows(
                f"SELECT thread, ns, id, seq FROM lg_checkpoints WHERE branch = ? AND {where}",
                (self.branch, *args),
            )
            gone = {int(r[3]) for r in found}
            copies = self._copies_before_erasing({(str(r[0]), str(r[1])) for r in found}, gone)
            seqs = sorted(gone)
            for thread, ns, cid, _ in found:
                seqs += [
                    int(r[0])
                    for r in self._rows(
                        "SELECT seq FROM lg_writes WHERE branch = ? AND thread = ? AND ns = ? "
                        "AND checkpoint = ?",
                        (self.branch, thread, ns, cid),
                    )
                ]
            for thread in threads:
                seqs += [
                    int(r[0])
                    for r in self._rows(
                        "SELECT seq FROM lg_writes WHERE branch = ? AND thread = ?",
                        (self.branch, thread),
                    )
                ]
            # The event ids from the entries themselves (checked), not from a table.
            events = [str(self._checked(s)[0].body["id"]) for s in sorted(set(seqs))]
            self._write([*copies, *self._tombstones(events, reason)])

    def _copies_before_erasing(
        self, threads: set[tuple[str, str]], gone: set[int]
    ) -> builtins.list[EventInput]:
        """Return whole copies of the checkpoints that stay but take values from ``gone``.

        Adds the copied checkpoints' entries to ``gone`` (until nothing else refers to them).
        """
        copies: builtins.list[EventInput] = []
        changed = True
        while changed:
            changed = False
            for thread, ns in sorted(threads):
                for (s,) in self._rows(
                    "SELECT seq FROM lg_checkpoints WHERE branch = ? AND thread = ? AND ns = ?",
                    (self.branch, thread, ns),
                ):
                    at = int(s)
                    if at in gone:
                        continue
                    c = self._content(at)
                    if any(t == _REF and int(d) in gone for _, _, t, d in c["channels"]):
                        copies.append(self._event(CHECKPOINT_TYPE, self._standalone(at)))
                        gone.add(at)
                        changed = True
        return copies

    def delete_thread(self, thread_id: str) -> None:
        """Erase every checkpoint and write of a thread (``TOMBSTONE``s; the chain verifies)."""
        t = str(thread_id)
        self._erase("thread = ?", [t], "langgraph delete_thread", threads=[t])

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Erase the checkpoints (and their writes) whose metadata names one of the runs."""
        ids = [str(r) for r in run_ids]
        if ids:
            marks = ", ".join("?" * len(ids))
            self._erase(f"run_id IN ({marks})", ids, "langgraph delete_for_runs")

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Erase old checkpoints: all but the newest per namespace, or all (``delete``).

        Raises:
            ValueError: an unknown strategy.
        """
        ids = [str(t) for t in thread_ids]
        if not ids:
            return
        marks = ", ".join("?" * len(ids))
        if strategy == "delete":
            self._erase(f"thread IN ({marks})", ids, "langgraph prune delete", threads=ids)
        elif strategy == "keep_latest":
            self._erase(
                f"thread IN ({marks}) AND id < (SELECT MAX(l.id) FROM lg_checkpoints l WHERE "
                "l.branch = lg_checkpoints.branch AND l.thread = lg_checkpoints.thread AND "
                "l.ns = lg_checkpoints.ns)",
                ids,
                "langgraph prune keep_latest",
            )
        else:
            raise ValueError(f"prune strategy must be 'keep_latest' or 'delete', not {strategy!r}")

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Append a copy of every checkpoint and write of a thread under another thread id."""
        src, dst = str(source_thread_id), str(target_thread_id)
        with self._lock:
            self._sync()
            seqs = [
                int(r[0])
                for r in self._rows(
                    "SELECT seq FROM lg_checkpoints WHERE branch = ? AND thread = ? UNION "
                    "SELECT seq FROM lg_writes WHERE branch = ? AND thread = ? ORDER BY 1",
                    (self.branch, src, self.branch, src),
                )
            ]
            items = []
            for seq in seqs:
                entry, _ = self._checked(seq)
                kind = _index.event_type(entry)
                # A copied checkpoint holds its values itself: the source may be erased later.
                whole = self._standalone(seq) if kind == CHECKPOINT_TYPE else self._content(seq)
                assert kind is not None  # _content checked it
                items.append(self._event(kind, {**whole, "thread_id": dst}))
            self._write(items)

    # -- async ---------------------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async ``get_tuple``."""
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async ``list``."""
        found = await asyncio.to_thread(
            lambda: list(self.list(config, filter=filter, before=before, limit=limit))
        )
        for t in found:
            yield t

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async ``put``."""
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Async ``put_writes``."""
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """Async ``delete_thread``."""
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async ``delete_for_runs``."""
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Async ``prune``."""
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async ``copy_thread``."""
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)


class AsyncMemrootSaver(AsyncLedgerTables, MemrootSaver):
    """``MemrootSaver`` opened and closed from ``asyncio``, like ``AsyncSqliteSaver``.

    ``async with AsyncMemrootSaver.from_conn_string("agent.ledger") as saver:``; its async
    methods run the sync ones in worker threads under the ledger's one lock, so concurrent
    ``ainvoke`` calls on one saver (and a store on the same ledger) take turns; the sync
    methods work too, from any thread.
    """
