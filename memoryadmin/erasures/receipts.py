"""Erasure receipts: signed by the server with Ed25519, verifiable by anyone with its public key.

A receipt is a JSON object `{"receipt": {...}, "signature": {...}}`. The
signature covers the canonical encoding of `receipt` (docs/incidents.md,
"Verifying a receipt"): JSON with object keys sorted by code point, no
whitespace, strings as UTF-8 (not `\\u` escaped, except the characters JSON
must escape), integers only, no floats. For the values a receipt holds this is
RFC 8785 (JCS). The key is `MEMORYADMIN_ERASURE_SIGNING_KEY` (32 bytes, base64);
its public half is published at `/api/managed-agents/erasure-key` and printed by
`manage.py erasure key`.

cryptography is imported by the functions that sign, verify or read a key, not by every
process that loads the erasure services.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.conf import settings

from memoryadmin.core.errors import DomainError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

FORMAT = "memoryadmin.erasure-receipt"
FORMAT_VERSION = 1
ALGORITHM = "Ed25519"


class SigningKeyMissing(DomainError):
    status = 503
    code = "not_configured"


class ReceiptInvalid(Exception):
    """Why a receipt does not verify (a sentence for people)."""


def canonical(value: Any) -> bytes:
    """The bytes a receipt's signature covers."""
    _check_canonical(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _check_canonical(value: Any) -> None:
    if isinstance(value, float):
        raise ReceiptInvalid("A receipt holds no floating-point numbers.")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ReceiptInvalid("A receipt's object keys are strings.")
            _check_canonical(item)
    elif isinstance(value, list):
        for item in value:
            _check_canonical(item)


def _private_key() -> Ed25519PrivateKey:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    raw = settings.MEMORYADMIN_ERASURE_SIGNING_KEY
    if not raw:
        raise SigningKeyMissing(
            "Erasures need MEMORYADMIN_ERASURE_SIGNING_KEY, the key that signs their "
            "receipts (docs/deploy.md)."
        )
    try:
        seed = base64.b64decode(raw, validate=True)
    except binascii.Error:
        seed = b""
    if len(seed) != 32:
        raise SigningKeyMissing(
            "MEMORYADMIN_ERASURE_SIGNING_KEY must be 32 random bytes in base64 (docs/deploy.md)."
        )
    return Ed25519PrivateKey.from_private_bytes(seed)


def _raw_public(key: Ed25519PublicKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(public: bytes) -> str:
    """Names a public key: the first 16 hex digits of the SHA-256 of its 32 bytes."""
    return hashlib.sha256(public).hexdigest()[:16]


@dataclass(frozen=True)
class PublicKey:
    raw: bytes

    @property
    def key_id(self) -> str:
        return key_id(self.raw)

    def as_dict(self) -> dict[str, str]:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        key = Ed25519PublicKey.from_public_bytes(self.raw)
        pem = key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ).decode()
        return {
            "algorithm": ALGORITHM,
            "keyId": self.key_id,
            "publicKey": base64.b64encode(self.raw).decode(),
            "pem": pem,
        }


def public_key() -> PublicKey:
    """The server's public key (503 when no signing key is configured)."""
    return PublicKey(_raw_public(_private_key().public_key()))


def sign(receipt: dict[str, Any]) -> dict[str, Any]:
    """`{"receipt": receipt, "signature": {...}}`, signed with the server's key."""
    key = _private_key()
    signature = key.sign(canonical(receipt))
    return {
        "receipt": receipt,
        "signature": {
            "algorithm": ALGORITHM,
            "keyId": key_id(_raw_public(key.public_key())),
            "value": base64.b64encode(signature).decode(),
        },
    }


def public_key_parse(text: str) -> bytes:
    """A public key as published: 32 bytes in base64, or a PEM public key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    text = text.strip()
    if text.startswith("-----BEGIN"):
        try:
            loaded = serialization.load_pem_public_key(text.encode())
        except ValueError as exc:
            raise ReceiptInvalid("The public key is not a readable PEM key.") from exc
        if not isinstance(loaded, Ed25519PublicKey):
            raise ReceiptInvalid("The public key is not an Ed25519 key.")
        return _raw_public(loaded)
    try:
        raw = base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        raise ReceiptInvalid("The public key is neither base64 nor PEM.") from exc
    if len(raw) != 32:
        raise ReceiptInvalid("An Ed25519 public key is 32 bytes.")
    return raw


def verify(document: object, public: bytes) -> dict[str, Any]:
    """The receipt of a signed document if its signature holds under `public`;
    ReceiptInvalid saying why otherwise."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    if not isinstance(document, dict) or set(document) != {"receipt", "signature"}:
        raise ReceiptInvalid('A signed receipt is an object of "receipt" and "signature".')
    receipt, signature = document["receipt"], document["signature"]
    if not isinstance(receipt, dict) or receipt.get("format") != FORMAT:
        raise ReceiptInvalid(f'"receipt" is not a {FORMAT} object.')
    if not isinstance(signature, dict) or signature.get("algorithm") != ALGORITHM:
        raise ReceiptInvalid(f'"signature" is not an {ALGORITHM} signature.')
    if signature.get("keyId") != key_id(public):
        raise ReceiptInvalid(
            f"The receipt was signed by key {signature.get('keyId')!r}, not by this public "
            f"key ({key_id(public)})."
        )
    try:
        value = base64.b64decode(str(signature.get("value", "")), validate=True)
    except binascii.Error as exc:
        raise ReceiptInvalid("The signature is not base64.") from exc
    try:
        Ed25519PublicKey.from_public_bytes(public).verify(value, canonical(receipt))
    except InvalidSignature as exc:
        raise ReceiptInvalid(
            "The signature does not match: the receipt was changed after it was signed."
        ) from exc
    return receipt
