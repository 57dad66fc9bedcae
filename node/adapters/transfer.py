"""The transfer port over :mod:`node.transfer.pull` (IPFS, IPNS, HTTP, local paths)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coordinator.storage.repository import DatasetRepository
from node.app.fetch import PullDiverged, PullRejected


class TransferAdapter:
    """:class:`~node.app.ports.TransferPort`: pulls into ``repo``; errors in the app's terms."""

    def __init__(
        self,
        repo: DatasetRepository,
        ipfs_api: Callable[[], str | None],
        ipfs_gateway: str | None = None,
    ) -> None:
        self._repo = repo
        self._ipfs_api = ipfs_api
        self._ipfs_gateway = ipfs_gateway

    async def pull(self, url: str, *, alias: str | None, force: bool = False) -> dict[str, Any]:
        """Pull ``url``; :class:`PullDiverged` / :class:`PullRejected` for the fetcher's choices."""
        from node.transfer.errors import DivergedHeads, ObjectRejected
        from node.transfer.pull import pull_url

        try:
            result = await pull_url(
                self._repo,
                url,
                alias=alias,
                force=force,
                ipfs_api=self._ipfs_api(),
                ipfs_gateway=self._ipfs_gateway,
            )
        except DivergedHeads as e:
            raise PullDiverged(str(e)) from e
        except ObjectRejected as e:
            raise PullRejected(str(e)) from e
        return dict(result.to_dict())
