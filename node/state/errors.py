"""Errors of the node's state database (``node.state``).

All derive from :class:`StateError`, itself a :class:`coordinator.errors.OdfNodeError`, so the
daemon can catch "anything the state DB refused" in one place and still branch on the cause.
"""

from __future__ import annotations

from coordinator.errors import OdfNodeError


class StateError(OdfNodeError):
    """Base of every error raised deliberately by the state database."""


class StateVersionTooNew(StateError):
    """The database was written by a newer odf-node: its schema version is unknown to this code.

    Opening it anyway could corrupt data the newer version relies on, so the node refuses.
    """

    def __init__(self, found: int, known: int) -> None:
        super().__init__(
            f"state database schema version {found} is newer than this odf-node knows "
            f"({known}); upgrade odf-node or use another data directory"
        )
        self.found = found
        self.known = known


class MigrationError(StateError):
    """A migration failed; its transaction was rolled back and the version left unchanged."""

    def __init__(self, version: int, name: str, cause: BaseException) -> None:
        super().__init__(f"migration {version} ({name}) failed: {cause}")
        self.version = version
        self.name = name


class InvalidStateValue(StateError, ValueError):
    """An argument cannot be stored (malformed DID, unknown outcome, non-JSON payload...)."""


class WorkItemNotFound(StateError, KeyError):
    """No work item has the given id."""


class InvalidWorkTransition(StateError):
    """A work item is not in a state that allows the requested transition.

    E.g. completing an item that is not claimed (it was released at start-up, or already
    completed). ``state`` is the item's current state.
    """

    def __init__(self, item_id: int, state: str, action: str) -> None:
        super().__init__(f"work item {item_id} is {state!r}; cannot {action} it")
        self.item_id = item_id
        self.state = state
        self.action = action
