/*
 * sync_query.cpp - strata_ctl_sync_query(), see control.h.
 *
 * Exchange (docs/control-protocol.md, "Registration"):
 *
 *   process                         strata-consumerd
 *     HELLO(role=process)   ---->
 *                           <----   HELLO_REPLY
 *     REGISTER(pid,uid,comm,
 *              abi, events) ---->   (opens a pidfd on the peer)
 *                           <----   REGISTER_REPLY(active sessions)
 *     per session: slot_open, set_rules
 *     BUFFER(slot) + memfd  ---->
 *                           <----   REPLY(status)  (nonzero: slot closed again)
 *     close(socket)
 *
 * The daemon's answers are validated by the decoder like anything else; a
 * daemon that lies can at worst make this process trace into a buffer nobody
 * reads, which costs memory bounded by the channel configuration.
 */
#include "control.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <time.h>
#include <unistd.h>

#include "proto/proto.h"
#include "proto/sock.h"
#include "runtime.h"

namespace strata {
namespace {

void warn(const std::string &what)
{
	fprintf(stderr, "strata: tracing disabled for this session: %s\n", what.c_str());
}

std::string own_comm()
{
	char buf[64] = {};
	FILE *f = fopen("/proc/self/comm", "re");
	if (f) {
		if (!fgets(buf, sizeof(buf), f))
			buf[0] = 0;
		fclose(f);
	}
	std::string s(buf);
	while (!s.empty() && (s.back() == '\n' || s.back() == '\0'))
		s.pop_back();
	return s.empty() ? "unknown" : s;
}

int64_t timeout_ms()
{
	const char *e = getenv("STRATA_REGISTER_TIMEOUT_MS");
	if (e && *e) {
		long v = strtol(e, nullptr, 10);
		if (v >= 0 && v <= 60000)
			return v;
	}
	return 1000;
}

// One session: open the slot, arm it, hand the buffer over.  0 if traced.
int join(int fd, const proto::SessionGrant &g, uint32_t seq, int64_t deadline)
{
	struct strata_channel_config cfg;
	memset(&cfg, 0, sizeof(cfg));
	snprintf(cfg.name, sizeof(cfg.name), "%s", g.channel.name.c_str());
	cfg.stream_id = g.channel.stream_id;
	cfg.mode = g.channel.mode;
	cfg.n_lanes = g.channel.n_lanes;
	cfg.n_subbuf = g.channel.n_subbuf;
	cfg.subbuf_size = g.channel.subbuf_size;

	proto::Message m;
	m.seq = seq;
	proto::Buffer b;
	b.slot = g.slot;
	int memfd = strata_rt_slot_open(g.slot, &cfg, g.trace_uuid);
	if (memfd >= 0) {
		struct strata_rule rules[STRATA_MAX_RULES];
		size_t n = 0;
		for (const proto::Rule &r : g.rules) {
			if (n == STRATA_MAX_RULES)
				break;
			memset(&rules[n], 0, sizeof(rules[n]));
			snprintf(rules[n].pattern, sizeof(rules[n].pattern), "%s", r.pattern.c_str());
			snprintf(rules[n].filter, sizeof(rules[n].filter), "%s", r.filter.c_str());
			rules[n].loglevel_max = r.loglevel_max;
			rules[n].enable = r.enable;
			n++;
		}
		int r = strata_rt_slot_set_rules(g.slot, rules, n);
		if (r < 0) {
			strata_rt_slot_close(g.slot);
			memfd = r;
		}
	}
	b.status = memfd < 0 ? memfd : 0;
	m.body = b;
	int r = proto::send_message(fd, m, memfd, deadline);
	proto::Message reply;
	std::string err;
	if (r == 0)
		r = proto::recv_message(fd, reply, nullptr, deadline, err);
	else
		err = strerror(-r);
	if (r == 0 && reply.type() != proto::Type::Reply) {
		r = -EPROTO;
		err = "unexpected answer to BUFFER";
	}
	if (r == 0 && std::get<proto::Reply>(reply.body).status != 0) {
		r = std::get<proto::Reply>(reply.body).status;
		err = std::get<proto::Reply>(reply.body).text;
	}
	if (memfd >= 0 && r < 0)
		strata_rt_slot_close(g.slot);
	if (r < 0 || memfd < 0)
		warn("slot " + std::to_string(g.slot) + ": " +
		     (memfd < 0 ? std::string("cannot open buffer: ") + strerror(-memfd) : err));
	return r < 0 ? r : memfd < 0 ? memfd : 0;
}

int query()
{
	const int64_t deadline = proto::now_ms() + timeout_ms();
	int fd = -1;
	for (const std::string &path : proto::client_socket_paths()) {
		fd = proto::connect_unix(path, deadline);
		if (fd >= 0)
			break;
	}
	if (fd < 0)
		return 0; // no daemon: tracing stays off, silently

	std::string err;
	proto::Message req, reply;
	uint32_t seq = 1;
	req.seq = seq++;
	proto::Hello hello;
	hello.role = static_cast<uint32_t>(proto::Role::Process);
	hello.client = "libstrata";
	req.body = hello;
	int r = proto::request(fd, req, reply, deadline, err);
	if (r == 0 && reply.type() != proto::Type::HelloReply) {
		r = -EPROTO;
		err = reply.type() == proto::Type::Reply ? std::get<proto::Reply>(reply.body).text :
							   "unexpected answer to HELLO";
	}

	if (r == 0) {
		proto::Register reg;
		reg.pid = static_cast<uint32_t>(getpid());
		reg.uid = static_cast<uint32_t>(getuid());
		reg.abi_major = STRATA_ABI_MAJOR;
		reg.abi_minor = STRATA_ABI_MINOR;
		reg.comm = own_comm();
		uint32_t n = strata_rt_event_count();
		for (uint32_t id = 0; id < n && id < proto::kMaxEvents; id++) {
			char name[2 * proto::kMaxName + 2];
			uint32_t ll = 0;
			if (strata_rt_event_name(id, name, sizeof(name), &ll) == 0)
				reg.events.push_back({name, ll});
		}
		req.seq = seq++;
		req.body = std::move(reg);
		r = proto::request(fd, req, reply, deadline, err);
		if (r == 0 && reply.type() != proto::Type::RegisterReply) {
			r = -EPROTO;
			err = reply.type() == proto::Type::Reply ?
				      std::get<proto::Reply>(reply.body).text :
				      "unexpected answer to REGISTER";
		}
	}
	int joined = 0;
	if (r == 0) {
		for (const proto::SessionGrant &g : std::get<proto::RegisterReply>(reply.body).sessions)
			if (join(fd, g, seq++, deadline) == 0)
				joined++;
		if (joined)
			strata_rt_quiesce();
	} else {
		warn(err);
	}
	close(fd);
	return r < 0 ? r : joined;
}

} // namespace
} // namespace strata

extern "C" int strata_ctl_sync_query(void)
{
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int r;
	try {
		r = strata::query();
	} catch (...) {
		// std::bad_alloc at worst: never let it escape into the host.
		r = -ENOMEM;
	}
	const char *dbg = getenv("STRATA_DEBUG");
	if (dbg && *dbg && *dbg != '0') {
		clock_gettime(CLOCK_MONOTONIC, &t1);
		long us = (t1.tv_sec - t0.tv_sec) * 1000000L + (t1.tv_nsec - t0.tv_nsec) / 1000;
		fprintf(stderr, "strata: state query: %d session(s) joined in %ld us\n", r, us);
	}
	return r;
}
