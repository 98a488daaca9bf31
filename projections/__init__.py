"""Deterministic projections of the ledger and the memory model derived from it.

``memroot.projections.memory`` re-exports the memory model's API (RFC-0001 objects, entities, edges,
namespaces; queries; rebuild and replay); ``projection`` and ``registry`` hold the Projection
protocol for memory roots; ``anchors`` and ``gitctx`` the conversation-tree and git-context
reads. Imports only the ledger layer.
"""
