"""The node's Python API: read a home's verified datasets from a script, a notebook or Spark.

A small, synchronous API over the same use case the CLI, the RPC and the HTTP data API use
(:class:`~node.app.data.VerifiedData`, ``Application.data``), so the same rule decides what is
readable: a dataset the node owns is read at its own head, a followed one at the head the node
trusts (by quorum or by its policy, or one it replayed itself); an untrusted head only when
asked (``untrusted=True``), and then marked ``trusted=False``::

    from node import api

    home = api.open_home()                       # $ODF_NODE_HOME or the default home
    for d in home.datasets():
        print(d.alias, d.did, d.head, d.trust, d.records)
    ds = home.dataset("covid19.canada")          # the trusted head (HeadNotTrusted otherwise)
    table = ds.to_arrow_dataset().to_table()     # pyarrow, over the head's parquet parts
    frame = ds.to_pandas()                       # offset int64, op int32, times UTC
    df = ds.to_spark(spark)                      # a PySpark DataFrame over the same files

Nothing is copied: the Arrow dataset and the Spark DataFrame read the head's parquet parts where
the node keeps them (``<home>/datasets/<did>/data/``; they are immutable once written). The
files are those of the chain from the resolved head back, so a head the node has not accepted
yet, or newer blocks it is still verifying, never leak into the answer.

The home is opened the way the CLI opens it without a daemon (:mod:`node.compose`): it reads
the dataset repository and the node's ``state.db``, and writes neither, so it works whether or
not a daemon runs on the home. Each call runs the asynchronous use case to completion; from a
running event loop (a Jupyter cell) it runs in a thread of its own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from node.home import NodeHome, NotAHome, default_home

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    import pyarrow.dataset as pads

    from node.app.data import ReadableTable, VerifiedData


T = TypeVar("T")


@dataclass(frozen=True)
class ReadableDataset:
    """One readable dataset at one head: what it is, how far it is trusted, its data files."""

    name: str
    """Its table name in SQL (the alias, or the DID when it has none)."""
    alias: str | None
    did: str
    head: str
    """The block read (multihash): the trusted head unless ``untrusted`` was asked for."""
    sequence: int
    """The head block's sequence number."""
    trusted: bool
    trust: str
    """``owned`` (this node holds its key), ``trusted`` (a quorum or the trust policy),
    ``verified`` (this node replayed it) or ``untrusted``."""
    records: int
    """Records in the data files of the chain up to ``head``."""
    files: tuple[str, ...]
    """Absolute paths of the head's parquet parts, oldest first."""

    def to_arrow_dataset(self) -> pads.Dataset:
        """A :mod:`pyarrow.dataset` over the parquet parts, in place (nothing is read yet)."""
        import pyarrow as pa
        import pyarrow.dataset as pads

        if not self.files:
            return pads.dataset([], schema=pa.schema([]), format="parquet")
        return pads.dataset(list(self.files), format="parquet")

    def to_arrow(self) -> pa.Table:
        """Every record as one Arrow table, oldest first."""
        return self.to_arrow_dataset().to_table()

    def to_pandas(self) -> pd.DataFrame:
        """Every record as a pandas frame: ``offset`` int64, ``op`` int32, event and system
        times ``datetime64[..., UTC]`` (the parquet types, as kamu's client gives them)."""
        return self.to_arrow().to_pandas()

    def to_spark(self, spark: Any) -> Any:
        """A PySpark DataFrame over the parquet parts, in place (``spark.read.parquet``).

        ``spark`` is the caller's ``SparkSession`` (its own pipeline's, local or a cluster that
        can read this node's files). A dataset without data yet gives an empty DataFrame.
        """
        if not self.files:
            from pyspark.sql.types import StructType

            return spark.createDataFrame([], StructType([]))
        return spark.read.parquet(*self.files)


class Home:
    """A node home opened for reading (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        """Open ``path``; :func:`open_home` is the usual way.

        Raises:
            NotAHome: ``odf-node init`` has not run there.
        """
        self._home = NodeHome(Path(path).expanduser()).require()

    @property
    def path(self) -> Path:
        """The home directory."""
        return self._home.path

    def datasets(self, untrusted: bool = False) -> list[ReadableDataset]:
        """The readable datasets with their trust state; with ``untrusted``, also those whose
        only head is not trusted yet (marked ``trusted=False``)."""
        rows = self._run(lambda data: data.tables(untrusted=untrusted))
        return [_dataset(r) for r in rows]

    def dataset(
        self, ref: str, untrusted: bool = False, block: str | None = None
    ) -> ReadableDataset:
        """The dataset ``ref`` (alias or ``did:odf:...``) at its readable head, or at ``block``
        (which must be on that head's chain).

        Raises:
            DatasetNotFound: no such dataset here.
            BlockNotOnChain: ``block`` is not on its stored chain.
            HeadNotTrusted: it has no trusted head (or ``block`` is past it) and ``untrusted``
                is False.
        """
        row = self._run(lambda data: data.resolve(ref, untrusted=untrusted, block=block))
        return _dataset(row)

    def sql(
        self,
        sql: str,
        untrusted: bool = False,
        engine: Literal["datafusion", "spark"] = "datafusion",
    ) -> pa.Table:
        """Run ``sql`` over the readable datasets (as ``odf-node sql``), bounded by ``[query]``.

        Table names are the aliases or DIDs, double-quoted when they hold a dot, ``/`` or ``-``
        (``select * from "covid19.canada"``). Each call starts its own query worker and stops
        it after: a DataFusion worker in well under a second, Spark in ten seconds or more;
        for many Spark queries use ``to_spark`` in your own session (or a running daemon's
        ``odf-node sql --engine spark``, whose worker stays up).
        """
        answer = self._run(lambda data: data.query(sql, untrusted=untrusted, dialect=engine))
        table: pa.Table = answer.table
        return table

    def _run(self, call: Callable[[VerifiedData], Awaitable[T]]) -> T:
        """``call(data)`` on the ``Application.data`` of the home's offline application."""
        from node.compose import OfflineOptions, offline_application

        config = self._home.config()
        options = OfflineOptions(
            spark_master=config.engine.spark_master,
            engine_memory_limit=config.engine.memory_limit_mib,
        )

        async def go() -> T:
            with offline_application(self._home, options) as app:
                data = app.data
                assert data is not None  # both composition roots build it
                try:
                    return await call(data)
                finally:
                    # The query workers (a Spark JVM for engine="spark") end with the call: a
                    # notebook that runs many calls must not collect them.
                    if data.engine is not None:
                        await data.engine.close()

        return _sync(go)

    def __repr__(self) -> str:
        return f"Home({str(self.path)!r})"


def _sync(make: Callable[[], Awaitable[T]]) -> T:
    """Run the coroutine ``make()`` to completion, also from inside a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_await(make))
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="odf-node-api") as pool:
        return pool.submit(asyncio.run, _await(make)).result()


async def _await(make: Callable[[], Awaitable[T]]) -> T:
    return await make()


def _dataset(row: ReadableTable) -> ReadableDataset:
    """A :class:`ReadableDataset` of a ``ReadableTable``: its JSON form (the same fields) and
    its data files."""
    return ReadableDataset(**row.to_json(), files=tuple(row.table.files))


def open_home(path: str | os.PathLike[str] | None = None) -> Home:
    """The node home at ``path``, else the one the CLI uses (``$ODF_NODE_HOME``, else
    ``$XDG_DATA_HOME/odf-node``, else ``~/.local/share/odf-node``).

    Raises:
        NotAHome: ``odf-node init`` has not run there.
    """
    return Home(Path(path) if path is not None else default_home())


__all__ = ["Home", "NotAHome", "ReadableDataset", "open_home"]
