"""A sans-IO Kademlia DHT for provider records among odf-nodes (issue 43, docs/libp2p.md).

The daemon and the simulator drive the same objects, as they do the gossip core
(:mod:`p2p.core`): nothing here opens a socket, reads a clock or sleeps; every call carries the
driver's ``now_ns`` and every answer is data for the driver to act on.

* :mod:`p2p.dht.keys`: 256-bit keys (SHA-256 of a peer id or a dataset DID: :func:`peer_key`,
  :func:`dataset_key`) and XOR distance;
* :mod:`p2p.dht.routing`: the routing table, ``k``-buckets by shared prefix length;
* :mod:`p2p.dht.lookup`: one iterative lookup (``FIND_NODE`` or ``GET_PROVIDERS``) with
  go-libp2p-kad-dht's parameters: ``k`` = 20, ``alpha`` = 3 queries at once, up to 10 in
  flight when some are slow, so a round never waits on its slowest peer;
* :mod:`p2p.dht.records`: the provider record store, capped per key, per provider and in
  total, with expiry (and the republish interval a provider keeps).

Records are hints: the driver authenticates every peer it dials.
"""

from p2p.dht.keys import DhtKey, dataset_key, distance, key_of, peer_key, shared_prefix_len
from p2p.dht.lookup import Lookup, LookupConfig, LookupResult, Query
from p2p.dht.records import ProviderRecord, ProviderStore, RecordLimits
from p2p.dht.routing import RoutingTable

__all__ = [
    "DhtKey",
    "Lookup",
    "LookupConfig",
    "LookupResult",
    "ProviderRecord",
    "ProviderStore",
    "Query",
    "RecordLimits",
    "RoutingTable",
    "dataset_key",
    "distance",
    "key_of",
    "peer_key",
    "shared_prefix_len",
]
