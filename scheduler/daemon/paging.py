"""Page tokens for list RPCs: stable id order, resumable after the last id seen.

A reply of every job at once outgrows gRPC's 4 MiB message limit long before the cluster
does, so ListJobs answers in pages. The token is opaque to clients (base64 of the last id
returned) so its form can change; a token the daemon did not make is INVALID_ARGUMENT.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Callable, Sequence, TypeVar

from synergy.scheduler.daemon.errors import InvalidArgument

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
_TOKEN_RE = re.compile(r"after:([0-9]{1,19})")

T = TypeVar("T")


def page_size(requested: int) -> int:
    """0 means the default; more than the maximum is lowered to it (not an error)."""
    return DEFAULT_PAGE_SIZE if requested <= 0 else min(requested, MAX_PAGE_SIZE)


def encode_token(last_id: int) -> str:
    return base64.urlsafe_b64encode(f"after:{last_id}".encode()).decode().rstrip("=")


def decode_token(token: str, field: str = "page_token") -> int:
    """The id the previous page ended at (-1 for the first page)."""
    if not token:
        return -1
    bad = InvalidArgument(field, "is not a token from a previous reply (pass next_page_token unchanged, "
                                 "or \"\" for the first page)")
    if len(token) > 64:
        raise bad
    try:
        text = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode("ascii")
    except (binascii.Error, ValueError):
        raise bad from None
    match = _TOKEN_RE.fullmatch(text)
    if match is None:
        raise bad
    return int(match.group(1))


def page(items: Sequence[T], key: Callable[[T], int], token: str, size: int) -> tuple[list[T], str]:
    """The items after the token's id, at most `page_size(size)` of them, and the next token.

    `items` must be sorted by `key` (ascending, unique).
    """
    after = decode_token(token)
    n = page_size(size)
    rest = [item for item in items if key(item) > after]
    chunk = rest[:n]
    return chunk, encode_token(key(chunk[-1])) if len(rest) > n else ""
