"""Floats as Python's ``repr`` prints them, compiled (numba, ``cache=True``), and CSV lines assembled from them.

msprobe's compare CSV prints every statistic and every difference as ``repr`` of the float: the shortest
decimal that reads back as the same double, the closest one to it where several are as short, written in
fixed notation for decimal exponents -4 to 15 and ``1e-05``/``1.5e+16`` style elsewhere. A statistics
compare of a large dump prints millions of them, which cost about 0.4 us each through ``repr`` or numpy's
text conversion; here the digits come from the shortest-interval method of Ryu (Adams, PLDI 2018: the
rounding interval of the double scaled by a power of ten with 128-bit fixed-point factors, digits removed
while the interval still holds a shorter decimal), written over the uint64 bits of the values.

:func:`float_texts` gives the texts of an array; :func:`csv_block` writes whole CSV lines whose cells are
either texts of a table or floats (optionally followed by ``%``).
"""
from __future__ import annotations

from typing import Iterator

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

_jit = numba.njit(nogil=True, boundscheck=False, cache=True)
_inline = numba.njit(nogil=True, boundscheck=False, cache=True, inline="always")

FLOAT = -1                  # a cell id: the float of that cell, as repr prints it
PERCENT = -2                # ... followed by "%"
MAX_FLOAT_TEXT = 24         # '-2.2250738585072014e-308' is the longest repr of a finite double

_BITS = 125                 # bits of the fixed-point powers of five (and of their inverses)


def _tables() -> tuple:
    """(5^i scaled to 125 bits, 2^(len(5^i) - 1 + 125) / 5^i rounded up), as (low, high) uint64 pairs."""
    mask = (1 << 64) - 1
    pow5 = np.zeros((326, 2), np.uint64)
    inv5 = np.zeros((342, 2), np.uint64)
    for i in range(342):
        p = 5 ** i
        size = p.bit_length()
        if i < 326:
            scaled = p >> (size - _BITS) if size >= _BITS else p << (_BITS - size)
            pow5[i] = scaled & mask, scaled >> 64
        inv = (1 << (size - 1 + _BITS)) // p + 1
        inv5[i] = inv & mask, inv >> 64
    return pow5, inv5


_POW5, _INV5 = _tables()
_POW10 = np.array([10 ** i for i in range(20)], np.uint64)
_PAIRS = np.frombuffer("".join(f"{i:02d}" for i in range(100)).encode(), np.uint8).copy()   # "00" ... "99"
_U0, _U1, _U2, _U4, _U5, _U10, _U100 = (np.uint64(v) for v in (0, 1, 2, 4, 5, 10, 100))
_U52, _U63, _U64 = (np.uint64(v) for v in (52, 63, 64))
_MANT = np.uint64((1 << 52) - 1)
_HIDDEN = np.uint64(1 << 52)
_EXP = np.uint64(0x7FF)
_ABS = np.uint64((1 << 63) - 1)


@intrinsic
def _mul_hi64(typingctx, a, b):
    """The high 64 bits of the 128-bit product of two uint64 (one multiplication on 64-bit CPUs)."""
    def codegen(context, builder, signature, args):
        wide = ir.IntType(128)
        product = builder.mul(builder.zext(args[0], wide), builder.zext(args[1], wide))
        return builder.trunc(builder.lshr(product, ir.Constant(wide, 64)), ir.IntType(64))
    return types.uint64(types.uint64, types.uint64), codegen


@_inline
def _mul_high(m, lo, hi, shift):
    """(m * (hi * 2^64 + lo)) >> shift, for 64 < shift < 128 (the 192-bit product in 64-bit words)."""
    high1 = _mul_hi64(m, hi)
    low1 = m * hi
    high0 = _mul_hi64(m, lo)
    total = high0 + low1
    if total < high0:
        high1 += _U1
    dist = np.uint64(shift - 64)
    return (high1 << (_U64 - dist)) | (total >> dist)


@_inline
def _fives(value):
    count = 0
    while value % _U5 == _U0:
        value //= _U5
        count += 1
    return count


@_inline
def _digits(bits):
    """(decimal digits as an integer, power of ten) of the shortest decimal of a finite nonzero double."""
    mant = bits & _MANT
    biased = np.int64((bits >> _U52) & _EXP)
    if biased == 0:
        e2 = 1 - 1023 - 52 - 2
        m2 = mant
    else:
        e2 = biased - 1023 - 52 - 2
        m2 = mant | _HIDDEN
    accept = (m2 & _U1) == _U0              # an even mantissa: the interval's ends read back to it too
    mv = _U4 * m2
    mm_shift = _U1 if (mant != _U0 or biased <= 1) else _U0
    vm_zeros = False
    vr_zeros = False
    if e2 >= 0:
        q = ((e2 * 78913) >> 18) - (1 if e2 > 3 else 0)
        e10 = q
        k = _BITS + (((q * 1217359) >> 19) + 1) - 1
        shift = -e2 + q + k
        lo, hi = _INV5[q, 0], _INV5[q, 1]
        vr = _mul_high(mv, lo, hi, shift)
        vp = _mul_high(mv + _U2, lo, hi, shift)
        vm = _mul_high(mv - _U1 - mm_shift, lo, hi, shift)
        if q <= 21:
            if mv % _U5 == _U0:
                vr_zeros = _fives(mv) >= q
            elif accept:
                vm_zeros = _fives(mv - _U1 - mm_shift) >= q
            elif _fives(mv + _U2) >= q:
                vp -= _U1
    else:
        q = ((-e2 * 732923) >> 20) - (1 if -e2 > 1 else 0)
        e10 = q + e2
        i = -e2 - q
        k = (((i * 1217359) >> 19) + 1) - _BITS
        shift = q - k
        lo, hi = _POW5[i, 0], _POW5[i, 1]
        vr = _mul_high(mv, lo, hi, shift)
        vp = _mul_high(mv + _U2, lo, hi, shift)
        vm = _mul_high(mv - _U1 - mm_shift, lo, hi, shift)
        if q <= 1:
            vr_zeros = True
            if accept:
                vm_zeros = mm_shift == _U1
            else:
                vp -= _U1
        elif q < 63:
            vr_zeros = (mv & ((_U1 << np.uint64(q)) - _U1)) == _U0
    removed = 0
    last = _U0
    if vm_zeros or vr_zeros:
        while vp // _U10 > vm // _U10:
            vm_zeros = vm_zeros and vm % _U10 == _U0
            vr_zeros = vr_zeros and last == _U0
            last = vr % _U10
            vr //= _U10
            vp //= _U10
            vm //= _U10
            removed += 1
        if vm_zeros:
            while vm % _U10 == _U0:
                vr_zeros = vr_zeros and last == _U0
                last = vr % _U10
                vr //= _U10
                vp //= _U10
                vm //= _U10
                removed += 1
        if vr_zeros and last == _U5 and vr % _U2 == _U0:
            last = _U4                      # exactly halfway: round to even
        up = (vr == vm and (not accept or not vm_zeros)) or last >= _U5
    else:
        up = False
        while vp // _U10 > vm // _U10:
            up = vr % _U10 >= _U5
            vr //= _U10
            vp //= _U10
            vm //= _U10
            removed += 1
        up = up or vr == vm
    return vr + (_U1 if up else _U0), e10 + removed


@_inline
def _put_text(buf, pos, text):
    for i in range(len(text)):
        buf[pos + i] = ord(text[i])
    return pos + len(text)


@_inline
def _count_digits(value):
    count = 1
    while count < 20 and value >= _POW10[count]:
        count += 1
    return count


@_inline
def _put_digits(buf, end, value, count):
    """The ``count`` decimal digits of ``value`` written to end at ``buf[end]``, two at a time; ``end``."""
    i = end
    while count >= 2:
        rest = value // _U100
        pair = np.int64(value - rest * _U100) * 2
        buf[i - 1] = _PAIRS[pair + 1]
        buf[i - 2] = _PAIRS[pair]
        value = rest
        i -= 2
        count -= 2
    if count:
        buf[i - 1] = 48 + np.uint8(value)
    return end


@_inline
def _put_float(buf, pos, bits):
    """Write ``repr`` of the double with these bits at ``buf[pos]``; the position after it."""
    negative = (bits >> _U63) != _U0
    mag = bits & _ABS
    if (mag >> _U52) == _EXP:
        if (mag & _MANT) != _U0:
            return _put_text(buf, pos, "nan")
        return _put_text(buf, pos, "-inf" if negative else "inf")
    if negative:
        buf[pos] = 45                       # '-'
        pos += 1
    if mag == _U0:
        return _put_text(buf, pos, "0.0")
    digits, e10 = _digits(mag)
    count = _count_digits(digits)
    point = e10 + count                     # value = 0.DIGITS * 10^point
    if -4 < point <= 16:
        if point <= 0:
            buf[pos] = 48
            buf[pos + 1] = 46
            pos += 2
            for _ in range(-point):
                buf[pos] = 48
                pos += 1
            return _put_digits(buf, pos + count, digits, count)
        end = _put_digits(buf, pos + count, digits, count)
        if point < count:                   # the point moved into place
            for i in range(end, pos + point, -1):
                buf[i] = buf[i - 1]
            buf[pos + point] = 46
            return end + 1
        for _ in range(point - count):
            buf[end] = 48
            end += 1
        buf[end] = 46
        buf[end + 1] = 48
        return end + 2
    # scientific: d[.ddd]e+XX (the digits written one place on, the first moved before the point)
    exp10 = point - 1
    _put_digits(buf, pos + 1 + count, digits, count)
    buf[pos] = buf[pos + 1]
    if count > 1:
        buf[pos + 1] = 46
        pos += count + 1
    else:
        pos += 1
    buf[pos] = 101                          # 'e'
    buf[pos + 1] = 45 if exp10 < 0 else 43
    pos += 2
    mag10 = -exp10 if exp10 < 0 else exp10
    if mag10 >= 100:
        buf[pos] = 48 + mag10 // 100
        pos += 1
    buf[pos] = 48 + (mag10 // 10) % 10
    buf[pos + 1] = 48 + mag10 % 10
    return pos + 2


@_jit
def _fill_texts(bits, buf):
    pos = 0
    for j in range(bits.shape[0]):
        if j:
            buf[pos] = 10
            pos += 1
        pos = _put_float(buf, pos, bits[j])
    return pos


def float_texts(values: np.ndarray) -> list:
    """``[repr(float(v)) for v in values]`` of a float64 array, compiled."""
    flat = np.ascontiguousarray(values, dtype=np.float64).reshape(-1)
    if flat.size == 0:
        return []
    buf = np.empty(flat.size * (MAX_FLOAT_TEXT + 1), np.uint8)
    used = _fill_texts(flat.view(np.uint64), buf)
    return buf[:used].tobytes().decode("ascii").split("\n")


@_jit
def _fill_block(ids, bits, blob, starts, buf, first):
    """Lines ``first``, ... of ``ids`` into ``buf`` while they surely fit; (bytes written, next line)."""
    pos = 0
    lines, cols = ids.shape
    room = buf.shape[0]
    for j in range(first, lines):
        need = cols
        for c in range(cols):
            cell = ids[j, c]
            need += starts[cell + 1] - starts[cell] if cell >= 0 else MAX_FLOAT_TEXT + 1
        if pos + need > room:
            return pos, j
        for c in range(cols):
            if c:
                buf[pos] = 44               # ','
                pos += 1
            cell = ids[j, c]
            if cell >= 0:
                lo, hi = starts[cell], starts[cell + 1]
                for k in range(hi - lo):
                    buf[pos + k] = blob[lo + k]
                pos += hi - lo
            else:
                pos = _put_float(buf, pos, bits[j, c])
                if cell == PERCENT:
                    buf[pos] = 37           # '%'
                    pos += 1
        buf[pos] = 10
        pos += 1
    return pos, lines


class TextTable:
    """Cell texts (already quoted for CSV) numbered in the order added, kept as one UTF-8 byte array."""

    def __init__(self) -> None:
        self._ids: dict = {}
        self._count = 0
        self._parts: list = []
        self._sizes: list = []
        self._blob: np.ndarray | None = None
        self._starts: np.ndarray | None = None

    def __len__(self) -> int:
        return self._count

    def id(self, text: str) -> int:
        """The id of one text, added once."""
        found = self._ids.get(text)
        if found is None:
            found = self._ids[text] = self.extend([text])
        return found

    def extend(self, texts: list) -> int:
        """Add texts (repeats included, each its own id); the id of the first."""
        first = self._count
        self._count += len(texts)
        self._parts.append(texts)
        joined = "\n".join(texts)
        if joined.isascii():
            sizes = np.fromiter(map(len, texts), np.int64, len(texts))
        else:
            sizes = np.fromiter((len(t.encode()) for t in texts), np.int64, len(texts))
        self._sizes.append(sizes)
        self._blob = None
        return first

    def arrays(self) -> tuple:
        """(blob, starts): text ``i`` is ``blob[starts[i]:starts[i + 1]]``."""
        if self._blob is None:
            sizes = np.concatenate(self._sizes) if self._sizes else np.zeros(0, np.int64)
            self._starts = np.zeros(len(sizes) + 1, np.int64)
            np.cumsum(sizes, out=self._starts[1:])
            self._blob = np.frombuffer("".join("".join(part) for part in self._parts).encode(), np.uint8)
        return self._blob, self._starts


class BlockWriter:
    """CSV lines from cells given as text ids and floats, written into one buffer that is used again for every
    block (the bytes of a block are valid until the next one is asked for)."""

    def __init__(self, texts: TextTable, size: int = 1 << 24) -> None:
        self.texts = texts
        self.buf = np.empty(size, np.uint8)

    def blocks(self, ids: np.ndarray, values: np.ndarray) -> Iterator:
        """Memoryviews of the CSV lines, one per row of ``ids``: cell ``ids[j, c]`` is text ``ids[j, c]`` of the
        table, or (FLOAT, PERCENT) the float ``values[j, c]`` as repr prints it (then ``%``); cells joined by
        commas, each line ending in a newline."""
        blob, starts = self.texts.arrays()
        bits = values.view(np.uint64)
        line = 0
        while line < ids.shape[0]:
            used, line_after = _fill_block(ids, bits, blob, starts, self.buf, line)
            if line_after == line:            # one line longer than the buffer
                self.buf = np.empty(2 * self.buf.size, np.uint8)
                continue
            line = line_after
            yield memoryview(self.buf)[:used]


def csv_block(ids: np.ndarray, values: np.ndarray, texts: TextTable) -> bytes:
    """The lines of :meth:`BlockWriter.blocks` as one bytes object."""
    writer = BlockWriter(texts, 1 << 16)
    return b"".join(bytes(block) for block in writer.blocks(np.ascontiguousarray(ids, dtype=np.int64),
                                                            np.ascontiguousarray(values, dtype=np.float64)))


def warm() -> None:
    """Load the compiled kernels (from numba's cache) with a one-line block: done while other work runs, the
    first block of a CSV does not wait for it."""
    texts = TextTable()
    texts.id(",")
    csv_block(np.array([[0, FLOAT, PERCENT]], np.int64), np.array([[0.0, 1.5, 2.5]]), texts)
