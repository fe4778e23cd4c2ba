/*
 * sync_shared.h - what the files of the process side of the control plane
 * share (private to libtrace/control): the query's state, held by whoever
 * holds g_busy, and the steps each file takes.  The files, by role:
 *   sync_query.cpp  the state query and asynchronous enablement: the
 *                   protocol (its head comment), the state, REGISTER and
 *                   the grants applied, the entry points (control.h)
 *   sync_join.cpp   the exchange with the daemon and the slots a grant
 *                   opens; the grant table read; early tracing
 *   sync_lazy.cpp   a table grant's buffer handed over at the slot's
 *                   first event
 *   sync_marks.cpp  probe marks: telling the daemon a probe report exists
 *   sync_agg.cpp    aggregation sessions and their helper thread
 *   sync_kmod.cpp   the kernel module's answer to the state query
 * Everything here is async-signal-safe unless it says "thread context".
 */
#ifndef STRATA_CONTROL_SYNC_SHARED_H
#define STRATA_CONTROL_SYNC_SHARED_H

#include <sys/types.h>
#include <time.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "proto/proc_codec.h"
#include "runtime.h"

namespace strata {
namespace syncq {

using proto::pc::Grants;
using proto::pc::Writer;

constexpr size_t kPathMax = proto::kSockPathMax;
constexpr size_t kInCap = 256 * 1024; // REGISTER_REPLY at its largest is ~210 KiB
constexpr size_t kOutCap = 64 * 1024;

struct State {
	char paths[2][kPathMax];
	int n_paths;
	char comm[64];
	int signo; // asynchronous enablement signal, 0: none
	int64_t timeout_ms;
	uint64_t joined[proto::kMaxSlots]; // session id of each open slot, 0: closed
	uint32_t seq;
	// In the order a start-up touches them: the fields above and the first
	// grant share a page, `out` holds the grant table and then what we send
	// (docs/benchmarks.md: each first touch of a page costs ~12 us).
	Grants grants;
	uint8_t out[kOutCap];
	uint8_t in[proto::kHeaderSize + kInCap];
};
extern State g_state;
extern std::atomic<int> g_busy;
extern std::atomic<int> g_again;
extern std::atomic<int> g_ready;

// STRATA_DEBUG: when the query's stages ended, stamped only when asked (a
// clock read touches the vDSO's pages: a start-up cost).  Holder of g_busy.
struct Stages {
	bool on;
	int n;
	const char *name[8];
	struct timespec t[8];
};
extern Stages g_stages;
void stage(const char *name);
void say_as(const char *lead, const char *a, const char *b = "", const char *c = "");
void say(const char *a, const char *b = "", const char *c = "");
void put_decimal(char *out, size_t *n, uint32_t v);
const char *err_text(int e);
// Thread context only (getenv): fills what the handler reads.
void init();

// sync_marks.cpp
extern std::atomic<bool> g_has_report;
extern std::atomic<bool> g_note_owed;
extern std::atomic<uint64_t> g_reg;
extern std::atomic<uint32_t> g_told;
int connect_quiet_first(int i, int64_t dl);
void knock(int i);
void note_last_daemon(uint8_t *buf, size_t cap);
void on_report_made();
void registered_with(int i, uint32_t daemon_pid, bool old, bool flagged);

// sync_join.cpp
int exchange(int fd, const Writer &w, int pass_fd, proto::Type expect, int64_t dl, size_t *len, char *text,
	     size_t cap, int *got_fd = nullptr);
bool encode_hello_register(Writer &w, uint32_t flags, bool list_events, uint64_t table_gen = 0);
int join(int fd, const proto::pc::Grant &g, int64_t dl);
extern bool g_no_daemon;
void early_open();
bool close_ungranted(const bool granted[proto::kMaxSlots]);
void new_uuid(uint8_t uuid[16]);
bool read_table(const char *sock, proto::pc::TableInfo *info);
bool table_clock(const proto::pc::TableInfo &t);

// sync_lazy.cpp
struct LazyHandoff {
	uint64_t session_id;
	uint64_t table_gen;
	uint32_t path;   // index into g_state.paths
	uint32_t module; // 1: the module granted the slot (kRegisterModule), 0: the table did
};
int lazy_handoff(unsigned slot, int memfd, const void *ctx);
int join_lazy(unsigned slot, const struct strata_channel_config *cfg, const uint8_t uuid[16],
	      const struct strata_rule *rules, uint32_t n_rules, uint64_t session_id, const LazyHandoff &h);
int table_join(int fd, int path, const proto::pc::TableInfo &t, bool list_events, int64_t dl);

// sync_agg.cpp
struct AggSlot {
	uint64_t session_id; // of the grant it counts for, 0: none
	strata_rt_agg *agg;
};
extern AggSlot g_agg[proto::kMaxSlots];
extern bool g_thread_ctx;
extern std::atomic<bool> g_daemon_agg;
extern int g_ack_fd;
extern std::atomic<int> g_agg_wake;
int agg_settle(int fd, int64_t dl);
void agg_helper_start();

// sync_kmod.cpp
int to_daemon(const char *path, bool list_events, int slot, int memfd, int64_t dl);
int kmod_query_once(bool list_events);

// sync_query.cpp
int query_once(bool list_events);
int run_queries(bool list_events, bool thread_ctx);

} // namespace syncq
} // namespace strata

#endif
