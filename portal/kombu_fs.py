"""kombu's file-system transport, with messages written atomically (the embedded broker).

kombu's ``filesystem`` Channel writes each message file in place; a consumer polling at that
moment can read it half-written (empty) and the worker dies with "Unrecoverable error:
JSONDecodeError". Seen with a worker's own retry (``self.retry`` from its timer thread) racing
its poll. Here ``_put`` writes to a hidden ``.*.partial`` file, which ``_get`` ignores (it only
reads names ending in ``.<queue>.msg``), and renames it into place: same name, same content, never
visible half-written. Registered as the ``portalfs://`` broker scheme (``register()``, called by
portal/settings.py).
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import TRANSPORT_ALIASES, filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

SCHEME = "portalfs"


class Channel(filesystem.Channel):  # type: ignore[misc]
    """The file-system channel with an atomic ``_put``."""

    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        """Write ``payload`` to ``<ms>_<uuid>.<queue>.msg`` via a hidden partial file + rename.

        Raises:
            ChannelError: the directory is not writable (as kombu's own ``_put``).
        """
        name = f"{round(time.monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = os.path.join(self.data_folder_out, f".{uuid.uuid4().hex}.partial")
        try:
            with open(partial, "wb") as f:
                f.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):  # type: ignore[misc]
    """``portalfs://``: kombu's file-system transport using :class:`Channel`."""

    Channel = Channel


def register() -> None:
    """Make ``portalfs://`` resolve to :class:`Transport` (idempotent)."""
    TRANSPORT_ALIASES.setdefault(SCHEME, "portal.kombu_fs:Transport")
