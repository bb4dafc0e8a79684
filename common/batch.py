"""The numpy batch path: hashing and probing whole arrays of 8-byte keys at once.

A uint64 or int64 array is hashed element by element as its 8 little-endian bytes,
exactly as the int key encoding does, with MurmurHash3 x64_128 unrolled for 8-byte
inputs in vectorised uint64 arithmetic (which wraps modulo 2**64 like the C code).
Results are bit-identical to :mod:`.probing` and to the C extension.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from .params import FilterParams, Layout

U64Array = npt.NDArray[np.uint64]

_C1 = np.uint64(0x87C37B91114253D5)
_C2 = np.uint64(0x4CF5AD432745937F)
_F1 = np.uint64(0xFF51AFD7ED558CCD)
_F2 = np.uint64(0xC4CEB9FE1A85EC53)
_EIGHT = np.uint64(8)


def as_u64_keys(keys: npt.NDArray[np.generic]) -> U64Array:
    """View a 1-D uint64/int64 array as uint64 (no copy when contiguous); TypeError otherwise."""
    if keys.dtype not in (np.uint64, np.int64) or keys.ndim != 1:
        raise TypeError(
            f"batch keys must be a 1-D uint64 or int64 array, got {keys.dtype} with ndim {keys.ndim}"
        )
    return np.ascontiguousarray(keys).view(np.uint64)


def _fmix64(k: U64Array) -> U64Array:
    k ^= k >> np.uint64(33)
    k *= _F1
    k ^= k >> np.uint64(33)
    k *= _F2
    k ^= k >> np.uint64(33)
    return k


def hash_u64(keys: U64Array, seed: int) -> tuple[U64Array, U64Array]:
    """MurmurHash3 x64_128 of each key's 8 little-endian bytes: arrays (h1, h2)."""
    k1 = keys * _C1
    k1 = (k1 << np.uint64(31)) | (k1 >> np.uint64(33))
    k1 *= _C2
    h1 = k1 ^ np.uint64(seed)
    h1 ^= _EIGHT
    h2 = np.full_like(h1, np.uint64(seed) ^ _EIGHT)
    h1 += h2
    h2 += h1
    h1 = _fmix64(h1)
    h2 = _fmix64(h2)
    h1 += h2
    h2 += h1
    return h1, h2


def bit_indexes_u64(keys: U64Array, params: FilterParams) -> U64Array:
    """An (n, k) array of the bit indexes each key maps to under ``params``."""
    with np.errstate(over="ignore"):
        h1, h2 = hash_u64(keys, params.hash_seed)
        k = params.num_probes
        out = np.empty((len(keys), k), dtype=np.uint64)
        if params.layout == Layout.BLOCKED:
            base = (((h2 >> np.uint64(32)) * np.uint64(params.num_blocks)) >> np.uint64(32)) << np.uint64(9)
            nine_bits = np.uint64(511)
            for i in range(k):
                shift = 9 * i
                if shift + 9 <= 64:
                    field = h1 >> np.uint64(shift)
                elif shift < 64:
                    field = (h1 >> np.uint64(shift)) | (h2 << np.uint64(64 - shift))
                else:
                    field = h2 >> np.uint64(shift - 64)
                out[:, i] = base + (field & nine_bits)
        else:
            m = np.uint64(params.num_bits)
            for i in range(k):
                out[:, i] = (h1 + np.uint64(i) * h2) % m
    return out


def contains_u64(body: npt.NDArray[np.uint8], keys: U64Array, params: FilterParams) -> npt.NDArray[np.bool_]:
    """Membership of each key in the filter whose bit array is ``body`` (uint8 view)."""
    result = np.ones(len(keys), dtype=np.bool_)
    for start in range(0, len(keys), _CHUNK):
        idx = bit_indexes_u64(keys[start:start + _CHUNK], params)
        bits = (body[idx >> np.uint64(3)] >> (idx & np.uint64(7)).astype(np.uint8)) & np.uint8(1)
        result[start:start + _CHUNK] = bits.all(axis=1)
    return result


def add_u64(body: npt.NDArray[np.uint8], keys: U64Array, params: FilterParams) -> None:
    """Set the bits of every key in ``body`` (a writable uint8 view of the bit array)."""
    for start in range(0, len(keys), _CHUNK):
        idx = bit_indexes_u64(keys[start:start + _CHUNK], params).ravel()
        masks = np.left_shift(np.uint8(1), (idx & np.uint64(7)).astype(np.uint8))
        np.bitwise_or.at(body, idx >> np.uint64(3), masks)


_CHUNK = 1 << 18
"""Keys per vectorised step: bounds the temporaries to a few tens of MiB."""
