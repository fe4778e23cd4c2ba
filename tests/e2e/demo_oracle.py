"""The field values strata-demo emits, mirrored from examples/demo/demo_values.h.
Thread t emits i = 0 .. N-1: demo:ints for even i, demo:mix for odd i."""
import struct


def _wrap(v, bits, signed):
    v &= (1 << bits) - 1
    if signed and v >> (bits - 1):
        v -= 1 << bits
    return v


def ints(t, i):
    return {
        "thread": t,
        "seq": i,
        "s8": _wrap(-(i % 128), 8, True),
        "u8": (i + t) % 256,
        "s16": _wrap(-(i % 32768), 16, True),
        "u16": (i * 3) % 65536,
        "s32": _wrap(-(i % 1000000000) - t, 32, True),
        "u32": _wrap(i * 7 + t, 32, False),
        "s64": _wrap(-i * 1000003 - t, 64, True),
        "x64": 0xdead000000000000 | (t << 32) | (i & 0xffffffff),
    }


SEQ_MAX = 4
BLOB_MAX = 3
STATE_LABELS = {0: "idle", 1: "busy"}


def state_label(v):
    return STATE_LABELS.get(v, "custom" if 10 <= v <= 19 else None)


def mix(t, i):
    n_vals = i % (SEQ_MAX + 1)
    n_blob = i % (BLOB_MAX + 1)
    return {
        "thread": t,
        "seq": i,
        "f32": struct.unpack("<f", struct.pack("<f", (i % 1000000) * 0.5))[0],
        "f64": i / 4.0 + t,
        "state": 0 if i % 3 == 0 else 1 if i % 3 == 1 else 10 + (i // 3) % 10,
        "msg": "t%d-%d" % (t, i),
        "arr": [i & 0xffff, t, 7, 65535],
        "vals": [(i % 100000) - k * 1000 for k in range(n_vals)],
        "blob": [(i + k * 17) & 0xff for k in range(n_blob)],
    }


def expected(t, i):
    """(event name, field dict) of event i of thread t."""
    return ("demo:ints", ints(t, i)) if i % 2 == 0 else ("demo:mix", mix(t, i))
