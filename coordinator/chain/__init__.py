"""Metadata chains: the pure append-validation rules and the chain over a block store."""

from coordinator.chain.validation import ChainState, validate_append

__all__ = ["ChainState", "validate_append"]
