"""API key format: ``ifr_<32 base62 chars>_<6-char checksum>``.

The checksum (CRC32 of the random part, base62) lets leak scanners recognise a real key and lets
the platform reject a mistyped key without touching the cache or database. Only
``HMAC-SHA256(pepper, key)`` is stored.
"""

from __future__ import annotations

import hmac
import re
import secrets
import string
import zlib

from django.conf import settings

PREFIX = "ifr_"
_ALPHABET = string.digits + string.ascii_letters
_RANDOM_LEN = 32
_CHECK_LEN = 6
KEY_LEN = len(PREFIX) + _RANDOM_LEN + 1 + _CHECK_LEN
_SHAPE = re.compile(rf"([0-9A-Za-z]{{{_RANDOM_LEN}}})_([0-9A-Za-z]{{{_CHECK_LEN}}})")


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
    if not raw.startswith(prefix):
        return False
    shape = _SHAPE.fullmatch(raw, len(prefix))
    return shape is not None and hmac.compare_digest(shape[2], _checksum(shape[1]))


def hash_key(raw: str) -> str:
    """The stored form of a key: hex HMAC-SHA256 with the server's pepper."""
    return hmac.digest(settings.INFRAI_KEY_PEPPER.encode(), raw.encode(), "sha256").hex()
