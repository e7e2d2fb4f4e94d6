"""Admin key format: ``ifr_admin_<32 base62 chars>_<6-char checksum>``.

The same construction as :mod:`accounts.keys` (random part, CRC32 checksum in base62, stored
as ``HMAC-SHA256(pepper, key)`` by :func:`accounts.keys.hash_key`), with its own prefix so
neither kind of key can be mistaken for the other.
"""

from __future__ import annotations

import hmac
import secrets
import string
import zlib

from accounts.keys import hash_key

PREFIX = "ifr_admin_"
_ALPHABET = string.digits + string.ascii_letters
_RANDOM_LEN = 32
_CHECK_LEN = 6
KEY_LEN = len(PREFIX) + _RANDOM_LEN + 1 + _CHECK_LEN

__all__ = ["KEY_LEN", "PREFIX", "generate", "hash_key", "is_well_formed"]


def _checksum(random_part: str) -> str:
    number = zlib.crc32(random_part.encode())
    out = []
    for _ in range(_CHECK_LEN):
        number, rem = divmod(number, 62)
        out.append(_ALPHABET[rem])
    return "".join(reversed(out))


def generate() -> str:
    """A new random admin key (the only moment the full key exists)."""
    random_part = "".join(secrets.choice(_ALPHABET) for _ in range(_RANDOM_LEN))
    return f"{PREFIX}{random_part}_{_checksum(random_part)}"


def is_well_formed(raw: str) -> bool:
    """True when ``raw`` has the admin key's shape and a valid checksum (no lookup)."""
    if len(raw) != KEY_LEN or not raw.startswith(PREFIX):
        return False
    random_part, sep, check = raw[len(PREFIX) :].rpartition("_")
    return (
        sep == "_"
        and len(random_part) == _RANDOM_LEN
        and all(c in _ALPHABET for c in random_part)
        and hmac.compare_digest(check, _checksum(random_part))
    )
