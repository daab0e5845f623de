"""Serve the browser with uvicorn until interrupted (Ctrl-C or SIGTERM end it cleanly)."""

from __future__ import annotations

import uvicorn

from worker.store import Store

from ._access import Access
from ._app import create_app

__all__ = ["serve"]


def serve(store: Store, access: Access, host: str, port: int) -> None:
    """Block serving ``store`` on ``host:port``; access and error logs carry no query secrets."""
    config = uvicorn.Config(
        create_app(store, access),
        host=host,
        port=port,
        log_level="info",
        access_log=True,
        server_header=False,
        proxy_headers=False,
        lifespan="off",
    )
    uvicorn.Server(config).run()
