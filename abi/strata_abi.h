/*
 * strata_abi.h - the shared-memory ABI between traced processes, the consumer
 * daemon and the kernel module.  Version STRATA_ABI_MAJOR.STRATA_ABI_MINOR.
 *
 * This is the one place where the layout of a trace buffer is defined.  It is
 * read by processes of any bitness and by the kernel, so it uses only
 * fixed-width types, offsets instead of pointers, and static size checks.
 * The consumer treats every byte of it as hostile: it validates the header,
 * bounds every offset, and never follows anything it has not checked.
 *
 * Design and glossary: docs/ring-buffer.md.  In short:
 *
 *   buffer     one memfd mapping, for one (process, session slot).  A header,
 *              an event-descriptor table, lane control blocks, lane data.
 *   lane       one ring of n_subbuf sub-buffers.  A thread claims a lane on
 *              its first event and keeps it; with more threads than lanes,
 *              threads share lanes (the write algorithm is multi-writer safe).
 *   sub-buffer one CTF 1.8 packet: packet header + events + padding.
 *   position   a lane's 64-bit byte counter that only grows; the sub-buffer
 *              of position p is (p / subbuf_size) % n_subbuf and its "lap" is
 *              p / (subbuf_size * n_subbuf).
 *
 * Lane state machine (write position `head`):
 *
 *   head % subbuf_size == 0   "between packets": no packet is open.  The
 *                             next writer opens the packet at head (discard
 *                             mode: only if the consumer has released it).
 *   otherwise                 a packet is open; writers reserve inside it
 *                             with compare-and-swap on head.
 *
 *   open:   CAS head  p -> p + HDR + event   (writes the packet header)
 *   close:  CAS head  p -> roundup(p, S)     (writes content_size etc.,
 *                                             then commits the padding)
 *   A sub-buffer of lap w is complete when commit[idx] == (w + 1) * S.
 */
#ifndef STRATA_ABI_H
#define STRATA_ABI_H

#include "strata_limits.h"

#ifdef __KERNEL__
#include <linux/types.h>
typedef __u8 strata_u8;
typedef __u16 strata_u16;
typedef __u32 strata_u32;
typedef __u64 strata_u64;
typedef __s32 strata_s32;
typedef __s64 strata_s64;
#else
#include <stdint.h>
typedef uint8_t strata_u8;
typedef uint16_t strata_u16;
typedef uint32_t strata_u32;
typedef uint64_t strata_u64;
typedef int32_t strata_s32;
typedef int64_t strata_s64;
#endif

#define STRATA_ABI_MAGIC 0x53545241u /* "STRA" */
#define STRATA_ABI_MAJOR \
	3u /* 2: compact user records (STRATA_REC_COMPACT), owned/shared lanes;
			     3: the consumer's own commit counters (ccommit) */
#define STRATA_ABI_MINOR \
	7u /* 3.1: block_timeout_ms in the buffer header;
	      3.2: a lane's `records` count in overwrite mode;
	      3.3: block_timeouts in the buffer header;
	      3.4: STRATA_BUF_RETIRED;
	      3.5: a lane's writers_waiting;
	      3.6: a lane's writer_cpu;
	      3.7: a lane's owner_discarded */

/* ---- CTF packet and event layout (little-endian) -------------------------
 * Every sub-buffer is a complete CTF 1.8 packet.  Offsets from packet start. */
#define STRATA_CTF_MAGIC 0xC1FC1FC1u

struct strata_packet_header {
	strata_u32 magic;              /*  0: STRATA_CTF_MAGIC */
	strata_u8 uuid[16];            /*  4: trace uuid */
	strata_u32 stream_id;          /* 20: stream class (channel) id */
	strata_u64 stream_instance_id; /* 24: lane index */
	/* packet context */
	strata_u64 timestamp_begin;  /* 32 */
	strata_u64 timestamp_end;    /* 40 */
	strata_u64 content_size;     /* 48: bits, headers included */
	strata_u64 packet_size;      /* 56: bits */
	strata_u64 packet_seq_num;   /* 64: head / subbuf_size */
	strata_u64 events_discarded; /* 72: cumulative for the lane */
	strata_u32 lane_id;          /* 80 */
	/* 84: STRATA_REC_COMPACT buffers: the thread that opened the packet
	 * (an owned lane's only writer), -1 in a shared lane.  Kernel: 0. */
	strata_s32 vtid;
};
#define STRATA_PACKET_HEADER_SIZE 88u

/*
 * Two record formats; the buffer header's `record_format` says which.
 *
 * STRATA_REC_WIDE (the kernel module's buffers): header { id u16 (align 8
 * bytes), timestamp u64 (align 2) }, context { tid u32 (align 2), cpu u16
 * (align 2) }, then the payload, each field at its natural alignment
 * measured from the packet start.  Records start 8-byte aligned; the writer
 * pads between records.
 */
#define STRATA_EVENT_HEADER_SIZE 16u
#define STRATA_EVENT_ALIGN 8u
#define STRATA_EVENT_ID_OFF 0u
#define STRATA_EVENT_TS_OFF 2u
#define STRATA_EVENT_TID_OFF 10u
#define STRATA_EVENT_CPU_OFF 14u

/*
 * STRATA_REC_COMPACT (user-space buffers): byte-packed records, no padding
 * anywhere (a record starts where the previous one ended; fields follow
 * each other with no alignment, as LTTng-UST lays them out on x86).
 *
 *   compact header, 4 bytes: one little-endian u32,
 *       bits 0..4   event id (0..30)
 *       bits 5..31  the low 27 bits of the timestamp
 *   extended header, 13 bytes: byte 0 = 31 (bits 5..7 zero), then
 *       u32 event id at 1, u64 timestamp at 5.
 *
 * A reader rebuilds a compact timestamp from the previous timestamp of the
 * stream (the previous record, or the packet's timestamp_begin): the one
 * value >= it whose low 27 bits match.  So a writer may use the compact
 * form only when the record's timestamp is less than 2^27 above the
 * previous one; it knows a lower bound of it (its own last timestamp in the
 * lane: timestamps follow positions in a lane) and uses that.
 *
 * Lanes [0, n_lanes - n_shared_lanes) are owned by one thread at a time:
 * their packets carry the thread in the packet header's `vtid`, records
 * carry none (stream class `stream_id`).  Lanes from n_lanes -
 * n_shared_lanes on are shared by the threads that found no free owned
 * lane: each record has a 4-byte context { s32 vtid } after its header
 * (stream class `stream_id + 1`).
 */
#define STRATA_REC_WIDE 0u
#define STRATA_REC_COMPACT 1u
#define STRATA_REC_COMPACT_SIZE 4u
#define STRATA_REC_EXTENDED_SIZE 13u
#define STRATA_REC_EXTENDED_ID 31u
#define STRATA_REC_COMPACT_TS_BITS 27u
#define STRATA_REC_SHARED_CTX_SIZE 4u

/* ---- Buffer header (offset 0 of the mapping) ---------------------------- */
enum strata_channel_mode {
	STRATA_MODE_DISCARD = 0,   /* full: new events dropped and counted */
	STRATA_MODE_OVERWRITE = 1, /* full: oldest sub-buffer reused (flight recorder) */
};

/*
 * Blocking (discard mode only): a writer whose ring is full waits up to a
 * timeout for the consumer to release a sub-buffer before it discards
 * (docs/ring-buffer.md, "Blocking mode").  The channel configurations that
 * travel on the control protocols (struct strata_channel_config, proto's
 * ChannelConfig) carry it in the high bits of their `mode` word:
 *   bits 0..7   enum strata_channel_mode
 *   bits 8..31  blocking timeout in milliseconds, 0 = do not block
 * A peer older than this refuses such a mode word as a mode > 1 (a clear
 * refusal, never a silently non-blocking session).  The buffer header keeps
 * `mode` pure and gives the timeout in `block_timeout_ms` (ABI 3.1;
 * informational: the writer uses its private copy).
 */
#define STRATA_MODE_MASK 0xffu
#define STRATA_MODE_BLOCK_SHIFT 8u
#define STRATA_MODE_BLOCK_MAX_MS 0xffffffu
#define STRATA_MODE_BLOCK_MS(mode_word) ((mode_word) >> STRATA_MODE_BLOCK_SHIFT)

#define STRATA_MAX_LANES 256u
#define STRATA_MAX_SUBBUF 64u
#define STRATA_MIN_SUBBUF_SIZE 4096u
#define STRATA_MAX_SUBBUF_SIZE (64u << 20)
#define STRATA_NAME_MAX STRATA_LIMIT_NAME

struct strata_buffer_header {
	strata_u32 magic;        /* STRATA_ABI_MAGIC */
	strata_u16 abi_major;    /* incompatible changes */
	strata_u16 abi_minor;    /* compatible additions */
	strata_u32 header_size;  /* sizeof(struct strata_buffer_header) */
	strata_u32 endian_check; /* 0x01020304 as written by the producer */
	strata_u64 total_size;   /* bytes of the whole mapping */

	strata_u32 pid; /* producer's pid (in its own namespace) */
	strata_u32 uid;
	char comm[STRATA_NAME_MAX];    /* producer's process name */
	char channel[STRATA_NAME_MAX]; /* channel name, NUL-terminated */
	strata_u8 trace_uuid[16];      /* also in every packet header */
	strata_u32 stream_id;          /* CTF stream class id of this channel */
	strata_u32 mode;               /* enum strata_channel_mode */

	strata_u32 n_lanes;     /* 1..STRATA_MAX_LANES */
	strata_u32 n_subbuf;    /* 2..STRATA_MAX_SUBBUF, power of two */
	strata_u64 subbuf_size; /* STRATA_MIN..MAX_SUBBUF_SIZE, power of two */

	strata_u64 desc_offset;   /* event-descriptor table */
	strata_u64 desc_capacity; /* bytes reserved for it */
	strata_u64 lanes_offset;  /* array of n_lanes struct strata_lane_ctl */
	strata_u64 data_offset;   /* lane i data at data_offset + i*lane_stride */
	strata_u64 lane_stride;   /* n_subbuf * subbuf_size */

	/* Written by the producer (release) after appending descriptors; read
	 * by the consumer (acquire).  Bytes of valid records in the table. */
	strata_u64 desc_used;
	/* Bumped by writers (release) whenever a packet is closed; the consumer
	 * may FUTEX_WAIT on its low 32 bits when `consumer_waiting` is set. */
	strata_u32 wake_seq;
	strata_u32 consumer_waiting;
	/* Producer flags, see STRATA_BUF_* */
	strata_u32 flags;
	strata_u32 clock_id;       /* enum strata_clock_id: which clock stamped */
	strata_u64 lanes_claimed;  /* informational: lanes handed out so far */
	strata_u32 record_format;  /* STRATA_REC_WIDE or STRATA_REC_COMPACT */
	strata_u32 n_shared_lanes; /* COMPACT: the last n lanes are shared, 1..n_lanes */
	/* ABI 3.1: writers wait up to this for a full ring (0: discard at
	 * once; discard mode only).  3.0 producers leave it 0. */
	strata_u32 block_timeout_ms;
	/* ABI 3.3: writers' blocking waits that ran to block_timeout_ms (the
	 * consumer did not free a sub-buffer in time); writers add (relaxed
	 * atomic add, the wait's cold path), the consumer reports it: the
	 * events a process discarded in blocking mode came after such a wait
	 * (docs/ring-buffer.md, "Blocking mode").  Older producers leave 0. */
	strata_u32 block_timeouts;
	strata_u64 reserved[6];
};

#define STRATA_BUF_PRODUCER_EXITED 0x1u /* set by the producer's destructor */
/* Set by the consumer (atomic OR) on an overwrite-mode buffer it now drains
 * as it fills: from then on writers treat the buffer as discard mode (a
 * sub-buffer is free only once consumed).  An early buffer adopted by a
 * session keeps its flight-recorder history and loses nothing after
 * (docs/ring-buffer.md, "Streaming a flight recorder"). */
#define STRATA_BUF_STREAMED 0x2u
/* Set by the producer at creation when it registered for
 * MEMBARRIER_CMD_GLOBAL_EXPEDITED: the owner of an owned lane updates
 * `head` with an unlocked cmpxchg while `close_req` is 0, inside an
 * `owner_busy` window.  A consumer closing such a lane first raises
 * `close_req`, issues that membarrier and waits for `owner_busy` == 0
 * (docs/ring-buffer.md, "Unlocked reserve on owned lanes"). */
#define STRATA_BUF_FAST_OWNER 0x4u
/* ABI 3.4: set by the producer (release) when it closed the buffer's slot
 * and replaced its mapping of everything past the header page by private
 * pages: no access of its writers to a lane's control words or data
 * reaches the shared buffer any more, so a consumer that sees it (acquire)
 * waits for no writer: no owner window, no commit still in flight (a
 * reservation never committed is cut, docs/ring-buffer.md "A retired
 * buffer").  Older producers never set it. */
#define STRATA_BUF_RETIRED 0x8u

enum strata_clock_id {
	STRATA_CLOCK_MONOTONIC = 0,     /* CLOCK_MONOTONIC via the vDSO */
	STRATA_CLOCK_PAGE = 1,          /* TSC through the kernel module's clock page */
	STRATA_CLOCK_CONSUMER_PAGE = 2, /* TSC through strata-consumerd's clock page */
};

/* One per lane, 64-byte aligned.  Written by writers except `consumed` and
 * `ccommit`.  A sub-buffer's committed bytes are commit[i] + ccommit[i]:
 * producers add to commit[i] (a lane's owner without a locked instruction,
 * docs/ring-buffer.md "Commit counters"), the consumer adds the padding of
 * the packets it closes itself to ccommit[i] only, so that the two never
 * add to one word. */
struct strata_lane_ctl {
	strata_u64 head;             /* write position; writers CAS it */
	strata_u64 events_discarded; /* cumulative; writers add */
	strata_u64 owner_tid;        /* informational: last claiming thread */
	strata_u64
		owner_busy; /* FAST_OWNER owned lanes: the owner's unlocked inc/dec around its head update */
	strata_u64 close_req; /* FAST_OWNER owned lanes: consumers closing it (atomic add/sub) */
	/* ABI 3.2, COMPACT buffers in overwrite mode: cumulative records
	 * committed in the lane, added before each record's commit (an owned
	 * lane's owner without a locked instruction, as commit[]).  The reader
	 * counts what the ring overwrote as this minus the records it took
	 * (docs/ring-buffer.md, "Loss accounting").  0 otherwise. */
	strata_u64 records;
	/* ABI 3.6: the CPU the writer that opened the lane's newest packet ran
	 * on, plus 1 (0: unknown, an older producer); a relaxed store at each
	 * open.  A hint for the consumer's placement only (docs/consumerd.md,
	 * "The daemon beside its writers"): any value is harmless. */
	strata_u32 writer_cpu;
	strata_u32 pad0a;
	/* ABI 3.7: the discards of an owned lane's owners, added without a
	 * locked instruction (as commit[]: only the owner adds, and its signal
	 * handlers run before or after the one instruction); everyone else
	 * (shared lanes, the consumer's cuts) adds to events_discarded with a
	 * locked add.  The lane's count is the sum of the two, read one load
	 * each.  Older producers leave it 0. */
	strata_u64 owner_discarded;
	strata_u64 consumed; /* consumer: next position to read */
	/* ABI 3.5, blocking mode: writers sleeping on the low 32 bits of
	 * `consumed` (FUTEX_WAIT, shared) for a sub-buffer; each adds 1 before
	 * its last look at `consumed` and takes it back after (seq_cst RMWs).
	 * A consumer that sees it non-zero after its store of `consumed`
	 * (seq_cst fence between) FUTEX_WAKEs that word.  Older peers: never
	 * set, never looked at; the waits are bounded either way
	 * (docs/ring-buffer.md, "Blocking mode"). */
	strata_u32 writers_waiting;
	strata_u32 pad_w;
	strata_u64 pad1[6];
	strata_u64 commit[STRATA_MAX_SUBBUF];  /* cumulative bytes producers committed */
	strata_u64 ccommit[STRATA_MAX_SUBBUF]; /* cumulative bytes the consumer committed */
};

#ifndef __KERNEL__
/* A lane's discarded events (ABI 3.7): the sum of its two counters, one
 * relaxed load each, whoever reads it (the writers' closer, the consumer's
 * close and final count, a process's last look).  Each counter only grows,
 * so a sum read later than another is not smaller (coherence); it orders
 * nothing else. */
static inline strata_u64 strata_lane_discarded(struct strata_lane_ctl *lc)
{
	return __atomic_load_n(&lc->events_discarded, __ATOMIC_RELAXED) +
	       __atomic_load_n(&lc->owner_discarded, __ATOMIC_RELAXED);
}
#endif

/* ---- Event descriptor table ---------------------------------------------
 * An append-only sequence of records, each starting 8-byte aligned:
 *   struct strata_desc_event, then n_fields struct strata_desc_field,
 *   then a string pool (names, enum labels) referenced by offsets from the
 *   start of the record.  The consumer validates every size and offset. */
enum strata_field_type {
	STRATA_FT_INTEGER = 1,  /* size 8/16/32/64, signed flag, base */
	STRATA_FT_FLOAT = 2,    /* size 32/64 */
	STRATA_FT_ENUM = 3,     /* integer container + n_labels mappings */
	STRATA_FT_STRING = 4,   /* NUL-terminated UTF-8 */
	STRATA_FT_ARRAY = 5,    /* fixed length of integer elements */
	STRATA_FT_SEQUENCE = 6, /* u32 length, then integer elements */
};

struct strata_desc_field {
	strata_u32 name_off; /* from record start */
	strata_u8 type;      /* enum strata_field_type */
	strata_u8 elem_bits; /* integer/element size in bits */
	strata_u8 is_signed;
	strata_u8 base;        /* 2, 8, 10, 16 */
	strata_u32 length;     /* ARRAY: element count */
	strata_u32 n_labels;   /* ENUM: entries at labels_off */
	strata_u32 labels_off; /* ENUM: n_labels struct strata_desc_enum_label */
	strata_u32 reserved;
};

/*
 * Enum mappings (ABI 1.1): n_labels counts entries.  An entry with flags 0
 * maps label_off to the single value `value`.  An entry with
 * STRATA_DESC_LABEL_RANGE_END has no label (label_off 0): it extends the
 * previous entry to the range [previous value, value] (STRATA_ENUM_RANGE).
 * Readers of ABI 1.0 saw flags as `reserved` (always 0 for single values).
 */
struct strata_desc_enum_label {
	strata_s64 value;
	strata_u32 label_off; /* from record start */
	union {
		strata_u32 reserved;
		strata_u32 flags; /* STRATA_DESC_LABEL_* */
	};
};
#define STRATA_DESC_LABEL_RANGE_END 0x1u

struct strata_desc_event {
	strata_u32 record_size; /* whole record, multiple of 8 */
	strata_u32 id;          /* event id in this buffer's stream class */
	strata_u32 loglevel;    /* enum strata_loglevel (include/strata) */
	strata_u32 n_fields;
	strata_u32 provider_off; /* from record start */
	strata_u32 name_off;     /* from record start */
};

#define STRATA_DESC_MAX_FIELDS 64u
#define STRATA_DESC_MAX_RECORD 65536u

#ifndef __KERNEL__
#ifdef __cplusplus
#define STRATA_ABI_ASSERT(c, m) static_assert(c, m)
#else
#define STRATA_ABI_ASSERT(c, m) _Static_assert(c, m)
#endif
STRATA_ABI_ASSERT(sizeof(struct strata_packet_header) == STRATA_PACKET_HEADER_SIZE,
		  "packet header size is ABI");
STRATA_ABI_ASSERT(sizeof(struct strata_buffer_header) == 336, "buffer header size is ABI");
STRATA_ABI_ASSERT(sizeof(struct strata_lane_ctl) == 128 + 16 * STRATA_MAX_SUBBUF, "lane control size is ABI");
STRATA_ABI_ASSERT(__builtin_offsetof(struct strata_lane_ctl, writer_cpu) == 48,
		  "writer_cpu where pad0 began, in the writers' line");
STRATA_ABI_ASSERT(__builtin_offsetof(struct strata_lane_ctl, writers_waiting) == 72,
		  "writers_waiting shares the consumer's line, after consumed");
STRATA_ABI_ASSERT(sizeof(struct strata_desc_field) == 24, "field descriptor size is ABI");
STRATA_ABI_ASSERT(sizeof(struct strata_desc_event) == 24, "event descriptor size is ABI");
STRATA_ABI_ASSERT(sizeof(struct strata_desc_enum_label) == 16, "enum label size is ABI");
#endif

#endif /* STRATA_ABI_H */
