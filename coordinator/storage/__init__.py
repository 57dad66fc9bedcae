"""Dataset storage: kamu's on-disk layout, content-addressed object stores, refs, repositories."""

from coordinator.storage.dataset import Dataset, DatasetLayout
from coordinator.storage.fs import atomic_write_bytes
from coordinator.storage.objects import (
    FsObjectRepository,
    InMemoryObjectRepository,
    ObjectRepository,
)
from coordinator.storage.refs import FsRefRepository, InMemoryRefRepository, RefRepository

__all__ = [
    "Dataset",
    "DatasetLayout",
    "FsObjectRepository",
    "FsRefRepository",
    "InMemoryObjectRepository",
    "InMemoryRefRepository",
    "ObjectRepository",
    "RefRepository",
    "atomic_write_bytes",
]
