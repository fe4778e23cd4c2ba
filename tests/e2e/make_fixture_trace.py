#!/usr/bin/python3
"""Write a small, fully known CTF 1.8 trace in the layout Strata writes
(abi/strata_abi.h packet header, consumerd/metadata.cpp TSDL), so
that `strata view` can be checked line by line without a tracing session.

usage: make_fixture_trace.py OUTDIR [--other]
--other writes instead a second process's sub-trace (procname "other",
vpid 4343, another trace uuid) holding one demo:start at 1.500000000.
Events (clock offset 0, so times are seconds after the epoch, TZ=UTC):
  1.000000000 demo:start
  1.000000100 demo:ints  thread 0, seq 0 (values of demo_oracle.ints(0, 0))
  1.000000200 demo:mix   thread 1, seq 1 (values of demo_oracle.mix(1, 1))
  then a second packet that reports 5 discarded events, with one demo:ints
  2.000000000 demo:ints  thread 2, seq 4
  then packet_seq_num jumps from 1 to 4 (packets 2 and 3 lost), one demo:start
  3.000000000 demo:start
"""
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import demo_oracle  # noqa: E402

UUID = bytes(range(16))
UUID_STR = "00010203-0405-0607-0809-0a0b0c0d0e0f"
OTHER_UUID = bytes(range(16, 32))
OTHER_UUID_STR = "10111213-1415-1617-1819-1a1b1c1d1e1f"

METADATA = """/* CTF 1.8 */

typealias integer { size = 8; align = 8; signed = false; } := uint8_t;
typealias integer { size = 16; align = 8; signed = false; } := uint16_t;
typealias integer { size = 32; align = 8; signed = false; } := uint32_t;
typealias integer { size = 64; align = 8; signed = false; } := uint64_t;

trace {
	major = 1;
	minor = 8;
	uuid = "%(uuid)s";
	byte_order = le;
	packet.header := struct {
		uint32_t magic;
		uint8_t uuid[16];
		uint32_t stream_id;
		uint64_t stream_instance_id;
	};
};

env {
	domain = "ust";
	tracer_name = "strata";
	tracer_major = 0;
	tracer_minor = 1;
	procname = "%(procname)s";
	vpid = %(vpid)d;
};

clock {
	name = "monotonic";
	description = "fixture";
	freq = 1000000000;
	precision = 1;
	offset_s = 0;
	offset = 0;
	absolute = true;
};

typealias integer { size = 64; align = 8; signed = false; map = clock.monotonic.value; } := uint64_clock_t;

struct packet_context {
	uint64_clock_t timestamp_begin;
	uint64_clock_t timestamp_end;
	uint64_t content_size;
	uint64_t packet_size;
	uint64_t packet_seq_num;
	uint64_t events_discarded;
	uint32_t lane_id;
};

struct event_header {
	integer { size = 16; align = 64; signed = false; } id;
	integer { size = 64; align = 16; signed = false; map = clock.monotonic.value; } timestamp;
};

stream {
	id = 0;
	packet.context := struct packet_context;
	event.header := struct event_header;
	event.context := struct {
		integer { size = 32; align = 16; signed = true; } _vtid;
		integer { size = 16; align = 16; signed = false; } _cpu_id;
	};
};

event {
	name = "demo:ints";
	id = 0;
	stream_id = 0;
	loglevel = 6;
	fields := struct {
		integer { size = 32; align = 32; signed = false; base = 10; } _thread;
		integer { size = 64; align = 64; signed = false; base = 10; } _seq;
		integer { size = 8; align = 8; signed = true; base = 10; } _s8;
		integer { size = 8; align = 8; signed = false; base = 10; } _u8;
		integer { size = 16; align = 16; signed = true; base = 10; } _s16;
		integer { size = 16; align = 16; signed = false; base = 10; } _u16;
		integer { size = 32; align = 32; signed = true; base = 10; } _s32;
		integer { size = 32; align = 32; signed = false; base = 10; } _u32;
		integer { size = 64; align = 64; signed = true; base = 10; } _s64;
		integer { size = 64; align = 64; signed = false; base = 16; } _x64;
	};
};

event {
	name = "demo:mix";
	id = 1;
	stream_id = 0;
	loglevel = 7;
	fields := struct {
		integer { size = 32; align = 32; signed = false; base = 10; } _thread;
		integer { size = 64; align = 64; signed = false; base = 10; } _seq;
		floating_point { exp_dig = 8; mant_dig = 24; byte_order = le; align = 32; } _f32;
		floating_point { exp_dig = 11; mant_dig = 53; byte_order = le; align = 64; } _f64;
		enum : integer { size = 32; align = 32; signed = true; base = 10; } { "idle" = 0, "busy" = 1, "custom" = 10 ... 19 } _state;
		string { encoding = UTF8; } _msg;
		integer { size = 16; align = 16; signed = false; base = 10; } _arr[4];
		integer { size = 32; align = 32; signed = false; } __vals_length;
		integer { size = 32; align = 32; signed = true; base = 10; } _vals[ __vals_length ];
		integer { size = 32; align = 32; signed = false; } __blob_length;
		integer { size = 8; align = 8; signed = false; base = 16; } _blob[ __blob_length ];
	};
};

event {
	name = "demo:start";
	id = 2;
	stream_id = 0;
	loglevel = 5;
	fields := struct {
	};
};
"""


class Rec:
    def __init__(self):
        self.b = bytearray()

    def pad(self, a):
        while len(self.b) % a:
            self.b.append(0)

    def put(self, fmt, v, align):
        self.pad(align)
        self.b += struct.pack("<" + fmt, v)


def header(r, ev_id, ts, tid, cpu):
    r.pad(8)
    r.b += struct.pack("<HQiH", ev_id, ts, tid, cpu)


def ints_event(r, ts, tid, cpu, t, i):
    v = demo_oracle.ints(t, i)
    header(r, 0, ts, tid, cpu)
    r.put("I", t, 4)
    r.put("Q", i, 8)
    r.put("b", v["s8"], 1)
    r.put("B", v["u8"], 1)
    r.put("h", v["s16"], 2)
    r.put("H", v["u16"], 2)
    r.put("i", v["s32"], 4)
    r.put("I", v["u32"], 4)
    r.put("q", v["s64"], 8)
    r.put("Q", v["x64"], 8)


def mix_event(r, ts, tid, cpu, t, i):
    v = demo_oracle.mix(t, i)
    header(r, 1, ts, tid, cpu)
    r.put("I", t, 4)
    r.put("Q", i, 8)
    r.put("f", v["f32"], 4)
    r.put("d", v["f64"], 8)
    r.put("i", v["state"], 4)
    r.b += v["msg"].encode() + b"\0"
    for a in v["arr"]:
        r.put("H", a, 2)
    r.put("I", len(v["vals"]), 4)
    for x in v["vals"]:
        r.put("i", x, 4)
    r.put("I", len(v["blob"]), 4)
    for x in v["blob"]:
        r.put("B", x, 1)


def start_event(r, ts, tid, cpu):
    header(r, 2, ts, tid, cpu)


def packet(events_fn, ts_begin, ts_end, seq, discarded, lane=0, uuid=UUID):
    r = Rec()
    r.b += bytes(88)
    events_fn(r)
    content = len(r.b)
    r.pad(8)
    size = len(r.b)
    struct.pack_into("<I16sIQQQQQQQII", r.b, 0, 0xC1FC1FC1, uuid, 0, lane, ts_begin, ts_end,
                     content * 8, size * 8, seq, discarded, lane, 0)
    return bytes(r.b)


def main():
    out = sys.argv[1]
    other = "--other" in sys.argv[2:]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "metadata"), "w") as f:
        f.write(METADATA % {"uuid": OTHER_UUID_STR if other else UUID_STR,
                            "procname": "other" if other else "fixture",
                            "vpid": 4343 if other else 4242})
    s = 1000000000

    if other:
        def p0(r):
            start_event(r, s + s // 2, 200, 1)

        with open(os.path.join(out, "channel0_0"), "wb") as f:
            f.write(packet(p0, s + s // 2, s + s // 2, 0, 0, uuid=OTHER_UUID))
        return

    def p1(r):
        start_event(r, s, 100, 0)
        ints_event(r, s + 100, 101, 1, 0, 0)
        mix_event(r, s + 200, 102, 0, 1, 1)

    def p2(r):
        ints_event(r, 2 * s, 103, 1, 2, 4)

    def p3(r):
        start_event(r, 3 * s, 100, 0)

    with open(os.path.join(out, "channel0_0"), "wb") as f:
        f.write(packet(p1, s, s + 200, 0, 0))
        f.write(packet(p2, 2 * s, 2 * s, 1, 5))
        f.write(packet(p3, 3 * s, 3 * s, 4, 5))


if __name__ == "__main__":
    main()
