"""The sans-IO gossip protocol core: events in, decisions out.

Split by concern as h11 splits its events, state and connection: :mod:`p2p.core.events` (what a
driver reports), :mod:`p2p.core.decisions` (what the core answers), :mod:`p2p.core.state` (the
records it keeps), :mod:`p2p.core.config` (its tunables) and :mod:`p2p.core.protocol` (the
rules). This package is their public face: import from ``p2p.core``.

:class:`ProtocolCore` holds all the rules that decide what to do with a gossip message and has no
sockets, threads, event loops or clock reads. Every event carries the driver's current time
(``now_ns``), randomness comes from an injected :class:`Rng`, and the result of each event is a
list of :data:`Decision` values for the driver to carry out. The libp2p daemon and the
discrete-event simulator drive the same object.

Rules (``docs/p2p-wire-format.md`` §Processing rules):

1. a peer with a score below the graylist threshold is ignored; every message costs the sender a
   token from its token bucket. A message that finds the bucket empty is *delayed*, not dropped:
   it waits in the peer's bounded backlog (announcements of one dataset coalesce to the newest)
   and is processed when tokens refill. Only a peer whose backlog overflows is penalised as a
   flooder, so a fast honest owner is slowed down, never blamed, and nothing it sends is lost;
2. size cap, then de-duplication by content id in an expiring, bounded seen-cache (a known-bad
   message is penalised again without re-checking it);
3. strict decode, then the signature by the required signer (the dataset key for announcements,
   so the DID always equals the signer);
4. ``issued_at`` no further in the future than the skew bound; gossip older than
   ``max_message_age_ns`` is ignored (anti-entropy replies are exempt: the sequence rules make
   replays harmless there);
4a. every other message (attestation, dispute, observation, key record) costs its signing key a
   token (a rotation its old key) from a per-key bucket (``signer_rate_burst``,
   ``signer_rate_per_s``), whichever peer brought it: past it the message is ignored, neither
   accepted nor forwarded, and the peer is not blamed. A per-peer limit alone let one key's
   flood through every peer it used;
5. announcements: epoch and sequence monotonic per DID; two owner-signed announcements with the same
   DID, epoch and sequence and different heads produce an :class:`EquivocationProof`; a newer head
   is forwarded at once but *accepted* only after the driver reports that its chain was fetched
   and descends from the last accepted head of the same epoch (a higher epoch is an owner-signed
   rewrite and needs no ancestry);
6. a fetch that fails or is abandoned (timeout) is retried with exponential backoff while its
   head is still the newest known; an anti-entropy reply carrying a known but unaccepted head
   restarts an idle dataset's fetch at once;
7. peer scores decay exponentially towards zero;
8. datasets followed from a source URL (``follow_source``): a head the driver pulled from the
   source (:class:`SourceHeadAccepted`) is judged like an accepted announcement when its
   verification completes; a peer's :class:`~p2p.wire.Observation` of that source showing a
   head other than the newest accepted from it asks the driver to poll it now
   (:class:`PollSource`), so one follower's discovery reaches every follower in seconds.

Gossip mapping for a libp2p validator: :class:`Forward` -> ACCEPT, :class:`Penalise` -> REJECT,
otherwise IGNORE.
"""

from __future__ import annotations

from p2p.core.config import NS_PER_S, CoreConfig, Rng
from p2p.core.decisions import *  # noqa: F403 - every decision type, and their union Decision
from p2p.core.events import *  # noqa: F403 - every event type, and their union Event
from p2p.core.protocol import ProtocolCore
from p2p.core.state import SeenCache

# The decision and event types come whole from the modules that define them (as
# ``coordinator.metadata`` takes its model); mypy re-exports what a ``*`` import brings.
__all__ = ["NS_PER_S", "CoreConfig", "ProtocolCore", "Rng", "SeenCache"]
