/*
 * ctl_client.h - a controller's connection to strata-consumerd (used by the
 * `strata` command and the tests).  One object, one socket, one thread.
 */
#ifndef STRATA_CONTROL_CTL_CLIENT_H
#define STRATA_CONTROL_CTL_CLIENT_H

#include <string>

#include "proto/proto.h"

namespace strata {

class CtlClient {
public:
	CtlClient() = default;
	CtlClient(const CtlClient &) = delete;
	CtlClient &operator=(const CtlClient &) = delete;
	~CtlClient();

	// Connect to `path`, or when empty to the first of
	// proto::client_socket_paths() that answers, and exchange HELLO.
	// 0, or a negative errno with `err` set.
	int open(const std::string &path, std::string &err);
	bool is_open() const { return fd_ >= 0; }
	const std::string &path() const { return path_; }

	// Send one request and wait for its answer (any type).  0 when an
	// answer arrived, a negative errno otherwise.
	int call(proto::Body body, proto::Message &answer, std::string &err);
	// For requests answered by REPLY: returns its status (0 ok, negative
	// errno from the daemon) and its text; transport errors likewise.
	int command(proto::Body body, std::string &text);
	// As command(), keeping the descriptor that came with the answer in
	// *fd (-1 if none; the caller closes it): AGG_FETCH.
	int command_fd(proto::Body body, std::string &text, int *fd);

	// The protocol version agreed at HELLO (2: WAIT and TARGET_RULE exist,
	// changes are answered at once).
	uint16_t version() const { return version_; }

	// Per-request deadline (default 30 s, $STRATA_CTL_TIMEOUT_MS).
	int timeout_ms = 30000;

private:
	int fd_ = -1;
	uint32_t seq_ = 1;
	uint16_t version_ = proto::kVersion;
	std::string path_;
};

} // namespace strata
#endif
