#!/usr/bin/env python3
"""pack_trace_seed.py SUBTRACE_DIR OUT: one sub-trace (its metadata and stream
files) as one input of trace_fuzz.cpp: u32 metadata length, the metadata,
then the stream files separated by F1 F1 F1 F1.  How tests/fuzz/trace_corpus/
was made: sub-traces recorded by `strata record` (see its README)."""
import os
import struct
import sys

d, out = sys.argv[1], sys.argv[2]
meta = open(os.path.join(d, "metadata"), "rb").read()
streams = [open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d))
           if f != "metadata" and not f.startswith(".") and os.path.isfile(os.path.join(d, f))]
with open(out, "wb") as f:
    f.write(struct.pack("<I", len(meta)) + meta + b"\xf1\xf1\xf1\xf1".join(streams))
