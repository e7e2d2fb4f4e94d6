"""API key format: ``ifr_<32 base62 chars>_<6-char checksum>``.

The checksum (CRC32 of the random part, base62) lets leak scanners recognise a real key and lets
the platform reject a mistyped key without touching the cache or database. Only
``HMAC-SHA256(pepper, key)`` is stored.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import string
import zlib

from django.conf import settings

PREFIX = "ifr_"
_ALPHABET = string.digits + string.ascii_letters
_RANDOM_LEN = 32
_CHECK_LEN = 6
KEY_LEN = len(PREFIX) + _RANDOM_LEN + 1 + _CHECK_LEN


def _base62(number: int, width: int) -> str:
    out = []
    for _ in range(width):
        number, rem = divmod(number, 62)
        out.append(_ALPHABET[rem])
    return "".join(reversed(out))


def _checksum(random_part: str) -> str:
    return _base62(zlib.crc32(random_part.encode()), _CHECK_LEN)


def key_length(prefix: str = PREFIX) -> int:
    """The length of a key with ``prefix`` (API keys: :data:`KEY_LEN`)."""
    return len(prefix) + _RANDOM_LEN + 1 + _CHECK_LEN


def generate(prefix: str = PREFIX) -> str:
    """A new random key (the only moment the full key exists); other kinds of key (admin keys)
    pass their own ``prefix``."""
    random_part = "".join(secrets.choice(_ALPHABET) for _ in range(_RANDOM_LEN))
    return f"{prefix}{random_part}_{_checksum(random_part)}"


def is_well_formed(raw: str, prefix: str = PREFIX) -> bool:
    """True when ``raw`` has the shape of a ``prefix`` key and a valid checksum (no lookup)."""
    if len(raw) != key_length(prefix) or not raw.startswith(prefix):
        return False
    random_part, sep, check = raw[len(prefix) :].rpartition("_")
    return (
        sep == "_"
        and len(random_part) == _RANDOM_LEN
        and all(c in _ALPHABET for c in random_part)
        and hmac.compare_digest(check, _checksum(random_part))
    )


def hash_key(raw: str) -> str:
    """The stored form of a key: hex HMAC-SHA256 with the server's pepper."""
    return hmac.new(settings.INFRAI_KEY_PEPPER.encode(), raw.encode(), hashlib.sha256).hexdigest()
