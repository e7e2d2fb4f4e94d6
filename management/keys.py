"""Admin key format: ``ifr_admin_<32 base62 chars>_<6-char checksum>``.

The same construction as :mod:`accounts.keys` (random part, CRC32 checksum in base62, stored
as ``HMAC-SHA256(pepper, key)`` by :func:`accounts.keys.hash_key`), with its own prefix so
neither kind of key can be mistaken for the other.
"""

from __future__ import annotations

from accounts import keys

PREFIX = "ifr_admin_"
KEY_LEN = keys.key_length(PREFIX)
hash_key = keys.hash_key

__all__ = ["KEY_LEN", "PREFIX", "generate", "hash_key", "is_well_formed"]


def generate() -> str:
    """A new random admin key (the only moment the full key exists)."""
    return keys.generate(PREFIX)


def is_well_formed(raw: str) -> bool:
    """True when ``raw`` has the admin key's shape and a valid checksum (no lookup)."""
    return keys.is_well_formed(raw, PREFIX)
